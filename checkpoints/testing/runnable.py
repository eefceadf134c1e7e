"""Conformance checks of the runnable index (``Checkpointer.mark_runnable`` and below).

Part of ``checkpoints.testing.CHECKS``.
"""

from __future__ import annotations

import anyio
import pytest

from checkpoints import (
    AnswerRecord,
    Checkpointer,
    CommitBatch,
    DecisionRecord,
    LeaseHeldError,
    SerializationError,
    ThreadChangedError,
    ThreadUpdate,
)
from checkpoints.lease import new_owner
from checkpoints.models import CallId, PauseId, ThreadId, now
from checkpoints.testing.support import REMOTE, T1, T2, Check, Factory, leased, step_batch

P1 = PauseId("p1")


async def paused_thread(make: Factory, thread_id: ThreadId = T1) -> Checkpointer:
    """A new store holding ``thread_id`` paused at ``p1``, its lease free."""
    cp, owner = await leased(make, thread_id)
    batch = step_batch(None, {"x": 1}, thread_id=thread_id)
    batch.thread = ThreadUpdate("paused", (P1,), graph_name="g")
    batch.release = True
    await cp.commit(thread_id, owner, batch)
    return cp


async def updated(cp: Checkpointer, thread_id: ThreadId = T1) -> float:
    rec = await cp.get_thread(thread_id)
    assert rec is not None
    return rec.updated_at


async def check_runnable_mark_list_claim_unmark(make: Factory) -> None:
    """A mark is listed with the thread's graph name; a claim takes the lease and leaves
    the mark; unmark removes only the mark it was given."""
    cp = await paused_thread(make)
    assert await cp.list_runnable() == []
    assert await cp.claim_runnable(T1, new_owner(), 30.0) is None  # no mark: no lease
    rec = await cp.get_thread(T1)
    assert rec is not None and rec.lease_owner is None
    assert not await cp.mark_runnable(T2, reason="answered")  # no such thread
    assert not await cp.mark_runnable(T1, reason="answered", if_updated_at=1.0)  # changed
    assert await cp.list_runnable() == []
    before = now()
    assert await cp.mark_runnable(T1, reason="answered", if_updated_at=await updated(cp))
    [mark] = await cp.list_runnable()
    assert (mark.thread_id, mark.reason, mark.graph_name) == (T1, "answered", "g")
    assert before <= mark.due_at <= now() and before <= mark.marked_at <= now()

    me, other = new_owner(), new_owner()
    claimed = await cp.claim_runnable(T1, me, 30.0)
    assert claimed is not None and claimed.thread_id == T1 and claimed.graph_name == "g"
    assert claimed.marked_at == mark.marked_at
    rec = await cp.get_thread(T1)
    assert rec is not None and rec.lease_owner == me
    assert rec.updated_at == await updated(cp)  # a claim is a lease: updated_at unchanged
    with pytest.raises(LeaseHeldError):
        await cp.claim_runnable(T1, other, 30.0)
    assert await cp.list_runnable() == [mark]  # the mark stays until a commit
    await cp.release_lease(T1, me)

    await anyio.sleep(0.002)
    assert await cp.mark_runnable(T1, reason="recovery")  # a newer mark of the thread
    assert not await cp.unmark_runnable(mark)  # not the thread's any more
    [newer] = await cp.list_runnable()
    assert newer.marked_at > mark.marked_at
    assert await cp.unmark_runnable(newer)
    assert not await cp.unmark_runnable(newer)
    assert await cp.list_runnable() == []


async def check_runnable_due_times(make: Factory) -> None:
    """Only due marks are listed and claimed; a new mark keeps the earlier due time;
    ``limit`` and bad arguments."""
    cp = await paused_thread(make)
    cp2 = cp
    owner = new_owner()
    await cp2.acquire_lease(T2, owner, 30.0, graph_name="h")
    await cp2.release_lease(T2, owner)
    later = now() + 60
    assert await cp.mark_runnable(T1, reason="deferred", due_at=later)
    assert await cp.list_runnable() == []
    assert await cp.claim_runnable(T1, new_owner(), 30.0) is None
    [m] = await cp.list_runnable(due_by=later)
    assert (m.reason, m.due_at) == ("deferred", later)
    assert await cp.mark_runnable(T1, reason="deferred", due_at=later + 60)  # later: kept
    [m] = await cp.list_runnable(due_by=later + 120)
    assert m.due_at == later
    assert await cp.mark_runnable(T1, reason="answered")  # earlier: taken
    [m] = await cp.list_runnable()
    assert m.reason == "answered" and m.due_at <= now()
    assert await cp.mark_runnable(T2, reason="recovery", due_at=m.due_at - 1)
    marks = await cp.list_runnable()
    assert [x.thread_id for x in marks] == [T2, T1]  # earliest due first
    assert [x.thread_id for x in await cp.list_runnable(limit=1)] == [T2]
    assert await cp.list_runnable(limit=0) == []
    with pytest.raises(ValueError):
        await cp.list_runnable(limit=-1)
    with pytest.raises(ValueError):
        await cp.mark_runnable(T1, reason="soon")  # type: ignore[arg-type]


