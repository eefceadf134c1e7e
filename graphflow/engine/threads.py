"""Operations on a thread from outside a run: ``submit``, ``cancel``, ``list_decisions``.

``submit`` records answers durably without running anything (append only, no lease needed:
the next run of the thread, in any process, applies them); the answers follow the same
rules as ``invoke``'s (``engine.answers``). ``cancel`` takes the lease and commits a
``cancelled`` head in one transaction. (``update_state`` is ``engine.update``.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checkpoints.base import Checkpointer
from checkpoints.errors import CorruptCheckpointError, LeaseHeldError
from checkpoints.lease import new_owner
from checkpoints.models import (
    CommitBatch,
    DecisionRecord,
    ThreadId,
    ThreadUpdate,
    new_checkpoint_id,
)
from graphflow.decisions import Decision
from graphflow.engine import answers, lease
from graphflow.engine.committer import Committer
from graphflow.engine.pauses import UNSET
from graphflow.errors import (
    InvalidArgumentError,
    NothingToResumeError,
    ThreadBusyError,
    ThreadCancelledError,
    ThreadFinishedError,
    ThreadNotFoundError,
)
from graphflow.spec import GraphSpec


async def submit(
    store: Checkpointer,
    thread_id: str,
    *,
    decisions: Mapping[str, Decision],
    resume: Any = UNSET,
    by: str | None = None,
    reason: str | None = None,
) -> tuple[DecisionRecord, ...]:
    """Record answers to a paused thread's pauses; return the decisions that answered
    nothing (each recorded, with the reason in ``note``). ``decisions`` must have been
    checked (``answers.check_decisions``)."""
    if resume is UNSET and not decisions:
        raise InvalidArgumentError("submit needs decisions= or resume= to record")
    th = await store.get_thread(ThreadId(thread_id))
    if th is None:
        raise ThreadNotFoundError(thread_id)
    pending = list(th.pending_pause_ids)
    if not pending:
        raise NothingToResumeError(thread_id)
    records = await store.get_pauses(th.thread_id, pending)
    found = answers.resolve(
        thread_id, records, resume=resume, decisions=decisions, by=by, reason=reason
    )
    if found.decisions:
        await store.put_decisions(found.decisions)
    if found.answers:
        await store.put_answers(found.answers)
    return found.ignored


async def list_decisions(store: Checkpointer, thread_id: str) -> list[DecisionRecord]:
    """The thread's decision records, oldest first, as they took effect (see
    ``answers.effective``)."""
    if await store.get_thread(ThreadId(thread_id)) is None:
        raise ThreadNotFoundError(thread_id)
    return answers.effective(await store.list_decisions(ThreadId(thread_id)))


async def cancel(
    spec: GraphSpec, store: Checkpointer, thread_id: str, *, reason: str, by: str | None
) -> None:
    """End a thread that is not done: it runs nothing more; the reason and actor are kept
    in the metadata of its last checkpoint."""
    tid = ThreadId(thread_id)
    th = await store.get_thread(tid)
    if th is None or th.head is None:
        raise ThreadNotFoundError(thread_id)
    if th.status == "done":
        raise ThreadFinishedError(thread_id)
    if th.status == "cancelled":
        raise ThreadCancelledError(thread_id)
    head = await store.get_checkpoint(tid, "", th.head)
    if head is None:
        raise CorruptCheckpointError(
            f"thread {thread_id!r}: head checkpoint {th.head!r} is missing",
            thread_id=thread_id,
            checkpoint_id=th.head,
        )
    cancelled = {"reason": reason, "by": by, "pauses": list(th.pending_pause_ids)}
    ck = head.child(
        new_checkpoint_id(), "update", step=head.step, metadata={"cancelled": cancelled}
    )
    committer = Committer(store, tid, new_owner(), spec.lease_ttl)
    try:
        await store.acquire_lease(tid, committer.owner, spec.lease_ttl, graph_name=spec.name)
    except LeaseHeldError as e:
        raise ThreadBusyError(thread_id, e.owner) from e
    async with lease.held(store, tid, committer.owner, spec.lease_ttl, lambda: committer.released):
        batch = CommitBatch.step(
            ck,
            [],
            thread=ThreadUpdate("cancelled", ()),
            expected_head=th.head,
            check_head=True,
        )
        await committer.commit(batch, last=True)
