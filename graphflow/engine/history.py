"""Reading a thread's state and history: ``StateSnapshot``s (API.md, "State and history").

Every snapshot keeps the pauses raised at its checkpoint (those of its subgraph tasks too)
with their answers, says what made its checkpoint (``metadata["source"]``), and gives each
completed task's ``result`` where it can be known without storing values twice: from the
task's record while its step is pending, or, for an applied step of one task, from the
channel values before and after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from checkpoints.base import Checkpointer
from checkpoints.errors import head_missing, pauses_missing
from checkpoints.models import (
    AnswerRecord,
    CheckpointId,
    CheckpointRecord,
    PauseId,
    PauseRecord,
    ThreadId,
    ThreadRecord,
    to_datetime,
)
from graphflow.engine import plan
from graphflow.engine.outcomes import as_update
from graphflow.engine.pauses import pause_from_record
from graphflow.engine.reads import naming
from graphflow.errors import InvalidArgumentError
from graphflow.spec import GraphSpec
from graphflow.state import StateSchema
from graphflow.types import Pause, StateSnapshot, TaskInfo


@dataclass(slots=True)
class Reads:
    """What the snapshots of one call share, read once: the thread's pauses and answers,
    and which checkpoints a step applied (root checkpoint id -> its ``loop`` child)."""

    thread: ThreadRecord
    pauses: list[PauseRecord]
    answers: dict[PauseId, AnswerRecord] | None = None
    applied_by: dict[CheckpointId, CheckpointRecord] = field(default_factory=dict)
    values: dict[tuple[str, CheckpointId], dict[str, Any]] = field(default_factory=dict)


async def get_state(
    spec: GraphSpec,
    store: Checkpointer,
    thread_id: str,
    *,
    checkpoint_id: str | None = None,
    subgraphs: bool = False,
) -> StateSnapshot | None:
    """The thread's state at its head (or ``checkpoint_id``); None for an unknown thread."""
    with naming(thread_id):
        th = await store.get_thread(ThreadId(thread_id))
        if th is None or th.head is None:
            return None
        ck = await store.get_checkpoint(th.thread_id, "", CheckpointId(checkpoint_id or th.head))
        if ck is None and checkpoint_id is None:
            raise head_missing(thread_id, th.head)
        if ck is None:
            raise InvalidArgumentError(f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}")
        reads, _ = await read_shared(store, th, history=ck.id != th.head)
        return await snapshot(spec, store, reads, ck, subgraphs=subgraphs)


async def get_state_history(
    spec: GraphSpec, store: Checkpointer, thread_id: str, *, limit: int | None = None
) -> list[StateSnapshot]:
    """Snapshots of every checkpoint of the thread, newest first, with their pauses and
    answers (an unknown thread has none); ``limit``: the newest ``limit`` of them."""
    if limit is not None and (type(limit) is not int or limit < 0):
        raise InvalidArgumentError(
            f"limit must be a non-negative int (the most snapshots to return) or None, "
            f"not {limit!r:.80}"
        )
    with naming(thread_id):
        th = await store.get_thread(ThreadId(thread_id))
        if th is None:
            return []
        reads, cks = await read_shared(store, th, history=True)
        window = cks if limit is None else cks[:limit]
        return [await snapshot(spec, store, reads, ck) for ck in window]


async def read_shared(
    store: Checkpointer, th: ThreadRecord, *, history: bool
) -> tuple[Reads, list[CheckpointRecord]]:
    """Read what snapshots share; with ``history``, every root checkpoint (newest first)."""
    tid = th.thread_id
    with naming(tid):
        pauses = await store.list_pauses(tid)
        cks = await store.list_checkpoints(tid, "") if history else []
    reads = Reads(th, pauses)
    reads.applied_by = {
        c.parent_id: c for c in cks if c.source == "loop" and c.parent_id is not None
    }
    missing = sorted(set(th.pending_pause_ids) - {p.id for p in pauses})
    if missing:
        raise pauses_missing(tid, missing, th.head)
    return reads, cks


