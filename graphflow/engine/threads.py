"""Operations on a thread from outside a run: ``submit``, ``cancel``, ``list_decisions``.

``freeze``/``unfreeze`` stop and restart a thread from outside (incident response).
``submit`` records answers durably without running anything (append only, no lease needed:
the next run of the thread, in any process, applies them); the answers follow the same
rules as ``invoke``'s (``engine.answers``). Once every pending pause is answered, the same
transaction marks the thread runnable (``Checkpointer.record_answers``) for a worker.
``cancel`` takes the lease and commits a ``cancelled`` head in one transaction.
(``update_state`` is ``engine.update``.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from checkpoints.base import Checkpointer
from checkpoints.batch import CommitBatch, ThreadUpdate
from checkpoints.errors import CheckpointError, LeaseHeldError, head_missing
from checkpoints.lease import lease_free, new_owner
from checkpoints.models import (
    CheckpointRecord,
    DecisionRecord,
    ThreadId,
    ThreadRecord,
    ThreadStatus,
    new_checkpoint_id,
    now,
)
from graphflow.decisions import Decision
from graphflow.engine import answers, lease, start
from graphflow.engine.committer import Committer
from graphflow.engine.pauses import UNSET, pause_from_record, principal_name
from graphflow.engine.reads import carried_step
from graphflow.engine.witness import Witness
from graphflow.errors import (
    InvalidArgumentError,
    NothingToResumeError,
    ThreadBusyError,
    ThreadCancelledError,
    ThreadFinishedError,
    ThreadFrozenError,
    ThreadNotFoundError,
)
from graphflow.evidence import EventDraft, EvidenceLog, stages
from graphflow.spec import GraphSpec
from graphflow.types import Pause


async def submit(
    store: Checkpointer,
    thread_id: str,
    *,
    decisions: Mapping[str, Decision],
    resume: Any = UNSET,
    by: Any = None,
    reason: str | None = None,
    evidence: EvidenceLog | None = None,
) -> tuple[DecisionRecord, ...]:
    """Record answers to a paused thread's pauses; return the decisions that answered
    nothing (each recorded, with the reason in ``note``). ``decisions`` must have been
    checked (``answers.check_decisions``). Their evidence is written first: while the log
    cannot be written, nothing is recorded (``EvidenceError``); when the store then refuses
    the records, each decision gets a second event saying it did not take effect."""
    if resume is UNSET and not decisions:
        raise InvalidArgumentError("submit needs decisions= or resume= to record")
    if by is not None:  # an id, or a Principal (its roles count for its own decisions)
        decisions = {
            k: d if d.by is not None else dataclasses.replace(d, by=by)
            for k, d in decisions.items()
        }
        by = principal_name(by)
    th = await store.get_thread(ThreadId(thread_id))
    if th is None:
        raise ThreadNotFoundError(thread_id)
    if th.status == "frozen":
        raise ThreadFrozenError(thread_id)
    if th.lease_owner is not None and not lease_free(
        th.lease_owner, th.lease_expires_at, "", now()
    ):
        # A run holds it, perhaps applying answers to these pauses or running the approved
        # call: a decision now could not take effect, yet would be recorded as applied.
        raise ThreadBusyError(thread_id, th.lease_owner, answering=True)
    pending = list(th.pending_pause_ids)
    if not pending:
        raise NothingToResumeError(thread_id)
    records = await store.get_pauses(th.thread_id, pending)
    found = answers.resolve(
        thread_id, records, resume=resume, decisions=decisions, by=by, reason=reason
    )
    witness = Witness(evidence, thread_id)
    witness.recall(records)  # (a pause's event that a power loss took: see witness)
    witness.add_answers(found.decisions, found.answers, {p.id: p for p in records})
    if witness.enabled:  # (a graph without evidence records its answers all the same)
        await witness.require()
    # When every pending pause is answered now (a deferred call needs none: it is evaluated
    # again by the run), the thread is marked runnable in the same transaction, unless it
    # changed since it was read (a worker then finds it in the index at once).
    answered = {a.pause_id for a in found.answers}
    waiting = [p for p in records if p.id not in answered and not start.deferred(p)]
    if waiting:
        stored = await store.load_answers(th.thread_id, [p.id for p in waiting])
        waiting = [p for p in waiting if p.id not in stored]
    if found.decisions or found.answers:
        try:
            await store.record_answers(
                th.thread_id,
                found.decisions,
                found.answers,
                runnable_if_updated_at=None if waiting or not found.answers else th.updated_at,
            )
        except CheckpointError as e:  # (locked, read-only, full: the decisions took no effect)
            witness.add_unrecorded(found.decisions, found.answers, {p.id: p for p in records}, e)
            await witness.flush()  # (best effort: the error below is what the caller sees)
            raise
    return found.ignored


async def pending_pauses(store: Checkpointer, thread_id: str) -> list[Pause]:
    """The pauses a thread waits on, each with the answer ``submit`` stored for it, if any
    (answered, not yet applied: the next run applies it)."""
    th = await store.get_thread(ThreadId(thread_id))
    if th is None:
        raise ThreadNotFoundError(thread_id)
    ids = list(th.pending_pause_ids)
    records = await store.get_pauses(th.thread_id, ids) if ids else []
    stored = await store.load_answers(th.thread_id, ids) if ids else {}
    return [pause_from_record(r, stored.get(r.id)) for r in records]


async def list_decisions(store: Checkpointer, thread_id: str) -> list[DecisionRecord]:
    """The thread's decision records, oldest first, as they took effect (see
    ``answers.effective``)."""
    if await store.get_thread(ThreadId(thread_id)) is None:
        raise ThreadNotFoundError(thread_id)
    return answers.effective(await store.list_decisions(ThreadId(thread_id)))


async def cancel(
    spec: GraphSpec,
    store: Checkpointer,
    thread_id: str,
    *,
    reason: str,
    by: str | None,
    evidence: EvidenceLog | None = None,
) -> None:
    """End a thread that is not done: it runs nothing more; the reason and actor are kept
    in the metadata of its last checkpoint."""
    th, head = await _head(store, thread_id)
    frozen_from = (head.metadata.get("frozen") or {}).get("previous")
    if th.status == "done" or (th.status == "frozen" and frozen_from == "done"):
        raise ThreadFinishedError(thread_id)  # (frozen once done: a finished thread still)
    if th.status == "cancelled":
        raise ThreadCancelledError(thread_id)
    cancelled = {"reason": reason, "by": by, "pauses": list(th.pending_pause_ids)}
    await _mark(
        spec,
        store,
        th,
        head,
        {"cancelled": cancelled},
        ThreadUpdate("cancelled", ()),
        Witness(evidence, thread_id),
        lambda ck: stages.cancelled(thread_id=thread_id, reason=reason, by=by, checkpoint_id=ck),
    )


async def freeze(
    spec: GraphSpec,
    store: Checkpointer,
    thread_id: str,
    *,
    by: str | None,
    reason: str,
    evidence: EvidenceLog | None = None,
) -> None:
    """Freeze a thread from outside (incident response): no run starts and no decision
    applies until ``unfreeze``; its pending pauses are kept. A thread a run holds is busy
    (``ThreadBusyError``): freeze it when the run has stopped."""
    th, head = await _head(store, thread_id)
    if th.status == "cancelled":
        raise ThreadCancelledError(thread_id)
    if th.status == "frozen":
        raise ThreadFrozenError(thread_id)
    frozen = {"reason": reason, "by": by, "previous": th.status}
    update = ThreadUpdate("frozen", th.pending_pause_ids, spec.name)
    await _mark(
        spec,
        store,
        th,
        head,
        {"frozen": frozen},
        update,
        Witness(evidence, thread_id),
        lambda ck: stages.frozen(thread_id=thread_id, reason=reason, by=by, checkpoint_id=ck),
    )


async def unfreeze(
    spec: GraphSpec,
    store: Checkpointer,
    thread_id: str,
    *,
    by: str | None,
    reason: str,
    evidence: EvidenceLog | None = None,
) -> None:
    """Unfreeze a frozen thread: it is as it was before (a thread that a node's policy froze
    waits for ``invoke(None)``, which runs that node again)."""
    th, head = await _head(store, thread_id)
    if th.status != "frozen":
        raise InvalidArgumentError(f"thread {thread_id!r} is {th.status}, not frozen")
    found = (head.metadata.get("frozen") or {}).get("previous")
    # Frozen by a node, or while it was running: it waits for invoke(None).
    previous: ThreadStatus = found if found in ("paused", "done", "failed") else "paused"
    update = ThreadUpdate(previous, th.pending_pause_ids, spec.name)
    await _mark(
        spec,
        store,
        th,
        head,
        {"unfrozen": {"reason": reason, "by": by}},
        update,
        Witness(evidence, thread_id),
        lambda ck: stages.unfrozen(
            thread_id=thread_id, by=by or "system", reason=reason, checkpoint_id=ck
        ),
    )
    if previous == "paused":  # freezing removed its runnable mark: answered, it is runnable
        await _runnable_if_answered(store, th.thread_id)


async def _runnable_if_answered(store: Checkpointer, thread_id: ThreadId) -> None:
    """Mark a paused thread runnable when every pending pause (deferred ones aside) has an
    answer, unless it changed since it was read."""
    th = await store.get_thread(thread_id)
    if th is None or th.status != "paused" or not th.pending_pause_ids:
        return
    records = await store.get_pauses(thread_id, list(th.pending_pause_ids))
    waiting = [p.id for p in records if not start.deferred(p)]
    stored = await store.load_answers(thread_id, waiting)
    if all(p in stored for p in waiting):
        await store.mark_runnable(thread_id, reason="answered", if_updated_at=th.updated_at)


async def _head(store: Checkpointer, thread_id: str) -> tuple[ThreadRecord, CheckpointRecord]:
    th = await store.get_thread(ThreadId(thread_id))
    if th is None or th.head is None:
        raise ThreadNotFoundError(thread_id)
    head = await store.get_checkpoint(th.thread_id, "", th.head)
    if head is None:
        raise head_missing(thread_id, th.head)
    return th, head


async def _mark(
    spec: GraphSpec,
    store: Checkpointer,
    th: ThreadRecord,
    head: CheckpointRecord,
    metadata: dict[str, Any],
    update: ThreadUpdate,
    witness: Witness,
    event: Callable[[str], EventDraft],
) -> None:
    """Commit a copy of the head whose metadata says what happened, with the thread's new
    status, under the thread's lease (one transaction, which also gives it up). Its evidence
    ``event`` (of the new checkpoint's id) is committed in that transaction, in the commit's
    outbox, and written to the log once it is committed: the log never holds the event of a
    change the store refused, and an event the log cannot take now stays in the outbox (an
    incident response never waits on the log), written when the thread is next run or
    audited."""
    tid = th.thread_id
    ck_id = new_checkpoint_id()
    ck = head.child(ck_id, "update", step=head.step, frontier=head.frontier, metadata=metadata)
    # The pending step is kept as it is: its tasks' records and memoized steps carry over.
    tasks, memos = await carried_step(store, head, ck_id)
    committer = Committer(store, tid, new_owner(), spec.lease_ttl)
    try:
        await store.acquire_lease(tid, committer.owner, spec.lease_ttl, graph_name=spec.name)
    except LeaseHeldError as e:
        raise ThreadBusyError(tid, e.owner) from e
    ttl = spec.lease_ttl
    async with lease.held(store, tid, committer.owner, ttl, lambda: committer.released):
        witness.add(f"mark:{ck_id}", event(ck_id))
        batch = CommitBatch.step(
            ck,
            [],
            tasks=tasks,
            memos=[*memos, *witness.outbox(ck_id)],
            thread=update,
            expected_head=th.head,
            check_head=True,
        )
        await committer.commit(batch, last=True)
    await witness.flush()  # (once it is committed; else it stays in the outbox)
