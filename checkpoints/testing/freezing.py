"""Checks of a frozen thread (``checkpoints.fencing``): the ``unleased`` commit that freezes
a thread a run holds, the writes and tool-dispatch claims a frozen thread refuses, and the
commit that unfreezes it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from checkpoints import (
    CommitBatch,
    FrozenThreadError,
    HeadConflictError,
    LeaseHeldError,
    LeaseLostError,
    MemoRecord,
    ThreadChangedError,
    ThreadUpdate,
)
from checkpoints.lease import new_owner
from checkpoints.models import CallId, CheckpointId, DispatchRecord, TaskId, ThreadRecord
from checkpoints.testing.support import T1, T2, Factory, checkpoint, leased, observe, step_batch


def _freeze(head: CheckpointId, updated_at: float | None) -> CommitBatch:
    """What ``graph.freeze`` commits: a copy of the head, a memo with it, status frozen."""
    ck = checkpoint(parent=head, step=1, metadata={"frozen": {"reason": "incident"}})
    batch = CommitBatch.step(
        ck,
        [],
        memos=[MemoRecord(ck.id, TaskId("task-1"), "llm", {"answer": 42})],
        thread=ThreadUpdate("frozen", (), "g"),
        expected_head=head,
    )
    batch.unleased, batch.expected_updated_at = True, updated_at
    return batch


async def _a_run_holds_t1(make: Factory) -> tuple[Any, str, CheckpointId, ThreadRecord]:
    """A store where a run holds ``T1``'s lease and committed its first step: the store,
    the run's owner, the head and the thread's record."""
    cp, owner = await leased(make)
    first = step_batch(None, {"x": 1})
    await cp.commit(T1, owner, first)
    assert first.checkpoint is not None
    rec = await cp.get_thread(T1)
    assert rec is not None
    return cp, owner, first.checkpoint.id, rec


async def check_unleased_commit_is_fenced_by_the_head_and_the_row(make: Factory) -> None:
    """An ``unleased`` commit writes while a live run holds the lease, leaving the lease to
    it, if the head and the row's ``updated_at`` are as read; else ``HeadConflictError`` or
    ``ThreadChangedError``, and nothing is written (the head is compared even without
    ``check_head``)."""
    cp, owner, head, rec = await _a_run_holds_t1(make)
    operator = new_owner()  # (holds nothing)

    moved = _freeze(CheckpointId("not-the-head"), rec.updated_at)
    before = await observe(cp, T1, moved)
    with pytest.raises(HeadConflictError):
        await cp.commit(T1, operator, moved)
    assert await observe(cp, T1, moved) == before
    changed = _freeze(head, rec.updated_at - 1.0)  # (a run paused it since: no new head)
    before = await observe(cp, T1, changed)
    with pytest.raises(ThreadChangedError):
        await cp.commit(T1, operator, changed)
    assert await observe(cp, T1, changed) == before
    with pytest.raises(HeadConflictError):
        await cp.commit(T2, operator, _freeze(head, None))  # no such thread
    assert await cp.get_thread(T2) is None

    batch = _freeze(head, rec.updated_at)
    await cp.commit(T1, operator, batch)
    assert batch.checkpoint is not None
    frozen = await cp.get_thread(T1)
    assert frozen is not None and (frozen.status, frozen.head) == ("frozen", batch.checkpoint.id)
    assert frozen.lease_owner == owner  # left to the run that holds it
    memos = await cp.load_memos(T1, "", batch.checkpoint.id)
    assert memos == {"task-1": {"llm": {"answer": 42}}}
    stored = await cp.get_checkpoint(T1)
    assert stored is not None and stored.metadata == {"frozen": {"reason": "incident"}}


async def check_frozen_thread_refuses_its_runs_writes(make: Factory) -> None:
    """A frozen thread refuses (``FrozenThreadError``, nothing written) every commit of the
    run that holds its lease, with or without a head check or a status; a commit that takes
    the lease refuses too, unless it expects ``frozen`` (an unfreeze), which writes."""
    cp, owner, head, rec = await _a_run_holds_t1(make)
    frozen = _freeze(head, rec.updated_at)
    await cp.commit(T1, new_owner(), frozen)
    assert frozen.checkpoint is not None
    now_head = frozen.checkpoint.id

    memo = CommitBatch.flush(memos=[MemoRecord(head, TaskId("task-1"), "late", 1)])
    stop = CommitBatch.stop("", ThreadUpdate("failed", (), "g"))
    stop.release = True
    stale = step_batch(head, {"x": 2}, step=1)  # (its head is stale too: frozen wins)
    current = step_batch(now_head, {"x": 2}, step=2)
    for batch in (memo, stop, stale, current, CommitBatch()):
        before = await observe(cp, T1, batch)
        with pytest.raises(FrozenThreadError) as refused:
            await cp.commit(T1, owner, batch)
        assert refused.value.thread_id == T1
        assert await observe(cp, T1, batch) == before
    held = await cp.get_thread(T1)
    assert held is not None and (held.status, held.lease_owner) == ("frozen", owner)

    unfreeze = CommitBatch(thread=ThreadUpdate("paused", (), "g"), acquire_ttl=60.0)
    unfreeze.expected_status, unfreeze.release = "frozen", True
    other = new_owner()
    with pytest.raises(LeaseHeldError):  # the run still holds the lease
        await cp.commit(T1, other, unfreeze)
    await cp.release_lease(T1, owner)  # the run has ended
    blind = dataclasses.replace(unfreeze, expected_status=None)
    with pytest.raises(FrozenThreadError):  # a lease taken without expecting frozen
        await cp.commit(T1, other, blind)
    paused = dataclasses.replace(unfreeze, expected_status="paused")
    with pytest.raises(FrozenThreadError):
        await cp.commit(T1, other, paused)
    await cp.commit(T1, other, unfreeze)
    back = await cp.get_thread(T1)
    assert back is not None and (back.status, back.lease_owner) == ("paused", None)


async def check_claim_dispatch_refused_on_a_frozen_thread(make: Factory) -> None:
    """``claim_dispatch`` of a frozen thread's call raises ``FrozenThreadError`` and records
    nothing (also for a call claimed before: no earlier outcome is handed out); once the
    thread is unfrozen, calls are claimed again by the lease's holder only
    (``LeaseLostError`` for another claimer)."""
    cp, owner = await leased(make)
    await cp.commit(T1, owner, step_batch(None, {"x": 1}))
    before = DispatchRecord(T1, CallId("c0"), "send", "fp", owner, claimed_at=1.0)
    assert await cp.claim_dispatch(before) is True
    await cp.commit(T1, owner, CommitBatch(thread=ThreadUpdate("frozen"), release=True))
    claim = DispatchRecord(T1, CallId("c1"), "send", "fp", owner, claimed_at=2.0)
    for record in (claim, before):
        with pytest.raises(FrozenThreadError) as refused:
            await cp.claim_dispatch(record)
        assert refused.value.thread_id == T1
    assert await cp.get_dispatch(T1, CallId("c1")) is None
    assert await cp.get_dispatch(T1, CallId("c0")) == before
    assert await cp.claim_dispatch(dataclasses.replace(claim, thread_id=T2)) is True  # (other)

    unfreeze = CommitBatch(thread=ThreadUpdate("paused"), acquire_ttl=60.0, release=True)
    unfreeze.expected_status = "frozen"
    await cp.commit(T1, new_owner(), unfreeze)
    # The run it was frozen under does not get its lease back: its claim stays refused (a
    # process stopped past its lease wakes up after the unfreeze), the next run's works.
    with pytest.raises(LeaseLostError):
        await cp.claim_dispatch(claim)
    assert await cp.get_dispatch(T1, CallId("c1")) is None
    nxt = new_owner()
    await cp.acquire_lease(T1, nxt, 60.0)
    assert await cp.claim_dispatch(dataclasses.replace(claim, owner=nxt)) is True


CHECKS = [
    check_unleased_commit_is_fenced_by_the_head_and_the_row,
    check_frozen_thread_refuses_its_runs_writes,
    check_claim_dispatch_refused_on_a_frozen_thread,
]
"""The checks of this module, in order."""
