"""What the checks share: the threads they use, values of every storable kind, and batch
builders (``step_batch``, ``full_batch``) that use only the public records."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

from pydantic import BaseModel

from checkpoints import (
    AnswerRecord,
    ChannelWrite,
    Checkpointer,
    CheckpointRecord,
    CommitBatch,
    CorruptCheckpointError,
    MemoRecord,
    PauseRecord,
    TaskRecord,
    TaskSpec,
    ThreadUpdate,
    serde,
)
from checkpoints.lease import new_owner
from checkpoints.models import (
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
    channels: dict[str, object] = {}
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
