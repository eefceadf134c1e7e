"""Checks of ``commit``: fencing, atomicity, serialization errors, no aliasing, and which
error wins (the rule of ``checkpoints.base``)."""

from __future__ import annotations

import anyio
import pytest

from checkpoints import (
    AnswerRecord,
    CommitBatch,
    CorruptCheckpointError,
    DispatchRecord,
    HeadConflictError,
    LeaseLostError,
    MemoRecord,
    PauseRecord,
    SerializationError,
    TaskRecord,
    ThreadUpdate,
)
from checkpoints.lease import new_owner
from checkpoints.models import (
    CallId,
    CheckpointId,
    PauseId,
    TaskId,
)
from checkpoints.testing.support import (
    T1,
    T2,
    Factory,
    Unregistered,
    checkpoint,
    full_batch,
    leased,
    observe,
    step_batch,
)

# -- commit -----------------------------------------------------------------------------------


async def check_commit_fencing(make: Factory) -> None:
    """A commit without the lease, or on a moved head, raises and writes nothing."""
    cp, owner = await leased(make)
    first = step_batch(None, {"x": 1})
    await cp.commit(T1, owner, first)
    assert first.checkpoint is not None
    head = first.checkpoint.id

    # A runner that does not hold the lease writes nothing.
    batch = full_batch(head)
    before = await observe(cp, T1, batch)
    with pytest.raises(LeaseLostError) as lost:
        await cp.commit(T1, new_owner(), batch)
    assert lost.value.thread_id == T1
    assert await observe(cp, T1, batch) == before

    # A stale head writes nothing.
    stale = full_batch(None)
    stale.expected_head = CheckpointId("not-the-head")
    before = await observe(cp, T1, stale)
    with pytest.raises(HeadConflictError) as conflict:
        await cp.commit(T1, owner, stale)
    assert (conflict.value.expected, conflict.value.actual) == ("not-the-head", head)
    assert await observe(cp, T1, stale) == before

    # Without check_head the head moves regardless of expected_head.
    loose = step_batch(CheckpointId("whatever"), {"x": 2}, step=1, check_head=False)
    await cp.commit(T1, owner, loose)
    assert loose.checkpoint is not None
    rec = await cp.get_thread(T1)
    assert rec is not None and rec.head == loose.checkpoint.id

    # An unknown thread has no lease to write under.
    with pytest.raises(LeaseLostError):
        await cp.commit(T2, owner, step_batch(None, {"x": 1}))
    assert await cp.get_thread(T2) is None


async def check_commit_taking_the_lease_expects_the_status_it_read(make: Factory) -> None:
    """A commit that takes the lease with ``expected_status`` finds the thread in another
    status (a run paused it, which moved no head): ``HeadConflictError``, nothing written
    (the lease not taken either); in the status it expected, it commits."""
    cp, owner = await leased(make)
    first = step_batch(None, {"x": 1})
    await cp.commit(T1, owner, first)
    assert first.checkpoint is not None
    head = first.checkpoint.id
    paused = CommitBatch.stop("", ThreadUpdate("paused", ()))
    paused.release = True
    await cp.commit(T1, owner, paused)  # paused, lease given up, head unchanged

    other = new_owner()
    late = step_batch(head, {"x": 2}, step=1)
    late.acquire_ttl, late.expected_status = 30.0, "running"  # read before the pause
    before = await observe(cp, T1, late)
    with pytest.raises(HeadConflictError):
        await cp.commit(T1, other, late)
    assert await observe(cp, T1, late) == before
    rec = await cp.get_thread(T1)
    assert rec is not None and (rec.status, rec.head, rec.lease_owner) == ("paused", head, None)

    current = step_batch(head, {"x": 2}, step=1)
    current.acquire_ttl, current.expected_status = 30.0, "paused"
    await cp.commit(T1, other, current)
    rec = await cp.get_thread(T1)
    assert current.checkpoint is not None
    assert rec is not None and (rec.head, rec.lease_owner) == (current.checkpoint.id, other)


async def check_commit_writes_everything(make: Factory) -> None:
    """A commit writes every record of its batch and updates the thread row."""
    cp, owner = await leased(make)
    first = step_batch(None, {"good": [0]})
    await cp.commit(T1, owner, first)
    assert first.checkpoint is not None
    created = await cp.get_thread(T1)
    assert created is not None
    await anyio.sleep(0.01)
    batch = full_batch(first.checkpoint.id)
    await cp.commit(T1, owner, batch)
    ck = batch.checkpoint
    assert ck is not None

    rec = await cp.get_thread(T1)
    assert rec is not None
    assert (rec.head, rec.status, rec.graph_name) == (ck.id, "paused", "renamed")
    assert rec.pending_pause_ids == ("p1",) and type(rec.pending_pause_ids) is tuple
    assert rec.created_at == created.created_at and rec.updated_at > created.updated_at
    assert rec.lease_owner == owner
    tasks = await cp.load_tasks(T1, "", first.checkpoint.id)
    assert list(tasks) == ["task-0", "task-1"] and tasks[TaskId("task-1")] == batch.tasks[0]
    assert await cp.load_memos(T1, "", ck.id) == {"task-1": {"llm": {"answer": 42}}}
    assert await cp.list_pauses(T1) == batch.pauses
    assert await cp.load_answers(T1) == {"p0": batch.answers[0]}
    got = await cp.load_channels(T1, "", ck.channel_versions, {})
    assert got == {"good": [1, 2, 3]}
    assert await cp.get_checkpoint(T1) == ck

    # A commit without a thread update keeps status, pending pauses and updated_at (which
    # moves with the status); a thread update without graph_name keeps the graph name.
    before = await cp.get_thread(T1)
    await anyio.sleep(0.01)
    await cp.commit(T1, owner, CommitBatch())
    again = await cp.get_thread(T1)
    assert again is not None and before is not None and again.updated_at == before.updated_at
    assert (again.status, again.pending_pause_ids, again.head) == ("paused", ("p1",), ck.id)
    await cp.commit(T1, owner, CommitBatch(thread=ThreadUpdate("done")))
    done = await cp.get_thread(T1)
    assert done is not None
    assert (done.status, done.pending_pause_ids, done.graph_name) == ("done", (), "renamed")


