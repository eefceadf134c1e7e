"""Operations on a thread from outside a run: ``cancel``, ``freeze``, ``unfreeze``.

``freeze``/``unfreeze`` stop and restart a thread from outside (incident response).
``cancel`` and ``unfreeze`` take the lease and commit their head in one transaction;
``freeze`` commits its head without the lease, so that it also stops a run that holds the
thread now (a runaway agent): the store then refuses that run's writes and tool-dispatch
claims (``checkpoints.fencing``), and the run ends with ``ThreadFrozenError``.
(``submit`` is ``engine.answering``; ``update_state`` is ``engine.update``.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from checkpoints.base import Checkpointer
from checkpoints.batch import CommitBatch, ThreadUpdate
from checkpoints.errors import HeadConflictError, ThreadChangedError, head_missing
from checkpoints.lease import new_owner
from checkpoints.models import (
    CheckpointRecord,
    CheckpointSource,
    ThreadId,
    ThreadRecord,
    ThreadStatus,
    new_checkpoint_id,
)
from graphflow.engine import start
from graphflow.engine.committer import Committer
from graphflow.engine.reads import carried_step
from graphflow.engine.witness import OUTBOX, Witness
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
    applies until ``unfreeze``; its pending pauses are kept. A thread a run is executing
    now is frozen too, without waiting for it: from the moment this returns that run
    dispatches no tool call and writes nothing more (the store refuses it), and it ends
    raising ``ThreadFrozenError``; its interrupted step runs again after ``unfreeze``. The
    frozen checkpoint is committed if the head and the thread's status are still as read;
    when the run committed meanwhile, the freeze reads them again (``ThreadBusyError`` only
    if the run keeps committing through ``FREEZE_TRIES`` reads)."""
    for _ in range(FREEZE_TRIES):
        th, head = await _head(store, thread_id)
        if th.status == "cancelled":
            raise ThreadCancelledError(thread_id)
        if th.status == "frozen":
            raise ThreadFrozenError(thread_id)
        frozen = {"reason": reason, "by": by, "previous": th.status}
        update = ThreadUpdate("frozen", th.pending_pause_ids, spec.name)
        try:
            await _mark(
                spec,
                store,
                th,
                head,
                {"frozen": frozen},
                update,
                "freeze",
                Witness(evidence, thread_id),
                lambda ck: stages.frozen(
                    thread_id=thread_id, reason=reason, by=by, checkpoint_id=ck
                ),
                unleased=True,
            )
            return
        except (HeadConflictError, ThreadChangedError):
            continue  # a run committed a step or stopped since the read: freeze that
    raise ThreadBusyError(thread_id)


FREEZE_TRIES = 20
"""How many times ``freeze`` reads a thread whose run commits between its read and its
commit before it gives up (each run's step is a commit: a runaway agent's are not that
fast)."""


async def unfreeze(
    spec: GraphSpec,
    store: Checkpointer,
    thread_id: str,
    *,
    by: str | None,
    reason: str,
    evidence: EvidenceLog | None = None,
) -> None:
    """Unfreeze a frozen thread: it is as it was before (a thread that a node's policy froze,
    or that was frozen while a run executed it, waits for ``invoke(None)``, which runs that
    step again). While the run it was frozen under has not stopped yet (it holds the lease
    until it does), ``ThreadBusyError``: two runs never execute the thread at once."""
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
    *,
    unleased: bool = False,
) -> None:
    """Commit a copy of the head whose metadata says what happened, with the thread's new
    status, in one transaction that takes the thread's lease and gives it up, if the head
    and the status are still as read in ``th`` (else ``ThreadBusyError``, or
    ``ThreadFrozenError`` when it was frozen since). ``unleased`` (a freeze): without the
    lease, leaving it to the run that holds it, if the head and the row's ``updated_at`` are
    as read (else ``HeadConflictError``, ``ThreadChangedError``). Its evidence ``event`` (of
    the new checkpoint's id) is committed in that transaction, in the commit's outbox, and
    written to the log once it is committed: the log never holds the event of a change the
    store refused, and an event the log cannot take now stays in the outbox (an incident
    response never waits on the log), written when the thread is next run or audited."""
    tid = th.thread_id
    ck_id = new_checkpoint_id()
    ck = head.child(ck_id, source, step=head.step, frontier=head.frontier, metadata=metadata)
    # The pending step is kept as it is: its tasks' records and memoized steps carry over.
    tasks, memos = await carried_step(store, head, ck_id)
    kept = {m.key: m.value for m in memos if m.task_id == OUTBOX}
    if kept and witness.log is not None:  # events the head's outbox kept go first, with it
        memos = [m for m in memos if m.task_id != OUTBOX]
        witness.take_outbox(head.id, {OUTBOX: kept})
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
    if unleased:
        batch.unleased, batch.expected_updated_at = True, th.updated_at
        await store.commit(tid, new_owner(), batch)
    else:
        batch.expected_status = th.status
        committer = Committer(store, tid, new_owner(), spec.lease_ttl)
        committer.take_lease = True  # (and gives it up: ``last``)
        await committer.commit(batch, last=True)
    await witness.flush()  # (once it is committed; else it stays in the outbox)
