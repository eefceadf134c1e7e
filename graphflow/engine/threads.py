"""Operations on a thread from outside a run: ``cancel``, ``freeze``, ``unfreeze``.

``freeze``/``unfreeze`` stop and restart a thread from outside (incident response).
``cancel`` takes the lease and commits a ``cancelled`` head in one transaction.
(``submit`` is ``engine.answering``; ``update_state`` is ``engine.update``.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from checkpoints.base import Checkpointer
from checkpoints.batch import CommitBatch, ThreadUpdate
from checkpoints.errors import (
    LeaseHeldError,
    head_missing,
)
from checkpoints.lease import new_owner
from checkpoints.models import (
    CheckpointRecord,
    CheckpointSource,
    ThreadId,
    ThreadRecord,
    ThreadStatus,
    new_checkpoint_id,
)
from graphflow.engine import lease, start
from graphflow.engine.committer import Committer
from graphflow.engine.reads import carried_step
from graphflow.engine.witness import Witness
from graphflow.errors import (
    InvalidArgumentError,
    ThreadBusyError,
    ThreadCancelledError,
    ThreadFinishedError,
    ThreadFrozenError,
    ThreadNotFoundError,
)
from graphflow.evidence import EventDraft, EvidenceLog, stages
from graphflow.spec import GraphSpec


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
        "cancel",
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
        "freeze",
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
        "unfreeze",
        Witness(evidence, thread_id),
        lambda ck: stages.unfrozen(thread_id=thread_id, by=by, reason=reason, checkpoint_id=ck),
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
    source: CheckpointSource,
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
    ck = head.child(ck_id, source, step=head.step, frontier=head.frontier, metadata=metadata)
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
