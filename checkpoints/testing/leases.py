"""Checks of the protocol's threads and leases: taking, renewing, giving up and taking
over a lease, a commit that takes or gives it up, ``resume_thread``."""

from __future__ import annotations

import os
import socket
import sys
import threading
from datetime import UTC, datetime

import anyio
import pytest

from checkpoints import (
    AnswerRecord,
    CheckpointRecord,
    CommitBatch,
    LeaseHeldError,
    LeaseLostError,
    MemoRecord,
    TaskRecord,
    ThreadUpdate,
)
from checkpoints.lease import new_owner
from checkpoints.models import (
    CallId,
    CheckpointId,
    DispatchRecord,
    PauseId,
    TaskId,
    ThreadId,
)
from checkpoints.testing.support import (
    REMOTE,
    T1,
    T2,
    Factory,
    full_batch,
    leased,
    step_batch,
)

# -- threads and leases -----------------------------------------------------------------------


async def check_lease_acquire_renew_release(make: Factory) -> None:
    """Acquire creates the thread; renew and release act only for the holder."""
    cp = make()
    await cp.setup()
    await cp.setup()  # idempotent
    assert await cp.get_thread(T1) is None
    owner = new_owner()
    before = datetime.now(UTC).timestamp()
    rec = await cp.acquire_lease(T1, owner, 30.0, graph_name="g")
    assert (rec.thread_id, rec.status, rec.head, rec.graph_name) == (T1, "running", None, "g")
    assert rec.lease_owner == owner and rec.pending_pause_ids == ()
    assert rec.lease_expires_at is not None
    assert before + 29 < rec.lease_expires_at < before + 31
    assert await cp.get_thread(T1) == rec

    rec.status = "done"  # records handed out are copies
    stored = await cp.get_thread(T1)
    assert stored is not None and stored.status == "running"

    again = await cp.acquire_lease(T1, owner, 60.0, graph_name="other")  # re-entrant
    assert again.graph_name == "g"  # an existing thread keeps its graph name
    assert again.lease_expires_at is not None and again.lease_expires_at > rec.lease_expires_at

    await cp.renew_lease(T1, owner, 120.0)
    renewed = await cp.get_thread(T1)
    assert renewed is not None and renewed.lease_expires_at is not None
    assert renewed.lease_expires_at > before + 100
    assert renewed.updated_at == stored.updated_at  # leases do not touch updated_at

    with pytest.raises(LeaseLostError) as lost:
        await cp.renew_lease(T1, "someone-else", 10.0)
    assert lost.value.thread_id == T1 and lost.value.owner == "someone-else"
    with pytest.raises(LeaseLostError):
        await cp.renew_lease(T2, owner, 10.0)  # no such thread

    await cp.release_lease(T1, "someone-else")  # not the holder: nothing happens
    held = await cp.get_thread(T1)
    assert held is not None and held.lease_owner == owner
    await cp.release_lease(T1, owner)
    free = await cp.get_thread(T1)
    assert free is not None and free.lease_owner is None and free.lease_expires_at is None
    await cp.release_lease(T2, owner)  # unknown thread: nothing happens
    with pytest.raises(LeaseLostError):
        await cp.renew_lease(T1, owner, 10.0)

    other = new_owner()
    taken = await cp.acquire_lease(T1, other, 30.0)
    assert taken.lease_owner == other and taken.graph_name == "g"


async def check_lease_held_by_live_owner(make: Factory) -> None:
    """A live owner's lease (this host, or any other host) is not taken."""
    cp = make()
    first = new_owner()  # this process: alive
    await cp.acquire_lease(T1, first, 60.0)
    with pytest.raises(LeaseHeldError) as held:
        await cp.acquire_lease(T1, new_owner(), 60.0)
    assert held.value.thread_id == T1 and held.value.owner == first
    rec = await cp.get_thread(T1)
    assert rec is not None and rec.lease_owner == first

    await cp.acquire_lease(T2, REMOTE, 60.0)  # another host: never known dead
    with pytest.raises(LeaseHeldError):
        await cp.acquire_lease(T2, first, 60.0)