async def check_serialization_error_writes_nothing(make: Factory) -> None:
    """An unstorable value fails the whole commit, naming its key."""
    cp, owner = await leased(make)
    first = step_batch(None, {"good": [0]})
    await cp.commit(T1, owner, first)
    assert first.checkpoint is not None
    batch = full_batch(first.checkpoint.id, bad=object())
    before = await observe(cp, T1, batch)
    with pytest.raises(SerializationError) as err:
        await cp.commit(T1, owner, batch)
    assert err.value.key == "bad" and err.value.type_name == "object"
    assert "'bad'" in str(err.value) and "'object'" in str(err.value)
    after = await observe(cp, T1, batch)
    assert after == before
    assert after["channels"] == {"good": "missing", "bad": "missing"}

    # Fencing is checked first: a fenced-off runner gets LeaseLostError even for bad values.
    with pytest.raises(LeaseLostError):
        await cp.commit(T1, new_owner(), full_batch(first.checkpoint.id, bad=object()))
    stale = full_batch(None, bad=object())
    with pytest.raises(HeadConflictError):
        await cp.commit(T1, owner, stale)

    # Every kind of record names its key.
    cid = first.checkpoint.id
    cases: list[tuple[CommitBatch, str]] = [
        (CommitBatch(tasks=[TaskRecord(cid, TaskId("t"), "n", "completed",
                                       writes=[("k", object())])]), "writes of task 'n'"),
        (CommitBatch(memos=[MemoRecord(cid, TaskId("t"), "s", object())]), "step 's'"),
        (CommitBatch(pauses=[PauseRecord(PauseId("p9"), T1, "", cid, TaskId("t"), "n",
                                         "interrupt", Unregistered())]), "pause 'p9'"),
        (CommitBatch(answers=[AnswerRecord(PauseId("p9"), T1, object())]), "answer to 'p9'"),
        (CommitBatch(checkpoint=checkpoint(metadata={"m": object()})), "frontier"),
    ]  # fmt: skip
    for bad_batch, key in cases:
        with pytest.raises(SerializationError) as err:
            await cp.commit(T1, owner, bad_batch)
        assert err.value.key == key
    assert await observe(cp, T1, batch) == before


async def check_commit_does_not_alias_batch(make: Factory) -> None:
    """The store keeps copies: later mutation of batch or reads changes nothing."""
    cp, owner = await leased(make)
    batch = step_batch(None, {"items": [1, 2]})
    ck = batch.checkpoint
    assert ck is not None
    ck.metadata["note"] = ["a"]
    await cp.commit(T1, owner, batch)
    stored = await cp.get_checkpoint(T1)
    assert stored == ck and stored is not ck
    # Mutating what was committed, or what was read, changes nothing stored.
    versions = dict(ck.channel_versions)
    ck.channel_versions["items"] = -1
    ck.metadata["note"].append("b")
    batch.channels[0].value.append(3)
    stored.channel_versions.clear()
    again = await cp.get_checkpoint(T1)
    assert again is not None
    assert again.channel_versions == versions and again.metadata == {"note": ["a"]}
    assert await cp.load_channels(T1, "", versions, {}) == {"items": [1, 2]}


async def check_which_error_wins(make: Factory) -> None:
    """The rule of ``checkpoints.base``: what the store finds before the values it was given.
    A batch that is fenced off and holds a value that cannot be stored raises the fencing
    error; completing a dispatch, "never claimed" beats a bad status beats an unstorable
    result. Nothing is written."""
    cp, owner = await leased(make)
    first = step_batch(None, {"x": 1})
    await cp.commit(T1, owner, first)
    assert first.checkpoint is not None
    head = first.checkpoint.id
    unstorable = step_batch(head, {"x": Unregistered()}, step=1)
    before = await observe(cp, T1, unstorable)
    with pytest.raises(LeaseLostError):  # the lease, before the value
        await cp.commit(T1, new_owner(), unstorable)
    stale = step_batch(CheckpointId("not-the-head"), {"x": Unregistered()}, step=1)
    with pytest.raises(HeadConflictError):  # the head, before the value
        await cp.commit(T1, owner, stale)
    with pytest.raises(SerializationError):  # the value, once lease and head are right
        await cp.commit(T1, owner, unstorable)
    assert await observe(cp, T1, unstorable) == before

    call = CallId("call-1")
    with pytest.raises(CorruptCheckpointError, match="never claimed"):
        await cp.complete_dispatch(T1, call, status="bogus", result=Unregistered())
    await cp.claim_dispatch(DispatchRecord(T1, call, "tool", None, owner))
    with pytest.raises(ValueError, match="dispatch status"):
        await cp.complete_dispatch(T1, call, status="bogus", result=Unregistered())
    with pytest.raises(SerializationError):
        await cp.complete_dispatch(T1, call, status="succeeded", result=Unregistered())
    found = await cp.get_dispatch(T1, call)
    assert found is not None and found.status == "claimed"  # nothing was written
