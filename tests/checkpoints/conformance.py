"""The conformance suite every ``Checkpointer`` backend must pass (STYLE.md #9).

Each ``check_*`` coroutine takes a factory; every call of the factory returns a checkpointer
on a new, empty store. The checks use only the ``Checkpointer`` protocol, so they say what
every backend promises (``checkpoints/base.py``); ``MemoryCheckpointer`` is the reference.
``test_conformance.py`` runs ``CHECKS`` against every backend.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import anyio
import pytest
from pydantic import BaseModel

from checkpoints import (
    AnswerRecord,
    ChannelWrite,
    Checkpointer,
    CheckpointRecord,
    CommitBatch,
    CorruptCheckpointError,
    DecisionRecord,
    DispatchRecord,
    HeadConflictError,
    LeaseHeldError,
    LeaseLostError,
    MemoRecord,
    PauseRecord,
    SerializationError,
    TaskRecord,
    TaskSpec,
    ThreadUpdate,
    serde,
)
from checkpoints.lease import new_owner
from checkpoints.models import (
    CallId,
    CheckpointId,
    PauseId,
    TaskId,
    ThreadId,
    new_checkpoint_id,
    next_version,
)

Factory = Callable[[], Checkpointer]
Check = Callable[[Factory], Awaitable[None]]

T1 = ThreadId("thread-1")
T2 = ThreadId("thread-2")
REMOTE = "some-other-host:4242:abc"  # never "known dead": its lease must expire


class Invoice(BaseModel):
    """A registered pydantic model stored inside values."""

    number: int
    issued: datetime
    lines: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Point:
    """A registered dataclass stored inside values."""

    x: int
    y: int


class Unregistered(BaseModel):
    """A pydantic model nobody registered: it cannot be stored."""

    a: int = 1


serde.register(Invoice, name="graphflow-tests.Invoice")
serde.register(Point, name="graphflow-tests.Point")


def rich_value() -> dict[str, Any]:
    """A value using every kind of data the serializer revives."""
    return {
        "aware": datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC),
        "offset": datetime(2024, 5, 1, 12, 30, tzinfo=timezone(timedelta(hours=2))),
        "naive": datetime(2024, 5, 1, 12, 30),
        "day": date(2024, 5, 1),
        "delta": timedelta(days=1, seconds=3),
        "pair": (1, "a"),
        "nested": [(1, 2), {"k": (3, (4,))}],
        "set": {1, 2, 3},
        "invoice": Invoice(number=7, issued=datetime(2024, 1, 2, tzinfo=UTC), lines=("a", "b")),
        "point": Point(1, 2),
        "uuid": UUID("12345678-1234-5678-1234-567812345678"),
        "decimal": Decimal("1.10"),
        "bytes": b"\x00\xff",
        "big": 2**70,
        "none": None,
        "float": 1.5,
        "text": "héllo",
    }


def assert_rich(value: Any) -> None:
    """``value`` equals ``rich_value()``, with the same types (tuples stay tuples)."""
    assert value == rich_value()
    assert type(value["pair"]) is tuple
    assert type(value["nested"][0]) is tuple and type(value["nested"][1]["k"][1]) is tuple
    assert type(value["invoice"]) is Invoice and type(value["invoice"].lines) is tuple
    assert type(value["point"]) is Point
    assert value["aware"].tzinfo is not None and value["naive"].tzinfo is None


# -- builders ---------------------------------------------------------------------------------


def checkpoint(
    thread_id: ThreadId = T1,
    *,
    ns: str = "",
    parent: CheckpointId | None = None,
    step: int = 0,
    versions: dict[str, int] | None = None,
    bases: dict[str, tuple[int, int]] | None = None,
    frontier: tuple[TaskSpec, ...] = (),
    metadata: dict[str, Any] | None = None,
) -> CheckpointRecord:
    """A checkpoint record with a fresh id."""
    return CheckpointRecord(
        id=new_checkpoint_id(),
        thread_id=thread_id,
        ns=ns,
        parent_id=parent,
        step=step,
        source="loop" if parent else "input",
        channel_versions=dict(versions or {}),
        frontier=frontier,
        channel_bases=dict(bases or {}),
        metadata=dict(metadata or {}),
    )


def step_batch(
    parent: CheckpointId | None,
    values: dict[str, Any],
    *,
    thread_id: ThreadId = T1,
    step: int = 0,
    check_head: bool = True,
) -> CommitBatch:
    """A W1-like step: one completed task, the next checkpoint, its channel writes."""
    writes = [ChannelWrite(k, next_version(), "set", v) for k, v in values.items()]
    ck = checkpoint(
        thread_id,
        parent=parent,
        step=step,
        versions={w.channel: w.version for w in writes},
        frontier=(TaskSpec(TaskId(f"task-{step + 1}"), "next"),),
    )
    task = TaskRecord(parent or ck.id, TaskId(f"task-{step}"), "node", "completed", 1)
    return CommitBatch(
        tasks=[task],
        checkpoint=ck,
        channels=writes,
        thread=ThreadUpdate("running"),
        expected_head=parent,
        check_head=check_head,
    )


async def leased(make: Factory, thread_id: ThreadId = T1) -> tuple[Checkpointer, str]:
    """A new store, with ``thread_id`` created and leased by a new owner."""
    cp = make()
    await cp.setup()
    owner = new_owner()
    await cp.acquire_lease(thread_id, owner, 60.0, graph_name="g")
    return cp, owner


async def observe(cp: Checkpointer, thread_id: ThreadId, batch: CommitBatch) -> dict[str, Any]:
    """Everything a batch could have changed, as seen through the protocol."""
    ck_ids = {t.checkpoint_id for t in batch.tasks} | {m.checkpoint_id for m in batch.memos}
    if batch.checkpoint is not None:
        ck_ids.add(batch.checkpoint.id)
    seen: dict[str, Any] = {
        "thread": await cp.get_thread(thread_id),
        "checkpoints": await cp.list_checkpoints(thread_id, batch.ns),
        "root": await cp.list_checkpoints(thread_id),
        "tasks": {c: await cp.load_tasks(thread_id, batch.ns, c) for c in sorted(ck_ids)},
        "memos": {c: await cp.load_memos(thread_id, batch.ns, c) for c in sorted(ck_ids)},
        "pauses": await cp.list_pauses(thread_id),
        "answers": await cp.load_answers(thread_id),
        "threads": await cp.list_threads(),
    }
    channels = {}
    for w in batch.channels:
        try:
            channels[w.channel] = await cp.load_channels(
                thread_id, batch.ns, {w.channel: w.version}, {}
            )
        except CorruptCheckpointError:
            channels[w.channel] = "missing"
    seen["channels"] = channels
    return seen


def full_batch(parent: CheckpointId | None, bad: Any = None) -> CommitBatch:
    """A batch with a record of every kind; ``bad`` (when given) is one unstorable value."""
    batch = step_batch(parent, {"good": [1, 2, 3]}, step=1)
    ck = batch.checkpoint
    assert ck is not None
    if bad is not None:
        v = next_version()
        batch.channels.append(ChannelWrite("bad", v, "set", bad))
        ck.channel_versions["bad"] = v
    cid = ck.id
    batch.memos.append(MemoRecord(cid, TaskId("task-1"), "llm", {"answer": 42}))
    pause = PauseRecord(PauseId("p1"), T1, "", cid, TaskId("task-1"), "node", "interrupt", "ok?")
    batch.pauses.append(pause)
    batch.answers.append(AnswerRecord(PauseId("p0"), T1, "yes"))
    batch.thread = ThreadUpdate("paused", (PauseId("p1"),), graph_name="renamed")
    return batch


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


# -- checkpoints ------------------------------------------------------------------------------


async def check_checkpoints_get_and_list(make: Factory) -> None:
    """Checkpoints by id, newest first, the head, forks and subgraph namespaces."""
    cp, owner = await leased(make)
    assert await cp.get_checkpoint(T1) is None
    assert await cp.list_checkpoints(T1) == []
    assert await cp.get_checkpoint(T2) is None
    assert await cp.list_checkpoints(T2) == []

    spec = TaskSpec(TaskId("send-1"), "worker", has_arg=True, arg={"job": (1, "x")})
    records = []
    parent = None
    for step in range(3):
        ck = checkpoint(
            parent=parent,
            step=step,
            versions={"a": next_version(), "b": next_version()},
            bases={"b": (5, step)},
            frontier=(TaskSpec(TaskId(f"t{step}"), "n"), spec),
            metadata={"step": step, "when": datetime(2024, 1, 1, tzinfo=UTC)},
        )
        await cp.commit(
            T1, owner, CommitBatch(checkpoint=ck, expected_head=parent, check_head=True)
        )
        records.append(ck)
        parent = ck.id

    head = await cp.get_checkpoint(T1)
    assert head == records[-1]
    assert head is not None and type(head.frontier) is tuple
    assert head.frontier[1] == spec and type(head.frontier[1].arg["job"]) is tuple
    assert head.channel_bases == {"b": (5, 2)} and type(head.channel_bases["b"]) is tuple
    assert await cp.list_checkpoints(T1) == records[::-1]
    assert await cp.list_checkpoints(T1, limit=2) == records[:0:-1]
    assert await cp.list_checkpoints(T1, limit=0) == []
    assert await cp.get_checkpoint(T1, checkpoint_id=records[0].id) == records[0]
    assert await cp.get_checkpoint(T1, checkpoint_id=CheckpointId("nope")) is None
    assert await cp.get_checkpoint(T1, "sub:1") is None

    # A fork: the head is what was committed last, not the largest id.
    fork = checkpoint(parent=records[0].id, step=1)
    await cp.commit(T1, owner, CommitBatch(checkpoint=fork))
    assert await cp.get_checkpoint(T1) == fork
    assert [c.id for c in await cp.list_checkpoints(T1)] == [
        fork.id, *[r.id for r in records[::-1]]
    ]  # fmt: skip

    # A subgraph namespace has its own checkpoints; they never move the root head.
    subs = []
    for step in range(2):
        sub = checkpoint(ns="sub:1", step=step, parent=subs[-1].id if subs else None)
        await cp.commit(T1, owner, CommitBatch(ns="sub:1", checkpoint=sub))
        subs.append(sub)
    assert await cp.get_checkpoint(T1, "sub:1") == subs[-1]
    assert await cp.list_checkpoints(T1, "sub:1") == subs[::-1]
    assert await cp.get_checkpoint(T1, "sub:1", subs[0].id) == subs[0]
    assert await cp.get_checkpoint(T1, "", subs[0].id) is None
    rec = await cp.get_thread(T1)
    assert rec is not None and rec.head == fork.id
    assert await cp.get_checkpoint(T1) == fork


# -- channels ---------------------------------------------------------------------------------


async def check_channels_set_and_append_chains(make: Factory) -> None:
    """Channel rows by version; list channels rebuilt from set + appends."""
    cp, owner = await leased(make)

    async def write(*writes: ChannelWrite, ns: str = "") -> None:
        await cp.commit(T1, owner, CommitBatch(ns=ns, channels=list(writes)))

    # Plain channels: one row per version; every version stays readable.
    v1, v2 = next_version(), next_version()
    await write(
        ChannelWrite("counter", v1, "set", 1), ChannelWrite("rich", v1, "set", rich_value())
    )
    await write(ChannelWrite("counter", v2, "set", 2))
    got = await cp.load_channels(T1, "", {"counter": v1, "rich": v1}, {})
    assert list(got) == ["counter", "rich"] and got["counter"] == 1
    assert_rich(got["rich"])
    assert await cp.load_channels(T1, "", {"counter": v2}, {}) == {"counter": 2}
    assert await cp.load_channels(T1, "", {}, {}) == {}

    # A list channel: a set row, then appends of that base.
    base = next_version()
    await write(ChannelWrite("msgs", base, "set", ["m0"]))
    appends = []
    for i in range(1, 11):
        v = next_version()
        appends.append(v)
        await write(ChannelWrite("msgs", v, "append", [f"m{i}", (i,)], base=base))
    full = [["m0"], *([f"m{i}", (i,)] for i in range(1, 11))]
    flat = ["m0"] + [x for pair in full[1:] for x in pair]
    got = await cp.load_channels(T1, "", {"msgs": appends[-1]}, {"msgs": (base, 10)})
    assert got == {"msgs": flat} and type(got["msgs"][2]) is tuple
    got = await cp.load_channels(T1, "", {"msgs": appends[2]}, {"msgs": (base, 3)})
    assert got == {"msgs": flat[:7]}
    assert await cp.load_channels(T1, "", {"msgs": base}, {"msgs": (base, 0)}) == {"msgs": ["m0"]}

    # A fork: a second chain from a different base, next to the first one.
    base2 = next_version()
    await write(ChannelWrite("msgs", base2, "set", flat[:3]))
    fork = next_version()
    await write(ChannelWrite("msgs", fork, "append", ["x"], base=base2))
    later = next_version()
    await write(ChannelWrite("msgs", later, "append", ["m11"], base=base))
    got = await cp.load_channels(T1, "", {"msgs": fork}, {"msgs": (base2, 1)})
    assert got == {"msgs": [*flat[:3], "x"]}
    got = await cp.load_channels(T1, "", {"msgs": later}, {"msgs": (base, 11)})
    assert got == {"msgs": [*flat, "m11"]}

    # Appends whose base has no set row: the chain's start is missing (damage, never a guess
    # that the list started empty).
    orphan = next_version()
    first = next_version()
    await write(ChannelWrite("log", first, "append", ["a"], base=orphan))
    with pytest.raises(CorruptCheckpointError, match="'log'") as no_start:
        await cp.load_channels(T1, "", {"log": first}, {"log": (orphan, 1)})
    assert no_start.value.thread_id == T1

    # Channels of another namespace are separate.
    await write(ChannelWrite("counter", v1, "set", "sub"), ns="sub:1")
    assert await cp.load_channels(T1, "sub:1", {"counter": v1}, {}) == {"counter": "sub"}
    assert await cp.load_channels(T1, "", {"counter": v1}, {}) == {"counter": 1}

    # Missing rows are reported, never guessed.
    with pytest.raises(CorruptCheckpointError) as missing:
        await cp.load_channels(T1, "", {"counter": next_version()}, {})
    assert missing.value.thread_id == T1 and "thread-1" in str(missing.value)
    with pytest.raises(CorruptCheckpointError):
        await cp.load_channels(T1, "", {"msgs": appends[-1]}, {"msgs": (base, 11)})
    with pytest.raises(CorruptCheckpointError):
        await cp.load_channels(T2, "", {"counter": v1}, {})  # no such thread


# -- tasks and memos --------------------------------------------------------------------------


async def check_tasks_upsert_and_load(make: Factory) -> None:
    """Task records are upserted per (checkpoint, task id) and round-trip."""
    cp, owner = await leased(make)
    c1, c2 = new_checkpoint_id(), new_checkpoint_id()
    assert await cp.load_tasks(T1, "", c1) == {}
    a = TaskRecord(c1, TaskId("a"), "alpha", "pending")
    b = TaskRecord(c1, TaskId("b"), "beta", "running", attempts=1, started_at=10.5)
    other = TaskRecord(c2, TaskId("a"), "alpha", "pending")
    await cp.commit(T1, owner, CommitBatch(tasks=[a, b, other]))
    assert await cp.load_tasks(T1, "", c1) == {"a": a, "b": b}

    done = TaskRecord(
        c1, TaskId("a"), "alpha", "completed", attempts=2, started_at=11.0, ended_at=12.25,
        writes=[("counter", 3), ("rich", rich_value())], routes=["next", ("send", 1)],
    )  # fmt: skip
    failed = TaskRecord(c1, TaskId("b"), "beta", "failed", 1, 10.5, 13.0, error="boom")
    await cp.commit(T1, owner, CommitBatch(tasks=[done, failed]))
    tasks = await cp.load_tasks(T1, "", c1)
    assert tasks == {"a": done, "b": failed} and list(tasks) == ["a", "b"]
    writes = tasks[TaskId("a")].writes
    assert writes is not None and type(writes[0]) is tuple
    assert_rich(writes[1][1])
    assert await cp.load_tasks(T1, "", c2) == {"a": other}
    assert await cp.load_tasks(T1, "sub:1", c1) == {}
    assert await cp.load_tasks(T2, "", c1) == {}


async def check_memos(make: Factory) -> None:
    """Memoized step results by task and key; the latest write of a key wins."""
    cp, owner = await leased(make)
    c1 = new_checkpoint_id()
    assert await cp.load_memos(T1, "", c1) == {}
    memos = [
        MemoRecord(c1, TaskId("a"), "first", 1),
        MemoRecord(c1, TaskId("a"), "second", rich_value()),
        MemoRecord(c1, TaskId("b"), "first", (1, 2)),
    ]
    await cp.commit(T1, owner, CommitBatch(memos=memos))
    await cp.commit(T1, owner, CommitBatch(memos=[MemoRecord(c1, TaskId("a"), "first", "new")]))
    await cp.commit(T1, owner, CommitBatch(ns="sub:1", memos=[MemoRecord(c1, TaskId("z"), "k", 0)]))
    got = await cp.load_memos(T1, "", c1)
    assert list(got) == ["a", "b"] and list(got[TaskId("a")]) == ["first", "second"]
    assert got[TaskId("a")]["first"] == "new" and got[TaskId("b")] == {"first": (1, 2)}
    assert_rich(got[TaskId("a")]["second"])
    assert await cp.load_memos(T1, "sub:1", c1) == {"z": {"k": 0}}
    assert await cp.load_memos(T1, "", new_checkpoint_id()) == {}


# -- pauses and answers -----------------------------------------------------------------------


async def check_pauses_and_answers(make: Factory) -> None:
    """Pauses by id and oldest first; the latest answer per pause wins."""
    cp, owner = await leased(make)
    cid = new_checkpoint_id()
    p1 = PauseRecord(
        PauseId("p1"), T1, "", cid, TaskId("t1"), "ask", "interrupt", rich_value(), 1.0
    )
    p2 = PauseRecord(
        PauseId("p2"), T1, "review:t9", cid, TaskId("t2"), "review.agent", "tool_confirmation",
        {"call": "c1"}, 2.0,
    )  # fmt: skip
    await cp.commit(
        T1, owner, CommitBatch(pauses=[p2, p1], thread=ThreadUpdate("paused", (p1.id, p2.id)))
    )
    assert await cp.list_pauses(T1) == [p1, p2]  # oldest first
    got = await cp.get_pauses(T1, [PauseId("p2"), PauseId("nope"), PauseId("p1")])
    assert got == [p2, p1]
    assert_rich(got[1].value)
    assert await cp.get_pauses(T1, []) == []
    assert await cp.get_pauses(T2, [PauseId("p1")]) == []
    assert await cp.list_pauses(T2) == []

    assert await cp.load_answers(T1) == {}
    a1 = AnswerRecord(PauseId("p1"), T1, "no", by="ann", reason="first look", created_at=3.0)
    a2 = AnswerRecord(PauseId("p2"), T1, {"approve": True}, created_at=4.0)
    a3 = AnswerRecord(PauseId("p1"), T1, rich_value(), by="bob", created_at=5.0)
    await cp.put_answers([a1, a2])
    await cp.put_answers([])
    await cp.commit(T1, owner, CommitBatch(answers=[a3]))  # answers can come with a commit
    latest = await cp.load_answers(T1)
    assert latest == {"p1": a3, "p2": a2}  # the latest answer per pause wins
    assert_rich(latest[PauseId("p1")].value)
    assert await cp.load_answers(T1, [PauseId("p2")]) == {"p2": a2}
    assert await cp.load_answers(T1, [PauseId("nope")]) == {}
    assert await cp.load_answers(T2) == {}
    other = AnswerRecord(PauseId("p1"), T2, "elsewhere")
    await cp.put_answers([other])  # no lease needed
    assert await cp.load_answers(T2) == {"p1": other}
    assert (await cp.load_answers(T1))[PauseId("p1")] == a3

    with pytest.raises(SerializationError) as err:
        await cp.put_answers([AnswerRecord(PauseId("p2"), T1, "fine"),
                              AnswerRecord(PauseId("p2"), T1, object())])  # fmt: skip
    assert err.value.key == "answer to 'p2'"
    assert await cp.load_answers(T1) == {"p1": a3, "p2": a2}  # none of them was stored


# -- decisions and dispatch ---------------------------------------------------------------------


async def check_decisions_append_only(make: Factory) -> None:
    """Decisions are appended and listed oldest first, per thread or call."""
    cp = make()
    assert await cp.list_decisions(T1) == []
    d1 = DecisionRecord(T1, CallId("c1"), "deny", "fp1", by="ann", reason="no", created_at=1.0)
    d2 = DecisionRecord(T1, CallId("c2"), "approve", created_at=2.0)
    d3 = DecisionRecord(
        T1, CallId("c1"), "approve", "fp2", by="bob", applied=False, note="fingerprint mismatch",
        created_at=3.0,
    )  # fmt: skip
    await cp.put_decisions([d1, d2])
    await cp.put_decisions([])
    await cp.put_decisions([d3, DecisionRecord(T2, CallId("c1"), "approve")])
    assert await cp.list_decisions(T1) == [d1, d2, d3]
    assert await cp.list_decisions(T1, CallId("c1")) == [d1, d3]
    assert await cp.list_decisions(T1, CallId("nope")) == []
    assert [d.thread_id for d in await cp.list_decisions(T2)] == [T2]
    assert (await cp.list_decisions(T1))[2].applied is False
    assert (await cp.list_decisions(T1))[0].pause_id is None
    assert (await cp.list_decisions(T1))[0].extra == {}


async def check_decision_pause_id_and_extra(make: Factory) -> None:
    """A decision's ``pause_id`` and ``extra`` round-trip (``extra`` as a copy, values of
    any storable type); an unstorable ``extra`` value is refused, naming it, and nothing of
    the batch is stored."""
    cp = make()
    extra = {"principal": {"id": "ann", "roles": ("admin",)}, "digest": "sha256:ab",
             "rich": rich_value()}  # fmt: skip
    d1 = DecisionRecord(
        T1, CallId("c1"), "approve", "fp", by="ann", created_at=1.0, pause_id=PauseId("p1"),
        extra=extra,
    )  # fmt: skip
    d2 = DecisionRecord(T1, CallId("c2"), "deny", reason="no", created_at=2.0)
    await cp.put_decisions([d1, d2])
    extra["digest"] = "changed after put"
    got = await cp.list_decisions(T1)
    assert [d.pause_id for d in got] == ["p1", None]
    assert got[0].extra["digest"] == "sha256:ab" and got[1].extra == {}
    assert type(got[0].extra["principal"]["roles"]) is tuple
    assert_rich(got[0].extra["rich"])
    assert got[0] == dataclasses.replace(d1, extra={**extra, "digest": "sha256:ab"})
    got[0].extra["digest"] = "changed after read"
    assert (await cp.list_decisions(T1, CallId("c1")))[0].extra["digest"] == "sha256:ab"
    bad = DecisionRecord(T1, CallId("c3"), "approve", extra={"when": object()})
    with pytest.raises(SerializationError) as err:
        await cp.put_decisions([DecisionRecord(T1, CallId("c4"), "approve"), bad])
    assert err.value.key == "extra of decision 'c3'" and err.value.type_name == "object"
    assert [d.call_id for d in await cp.list_decisions(T1)] == ["c1", "c2"]


async def check_dispatch_claim_once(make: Factory) -> None:
    """A tool call is claimed once; its outcome is recorded after the claim."""
    cp = make()
    assert await cp.get_dispatch(T1, CallId("c1")) is None
    claim = DispatchRecord(T1, CallId("c1"), "send_email", "fp", "worker-a", claimed_at=1.0)
    assert await cp.claim_dispatch(claim) is True
    assert await cp.claim_dispatch(dataclasses.replace(claim, owner="worker-b")) is False
    assert await cp.claim_dispatch(dataclasses.replace(claim, thread_id=T2)) is True
    assert await cp.get_dispatch(T1, CallId("c1")) == claim

    with pytest.raises(CorruptCheckpointError):
        await cp.complete_dispatch(T1, CallId("never"), status="succeeded")
    with pytest.raises(ValueError):
        await cp.complete_dispatch(T1, CallId("c1"), status="exploded")
    with pytest.raises(SerializationError):
        await cp.complete_dispatch(T1, CallId("c1"), status="succeeded", result=object())
    assert await cp.get_dispatch(T1, CallId("c1")) == claim  # failed calls changed nothing

    await cp.complete_dispatch(T1, CallId("c1"), status="succeeded", result=rich_value())
    done = await cp.get_dispatch(T1, CallId("c1"))
    assert done is not None
    assert (done.status, done.owner, done.tool, done.fingerprint) == (
        "succeeded", "worker-a", "send_email", "fp"
    )  # fmt: skip
    assert done.claimed_at == 1.0 and done.completed_at is not None and done.error is None
    assert_rich(done.result)
    assert await cp.claim_dispatch(claim) is False  # still claimed after completion

    await cp.complete_dispatch(T2, CallId("c1"), status="failed", error="timeout")
    failed = await cp.get_dispatch(T2, CallId("c1"))
    assert failed is not None
    assert (failed.status, failed.error, failed.result) == ("failed", "timeout", None)


# -- listing ----------------------------------------------------------------------------------


async def check_list_threads(make: Factory) -> None:
    """Threads by status, most recently updated first, with pending pause counts."""
    cp = make()
    assert await cp.list_threads() == []
    assert await cp.list_threads("paused") == []
    wanted = {
        ThreadId("a"): ("paused", 2),
        ThreadId("b"): ("done", 0),
        ThreadId("c"): ("paused", 1),
        ThreadId("d"): ("running", 0),
    }
    owner = new_owner()
    for tid, (status, n) in wanted.items():
        await cp.acquire_lease(tid, owner, 60.0, graph_name=f"graph-{tid}")
        ids = tuple(PauseId(f"{tid}-p{i}") for i in range(n))
        await cp.commit(tid, owner, CommitBatch(thread=ThreadUpdate(status, ids)))
        await anyio.sleep(0.002)  # distinct updated_at
    infos = await cp.list_threads()
    assert [i.thread_id for i in infos] == ["d", "c", "b", "a"]  # most recently updated first
    paused = await cp.list_threads("paused")
    assert [(i.thread_id, i.pending_pauses) for i in paused] == [("c", 1), ("a", 2)]
    assert [i.thread_id for i in await cp.list_threads("done")] == ["b"]
    assert await cp.list_threads("failed") == []
    info = paused[0]
    rec = await cp.get_thread(ThreadId("c"))
    assert rec is not None
    assert (info.status, info.graph_name) == ("paused", "graph-c")
    assert info.updated_at == datetime.fromtimestamp(rec.updated_at, UTC)
    assert info.created_at == datetime.fromtimestamp(rec.created_at, UTC)

    # Answering "a" and moving it on changes its place and count.
    await cp.commit(ThreadId("a"), owner, CommitBatch(thread=ThreadUpdate("running")))
    assert [i.thread_id for i in await cp.list_threads("paused")] == ["c"]
    assert (await cp.list_threads())[0].thread_id == "a"


async def check_list_threads_refuses_an_unknown_status(make: Factory) -> None:
    """A status that is not a ``ThreadStatus`` is a ``ValueError`` naming it and the valid
    ones, never an empty list (a typo would otherwise look like "no such threads")."""
    cp = make()
    await cp.acquire_lease(T1, new_owner(), 60.0)
    for bad in ["Paused", "pending", "", 1, None.__class__]:
        with pytest.raises(ValueError, match="status") as err:
            await cp.list_threads(bad)  # type: ignore[arg-type]
        assert repr(bad) in str(err.value) and "'paused'" in str(err.value)
    assert [i.thread_id for i in await cp.list_threads("running")] == [T1]


async def check_commit_takes_and_gives_up_the_lease(make: Factory) -> None:
    """``acquire_ttl`` takes the lease in the commit's transaction (creating the thread);
    ``release`` gives it up in it; a live other owner makes the commit fail untouched."""
    cp = make()
    ck = CheckpointRecord(CheckpointId("c1"), T1, "", None, -1, "input", {}, (), {}, 1.0)
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
    assert list(point.memos["task-1"]) == ["llm", "b"]
    again = await cp.resume_thread(T1, me, 90.0)  # its own lease: taken again, extended
    assert again is not None and again.thread.lease_owner == me
    assert again.thread.lease_expires_at is not None
    assert point.thread.lease_expires_at is not None
    assert again.thread.lease_expires_at > point.thread.lease_expires_at


CHECKS: list[Check] = [
    check_lease_acquire_renew_release,
    check_lease_held_by_live_owner,
    check_lease_takeover_after_expiry,
    check_lease_takeover_of_dead_process,
    check_commit_fencing,
    check_commit_writes_everything,
    check_serialization_error_writes_nothing,
    check_commit_does_not_alias_batch,
    check_checkpoints_get_and_list,
    check_channels_set_and_append_chains,
    check_tasks_upsert_and_load,
    check_memos,
    check_pauses_and_answers,
    check_decisions_append_only,
    check_decision_pause_id_and_extra,
    check_dispatch_claim_once,
    check_list_threads,
    check_list_threads_refuses_an_unknown_status,
    check_commit_takes_and_gives_up_the_lease,
    check_resume_thread,
]
"""Every check, in a stable order (test ids are the function names)."""