async def check_runnable_mark_follows_commits(make: Factory) -> None:
    """A commit that changes the thread's status removes its mark, or replaces it with a
    deferred one (``runnable_at``); other commits leave it."""
    cp = await paused_thread(make)
    assert await cp.mark_runnable(T1, reason="answered")
    owner = new_owner()
    assert await cp.claim_runnable(T1, owner, 30.0) is not None
    rec = await cp.get_thread(T1)
    assert rec is not None
    await cp.commit(T1, owner, CommitBatch.flush(""))  # no thread update: kept
    assert len(await cp.list_runnable()) == 1
    await cp.commit(T1, owner, CommitBatch.stop("", ThreadUpdate("running")))
    assert await cp.list_runnable() == []  # resumed: gone
    due = now() + 30
    batch = CommitBatch.stop("", ThreadUpdate("paused", (P1,)))
    batch.runnable_at = due
    await cp.commit(T1, owner, batch)
    assert await cp.list_runnable() == []
    [m] = await cp.list_runnable(due_by=due)
    assert (m.thread_id, m.reason, m.due_at) == (T1, "deferred", due)
    failing = CommitBatch.stop("", ThreadUpdate("done"))
    with pytest.raises(LeaseHeldError):  # a failed commit changes no mark
        failing.acquire_ttl = 30.0
        await cp.commit(T1, REMOTE, failing)
    assert len(await cp.list_runnable(due_by=due)) == 1
    await cp.commit(T1, owner, CommitBatch.stop("", ThreadUpdate("done")))
    assert await cp.list_runnable(due_by=due) == []


async def check_record_answers_marks_in_one_transaction(make: Factory) -> None:
    """Decisions, answers and the mark are written together, the mark only if the thread
    did not change; an unstorable value writes nothing."""
    cp = await paused_thread(make)
    seen = await updated(cp)
    decision = DecisionRecord(T1, CallId("c1"), "approve", by="alice")
    answer = AnswerRecord(P1, T1, {"ok": True})
    bad = AnswerRecord(P1, T1, object())
    with pytest.raises(SerializationError):
        await cp.record_answers(T1, [decision], [bad], runnable_if_updated_at=seen)
    assert await cp.list_decisions(T1) == [] and await cp.load_answers(T1) == {}
    assert await cp.list_runnable() == []

    assert not await cp.record_answers(T1, [decision], [answer], runnable_if_updated_at=1.0)
    assert len(await cp.list_decisions(T1)) == 1 and P1 in await cp.load_answers(T1)
    assert await cp.list_runnable() == []  # the thread changed since: recorded, not marked

    assert await cp.record_answers(T1, [], [answer], runnable_if_updated_at=seen)
    [m] = await cp.list_runnable()
    assert (m.thread_id, m.reason) == (T1, "answered")
    assert not await cp.record_answers(T1, [decision], [])  # no mark asked for
    assert len(await cp.list_decisions(T1)) == 2


async def check_record_answers_fenced_by_an_idle_thread(make: Factory) -> None:
    """With ``if_idle_at``, nothing is written when the thread changed since it was read
    (``ThreadChangedError``) or a run holds a live lease on it (``LeaseHeldError``, naming
    the holder); an expired lease does not fence; a value that cannot be stored is
    reported first."""
    cp = await paused_thread(make)
    seen = await updated(cp)
    decision = DecisionRecord(T1, CallId("c1"), "deny", by="bob")
    answer = AnswerRecord(P1, T1, {"ok": False})

    async def nothing_written() -> bool:
        return await cp.list_decisions(T1) == [] and await cp.load_answers(T1) == {}

    with pytest.raises(ThreadChangedError):
        await cp.record_answers(T1, [decision], [answer], if_idle_at=seen - 1.0)
    with pytest.raises(ThreadChangedError):  # (no such thread)
        await cp.record_answers(T2, [decision], [answer], if_idle_at=seen)
    with pytest.raises(SerializationError):
        await cp.record_answers(T1, [decision], [AnswerRecord(P1, T1, object())],
                                if_idle_at=seen - 1.0)  # fmt: skip
    assert await nothing_written()
    runner = new_owner()
    await cp.acquire_lease(T1, runner, 30.0)
    seen = await updated(cp)
    with pytest.raises(LeaseHeldError) as e:
        await cp.record_answers(T1, [decision], [answer], if_idle_at=seen)
    assert e.value.owner == runner
    assert await nothing_written()
    await cp.acquire_lease(T1, runner, 0.05)  # (renewed, to expire at once)
    await anyio.sleep(0.1)
    seen = await updated(cp)
    assert await cp.record_answers(T1, [decision], [answer], if_idle_at=seen,
                                   runnable_if_updated_at=seen)  # fmt: skip
    assert len(await cp.list_decisions(T1)) == 1 and P1 in await cp.load_answers(T1)


CHECKS: list[Check] = [
    check_runnable_mark_list_claim_unmark,
    check_runnable_due_times,
    check_runnable_mark_follows_commits,
    check_record_answers_marks_in_one_transaction,
    check_record_answers_fenced_by_an_idle_thread,
]