async def snapshot(
    spec: GraphSpec,
    store: Checkpointer,
    reads: Reads,
    ck: CheckpointRecord,
    *,
    subgraphs: bool = False,
) -> StateSnapshot:
    """The snapshot of checkpoint ``ck`` (of any namespace of the thread)."""
    tid = ck.thread_id
    vals = await _values(store, reads, ck)
    spec.schema.check_loaded(vals, tid, ck.id)
    with naming(tid, ck.id):
        records = await store.load_tasks(tid, ck.ns, ck.id)
    pending = set(reads.thread.pending_pause_ids)
    owned, here = _pauses_of(reads, ck, pending)
    if (owned or here) and reads.answers is None:
        with naming(tid, ck.id):
            reads.answers = await store.load_answers(tid)
    child = reads.applied_by.get(ck.id) if ck.ns == "" else None
    tasks = []
    all_pauses: list[Pause] = [_public_pause(p, reads) for p in here]
    for task in ck.frontier:
        rec = records.get(task.id)
        mine = owned.get(task.id, [])
        tp = tuple(_public_pause(p, reads) for p in mine)
        all_pauses += tp
        result = None
        if child is not None:  # its step completed (a later checkpoint applied it)
            status = "completed"
            if rec is not None and rec.writes is not None:
                result = as_update(spec.schema, rec.writes)
            elif len(ck.frontier) == 1:
                after = await _values(store, reads, child)
                result = _derived(spec.schema, vals, ck, after, child)
        elif any(p.id in pending for p in mine):
            status = "paused"
        elif rec is not None:
            status = "pending" if rec.status == "paused" else rec.status
            if rec.status == "completed" and rec.writes is not None:
                result = as_update(spec.schema, rec.writes)
        else:
            status = "pending"
        attempts = rec.attempts if rec else (0 if status == "pending" else 1)
        child_state = None
        node = spec.nodes.get(task.node)
        if subgraphs and node is not None and node.subgraph is not None:
            inner = plan.child_namespace(ck.ns, task.node, task.id)
            with naming(tid):
                child_ck = await store.get_checkpoint(tid, inner)
            if child_ck is not None:
                child_state = await snapshot(node.subgraph, store, reads, child_ck, subgraphs=True)
        tasks.append(
            TaskInfo(
                task.id,
                task.node,
                status,  # type: ignore[arg-type]
                attempts,
                rec.error if rec else None,
                tp,
                child_state,
                result,
            )
        )
    all_pauses.sort(key=lambda p: (p.created_at, p.id))
    # A cancelled thread runs nothing more: its last checkpoint has no next node, task or
    # pause (those it waited on are in metadata["cancelled"]["pauses"], and earlier).
    ended = ck.source == "cancel"
    return StateSnapshot(
        values=spec.schema.view({k: v for k, v in vals.items() if not plan.is_hidden(k)}),
        next=() if ended else tuple(t.node for t in ck.frontier),
        tasks=() if ended else tuple(tasks),
        pauses=() if ended else tuple(all_pauses),
        step=ck.step,
        checkpoint_id=ck.id,
        parent_checkpoint_id=ck.parent_id,
        created_at=to_datetime(ck.created_at),
        metadata={**ck.metadata, "source": ck.source},
    )


def _pauses_of(
    reads: Reads, ck: CheckpointRecord, pending: set[PauseId]
) -> tuple[dict[str, list[PauseRecord]], list[PauseRecord]]:
    """The pauses of each task of ``ck`` (a subgraph task's: of its namespaces), and the
    gates after the step that made ``ck``, raised with it (a subgraph's pauses name the
    root's checkpoint: in its snapshot, those still pending)."""
    ids = {t.id for t in ck.frontier}
    owned: dict[str, list[PauseRecord]] = {}
    here: list[PauseRecord] = []
    prefix = f"{ck.ns}|" if ck.ns else ""
    for p in reads.pauses:
        if p.ns == ck.ns:
            if p.task_id in ids:
                owned.setdefault(p.task_id, []).append(p)
            elif p.kind == "after" and (p.id in pending if ck.ns else p.checkpoint_id == ck.id):
                here.append(p)
        elif p.ns.startswith(prefix):
            hop = p.ns[len(prefix) :].partition("|")[0]
            task = hop.rpartition(":")[2]
            if task in ids:
                owned.setdefault(task, []).append(p)
    return owned, here


async def _values(store: Checkpointer, reads: Reads, ck: CheckpointRecord) -> dict[str, Any]:
    key = (ck.ns, ck.id)
    vals = reads.values.get(key)
    if vals is None:
        with naming(ck.thread_id, ck.id):
            vals = await store.load_channels(
                ck.thread_id, ck.ns, ck.channel_versions, ck.channel_bases
            )
        reads.values[key] = vals
    return vals


def _public_pause(rec: PauseRecord, reads: Reads) -> Pause:
    return pause_from_record(rec, (reads.answers or {}).get(rec.id))


def _derived(
    schema: StateSchema,
    before: Mapping[str, Any],
    ck: CheckpointRecord,
    after: Mapping[str, Any],
    applied: CheckpointRecord,
) -> dict[str, Any] | None:
    """The update of the only task of ``ck``'s step, from the values before and after it
    (the keys whose version ``applied`` changed); None when one key's update cannot be told."""
    out: dict[str, Any] = {}
    old_versions = ck.channel_versions
    for k, version in applied.channel_versions.items():
        ch = schema.channels.get(k)
        if ch is None or old_versions.get(k) == version or k not in after:
            continue
        new = after[k]
        if ch.reducer is None:
            out[k] = new
            continue
        old = before.get(k, [])
        if isinstance(new, list) and isinstance(old, list) and new[: len(old)] == old:
            out[k] = new[len(old) :]  # the items it added
            continue
        return None
    return out
