"""Checks of the reads: checkpoints, channel values and append chains, tasks and memos
(listing threads: ``listing``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from checkpoints import (
    ChannelWrite,
    CheckpointRecord,
    CommitBatch,
    CorruptCheckpointError,
    MemoRecord,
    TaskRecord,
    TaskSpec,
)
from checkpoints.models import (
    CheckpointId,
    TaskId,
    new_checkpoint_id,
    next_version,
)
from checkpoints.testing.support import (
    T1,
    T2,
    Factory,
    assert_rich,
    checkpoint,
    leased,
    rich_value,
)

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
    subs: list[CheckpointRecord] = []
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
    full: list[list[Any]] = [["m0"], *([f"m{i}", (i,)] for i in range(1, 11))]
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


async def check_channel_chunks(make: Factory) -> None:
    """A chunk write closes a chain of appends: every version of the list, before, at and
    after chunks, reads back as it was; a chunk of a chain whose appends are not the ones
    counted is refused, writing nothing (see ``checkpoints.chunks``)."""
    cp, owner = await leased(make)

    async def write(*writes: ChannelWrite) -> None:
        await cp.commit(T1, owner, CommitBatch(channels=list(writes)))

    start = next_version()
    await write(ChannelWrite("log", start, "set", ["s"]))
    expected: dict[int, tuple[list[Any], tuple[int, int]]] = {start: (["s"], (start, 0))}
    value: list[Any] = ["s"]
    base, count = start, 0
    for i in range(10):  # chains of 3 appends, each closed by a chunk (the 4th write)
        v = next_version()
        items: list[Any] = [f"i{i}", (i,)]
        if count == 3:
            await write(ChannelWrite("log", v, "chunk", items, base, count))
            base, count = v, 0
        else:
            await write(ChannelWrite("log", v, "append", items, base))
            count += 1
        value = [*value, *items]
        expected[v] = (value, (base, count))
    for v, (want, chain) in expected.items():
        got = await cp.load_channels(T1, "", {"log": v}, {"log": chain})
        assert got == {"log": want}, (v, chain)
    assert type(got["log"][-1]) is tuple

    # A chunk counting appends its chain does not have: refused, nothing written.
    v = next_version()
    with pytest.raises(CorruptCheckpointError, match="'log'") as refused:
        await write(ChannelWrite("log", v, "chunk", ["x"], base, count + 1))
    assert refused.value.thread_id == T1
    with pytest.raises(CorruptCheckpointError):
        await cp.load_channels(T1, "", {"log": v}, {"log": (v, 0)})
    last = max(expected)
    assert await cp.load_channels(T1, "", {"log": last}, {"log": expected[last][1]}) == {
        "log": expected[last][0]
    }


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