async def check_lease_taken_by_one_of_many_os_threads(make: Factory) -> None:
    """Threads of the process that ask for one lease at once, each on an event loop of its
    own (a web server's threads calling the sync API do): exactly one gets it, the others
    ``LeaseHeldError``; and of their claims of one dispatch exactly one wins. Python
    switches threads every microsecond meanwhile, so a check-then-set that is not atomic
    across threads shows."""
    cp = make()
    await cp.setup()
    rounds, width = 40, 4

    def race(thread_id: str) -> list[tuple[bool, bool]]:
        outcomes: list[tuple[bool, bool]] = []  # (took the lease, won the claim) per thread
        barrier = threading.Barrier(width)

        def one() -> None:
            owner = new_owner()

            async def take() -> tuple[bool, bool]:
                try:
                    await cp.acquire_lease(ThreadId(thread_id), owner, 30.0)
                    leased = True
                except LeaseHeldError:
                    leased = False
                claim = DispatchRecord(ThreadId(thread_id), CallId("c"), "tool", "fp", owner)
                try:
                    return leased, await cp.claim_dispatch(claim)
                except LeaseLostError:  # (only the lease's holder may claim)
                    return leased, False

            barrier.wait()
            outcomes.append(anyio.run(take))

        threads = [threading.Thread(target=one) for _ in range(width)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return outcomes

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        results = [await anyio.to_thread.run_sync(race, f"race-{i}") for i in range(rounds)]
    finally:
        sys.setswitchinterval(interval)
    for outcomes in results:
        assert len(outcomes) == width, outcomes
        assert sum(leased for leased, _ in outcomes) == 1, outcomes
        assert [won for _, won in outcomes] == [leased for leased, _ in outcomes], outcomes


async def check_lease_takeover_after_expiry(make: Factory) -> None:
    """An expired lease is taken over, and its old owner is fenced off."""
    cp = make()
    await cp.acquire_lease(T1, REMOTE, 0.05)
    with pytest.raises(LeaseHeldError):
        await cp.acquire_lease(T1, new_owner(), 60.0)
    await anyio.sleep(0.1)
    me = new_owner()
    rec = await cp.acquire_lease(T1, me, 60.0)
    assert rec.lease_owner == me
    # The old owner is fenced off: it cannot write any more.
    with pytest.raises(LeaseLostError):
        await cp.commit(T1, REMOTE, step_batch(None, {"x": 1}))
    with pytest.raises(LeaseLostError):
        await cp.renew_lease(T1, REMOTE, 60.0)


async def check_lease_takeover_of_dead_process(make: Factory) -> None:
    """A lease whose owner process is gone from this host is taken at once."""
    proc = await anyio.open_process([sys.executable, "-c", "pass"])
    await proc.wait()
    await proc.aclose()
    dead = f"{socket.gethostname()}:{proc.pid}:x"
    cp = make()
    await cp.acquire_lease(T1, dead, 3600.0)  # a long lease, but its process is gone
    me = new_owner()
    rec = await cp.acquire_lease(T1, me, 60.0)
    assert rec.lease_owner == me
    with pytest.raises(LeaseLostError):
        await cp.commit(T1, dead, step_batch(None, {"x": 1}))


async def check_commit_takes_and_gives_up_the_lease(make: Factory) -> None:
    """``acquire_ttl`` takes the lease in the commit's transaction (creating the thread);
    ``release`` gives it up in it; a live other owner makes the commit fail untouched."""
    cp = make()
    ck = CheckpointRecord(id=CheckpointId("c1"), thread_id=T1, ns="", parent_id=None, step=-1,
                          source="input", channel_versions={}, frontier=(),
                          created_at=1.0)  # fmt: skip
    await cp.commit(
        T1, "me", CommitBatch(checkpoint=ck, acquire_ttl=60.0, thread=ThreadUpdate("running"),
                              check_head=True)
    )  # fmt: skip
    rec = await cp.get_thread(T1)
    assert rec is not None and rec.lease_owner == "me" and rec.head == "c1"
    other = f"{socket.gethostname()}:{os.getpid()}:other"
    with pytest.raises(LeaseHeldError):
        await cp.commit(T1, other, CommitBatch(acquire_ttl=60.0, thread=ThreadUpdate("done")))
    same = await cp.get_thread(T1)
    assert same is not None and (same.status, same.lease_owner) == ("running", "me")
    await cp.commit(T1, "me", CommitBatch(thread=ThreadUpdate("done"), release=True))
    rec = await cp.get_thread(T1)
    assert rec is not None and (rec.status, rec.lease_owner) == ("done", None)
    with pytest.raises(LeaseLostError):
        await cp.commit(T1, "me", CommitBatch())


async def check_resume_thread(make: Factory) -> None:
    """``resume_thread`` takes the lease of an existing thread and returns what the separate
    reads return; nothing for a thread without a checkpoint; a live holder keeps its lease."""
    cp = make()
    await cp.setup()
    me = new_owner()
    assert await cp.resume_thread(T1, me, 60.0) is None
    assert await cp.get_thread(T1) is None  # not created
    await cp.acquire_lease(T1, REMOTE, 60.0)  # a thread row without a checkpoint
    assert await cp.resume_thread(T1, me, 60.0) is None
    rec = await cp.get_thread(T1)
    assert rec is not None and rec.lease_owner == REMOTE

    cp, owner = await leased(make)
    first = step_batch(None, {"good": [0]})
    await cp.commit(T1, owner, first)
    assert first.checkpoint is not None
    batch = full_batch(first.checkpoint.id)
    await cp.commit(T1, owner, batch)
    head = batch.checkpoint
    assert head is not None
    # More records of each kind, in orders the reads must keep: the latest answer per pause,
    # tasks and memos in the order first written.
    await cp.put_answers(
        [AnswerRecord(PauseId("p1"), T1, "x"), AnswerRecord(PauseId("p1"), T1, "y")]
    )
    await cp.commit(
        T1,
        owner,
        CommitBatch(
            tasks=[
                TaskRecord(head.id, TaskId("task-9"), "n9", "failed", 2, error="boom"),
                TaskRecord(head.id, TaskId("task-3"), "n3", "completed", 1, writes=[("k", 1)]),
            ],
            memos=[
                MemoRecord(head.id, TaskId("task-2"), "a", [1]),
                MemoRecord(head.id, TaskId("task-1"), "b", {"c": 2}),
            ],
        ),
    )
    with pytest.raises(LeaseHeldError) as held:
        await cp.resume_thread(T1, me, 60.0)  # the owner is alive
    assert held.value.owner == owner
    await cp.release_lease(T1, owner)

    point = await cp.resume_thread(T1, me, 60.0)
    assert point is not None
    thread = await cp.get_thread(T1)
    assert thread is not None and thread.lease_owner == me and thread.graph_name == "renamed"
    assert point.thread == thread
    assert point.checkpoint == await cp.get_checkpoint(T1) == head
    versions, bases = head.channel_versions, head.channel_bases
    assert point.channels == await cp.load_channels(T1, "", versions, bases)
    assert point.channels["good"] == [1, 2, 3]
    assert point.pauses == await cp.get_pauses(T1, thread.pending_pause_ids)
    assert [p.id for p in point.pauses] == ["p1"]
    assert point.answers == await cp.load_answers(T1)
    assert sorted(point.answers) == ["p0", "p1"] and point.answers[PauseId("p1")].value == "y"
    tasks = await cp.load_tasks(T1, "", head.id)
    assert point.tasks == tasks and list(point.tasks) == list(tasks)
    assert list(tasks)[-2:] == ["task-9", "task-3"]
    memos = await cp.load_memos(T1, "", head.id)
    assert (
        point.memos
        == memos
        == {
            "task-1": {"llm": {"answer": 42}, "b": {"c": 2}},
            "task-2": {"a": [1]},
        }
    )
    assert list(point.memos[TaskId("task-1")]) == ["llm", "b"]
    again = await cp.resume_thread(T1, me, 90.0)  # its own lease: taken again, extended
    assert again is not None and again.thread.lease_owner == me
    assert again.thread.lease_expires_at is not None
    assert point.thread.lease_expires_at is not None
    assert again.thread.lease_expires_at > point.thread.lease_expires_at
