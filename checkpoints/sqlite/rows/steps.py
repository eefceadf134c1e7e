"""Rows of a step: checkpoints, channel values, tasks and memos (see ``checks``)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any, cast

from checkpoints.encoding import load_value
from checkpoints.errors import CorruptCheckpointError
from checkpoints.models import (
    CHECKPOINT_SOURCES,
    TASK_STATUSES,
    CheckpointId,
    CheckpointRecord,
    CheckpointSource,
    TaskId,
    TaskRecord,
    TaskSpec,
    TaskStatus,
    ThreadId,
)
from checkpoints.sqlite.rows.checks import (
    INT64,
    bad_shape,
    channel_crc,
    channel_seed,
    check_crc,
    crc,
    damaged,
    is_count,
    is_int64,
    is_opt_str,
    is_opt_time,
    is_time,
    time_value,
)

# -- checkpoints ----------------------------------------------------------------------------

CKPT_COLS = (
    "id, parent_id, step, source, channel_versions, channel_bases, body, created_at, crc,"
    " n_tasks, n_memos"
)
N_TASKS, N_MEMOS = 9, 10


def checkpoint_row(
    thread_id: str, ns: str, ck: CheckpointRecord, versions: bytes, bases: bytes | None, body: bytes
) -> tuple[Any, ...]:
    """A checkpoint's values as written (``thread_id, ns, id, ..., created_at, crc``)."""
    values = (thread_id, ns, ck.id, ck.parent_id, ck.step, ck.source, versions, bases, body,
              time_value(ck.created_at))  # fmt: skip
    return (*values, crc(values))


def checkpoint(thread_id: str, ns: str, row: Sequence[Any]) -> CheckpointRecord:
    """Decode a checkpoint row (``CKPT_COLS``)."""
    cid, parent, step, source, versions_blob, bases_blob, body_blob, created, stored = row[:9]
    who = cid if type(cid) is str else None
    values = (thread_id, ns, cid, parent, step, source, versions_blob, bases_blob,
              body_blob, created)  # fmt: skip
    check_crc(stored, values, thread_id, who, "checkpoint")
    what = "checkpoint"
    if not (
        type(cid) is str and is_opt_str(parent) and is_int64(step)
        and type(source) is str and source in CHECKPOINT_SOURCES and is_time(created)
        and type(versions_blob) is bytes and type(body_blob) is bytes
        and (bases_blob is None or type(bases_blob) is bytes)
    ):  # fmt: skip
        raise bad_shape(thread_id, who, what, "a column of the wrong type or value")
    versions = load_value(versions_blob, thread_id, cid, what)
    bases = {} if bases_blob is None else load_value(bases_blob, thread_id, cid, what)
    body = load_value(body_blob, thread_id, cid, what)
    if type(versions) is not dict:
        raise bad_shape(thread_id, cid, what, "channel versions are not a map")
    for k, v in versions.items():
        if type(k) is not str or type(v) is not int or not 0 <= v < INT64:
            raise bad_shape(thread_id, cid, what, f"channel {k!r:.40} has version {v!r:.40}")
    if type(bases) is not dict:
        raise bad_shape(thread_id, cid, what, "channel bases are not a map")
    chains = {}
    for k, b in bases.items():
        if not (
            type(b) is list and len(b) == 2 and type(b[0]) is int and type(b[1]) is int
            and 0 <= b[1] < INT64 and k in versions and -INT64 <= b[0] <= versions[k]
        ):  # fmt: skip
            raise bad_shape(thread_id, cid, what, f"channel {k!r:.40} has base {b!r:.40}")
        chains[k] = (b[0], b[1])
    if not (
        type(body) is list and len(body) == 2 and type(body[0]) is list
        and type(body[1]) is dict
    ):  # fmt: skip
        raise bad_shape(thread_id, cid, what, "its frontier and metadata are not a pair")
    frontier = []
    for t in body[0]:
        if not (
            type(t) is list and len(t) == 4 and type(t[0]) is str and type(t[1]) is str
            and type(t[2]) is bool
        ):  # fmt: skip
            raise bad_shape(thread_id, cid, what, f"a frontier entry is {t!r:.80}")
        frontier.append(TaskSpec(TaskId(t[0]), t[1], t[2], t[3]))
    return CheckpointRecord(
        id=CheckpointId(cid),
        thread_id=ThreadId(thread_id),
        ns=ns,
        parent_id=parent,
        step=step,
        source=cast(CheckpointSource, source),
        channel_versions=versions,
        frontier=tuple(frontier),
        channel_bases=chains,
        metadata=body[1],
        created_at=created,
    )


def anchored_counts(thread_id: str, row: Sequence[Any]) -> tuple[int, int]:
    """A checkpoint row's counts of task and memo rows (checked to be counts)."""
    n_tasks, n_memos = row[N_TASKS], row[N_MEMOS]
    if not (is_count(n_tasks) and is_count(n_memos)):
        who = row[0] if type(row[0]) is str else None
        raise damaged(thread_id, who, "checkpoint", "its counts of tasks and memos")
    return n_tasks, n_memos


# -- channels -------------------------------------------------------------------------------

CHANNEL_COLS = "c.kind, c.version, coalesce(c.blob, b.data), c.crc"
"""(The base is the one asked for: ``base = ?`` selects the rows.)"""


def channel_blobs(
    thread_id: str, ns: str, channel: str, found: Sequence[Sequence[Any]], base: int
) -> list[bytes]:
    """The value bytes of channel rows (``CHANNEL_COLS``: a chain's start row at ``base``, a
    ``set`` or a ``chunk``, then its appends, which ``base = ?`` selected) after their
    checksums and kinds."""
    first = found[0]
    try:
        kind, version, value, stored = first
        ok = kind in ("set", "chunk") and stored == channel_crc(
            thread_id, ns, channel, version, kind, base, value
        )
    except (TypeError, AttributeError, OverflowError):  # a column of the wrong type
        ok = False
    if not ok:
        raise _chain_damaged(thread_id, channel, base)
    return [first[2], *append_blobs(thread_id, ns, channel, found[1:], base)]


def _chain_damaged(thread_id: str, channel: str, base: int) -> CorruptCheckpointError:
    """The error for a list chain whose rows fail their checksums or kinds."""
    detail = f"checksum mismatch in its rows from version {base}"
    return damaged(thread_id, None, f"channel {channel!r}", detail)


def append_blobs(
    thread_id: str, ns: str, channel: str, found: Sequence[Sequence[Any]], base: int
) -> list[bytes]:
    """The value bytes of a chain's append rows alone (``CHANNEL_COLS``), after their
    checksums and kinds (what a chunk closing the chain copies)."""
    try:
        ok = _appends_ok(thread_id, ns, channel, found, base)
    except (TypeError, AttributeError, OverflowError):
        ok = False
    if not ok:
        raise _chain_damaged(thread_id, channel, base)
    return [r[2] for r in found]


def _appends_ok(
    thread_id: str, ns: str, channel: str, rows: Sequence[Sequence[Any]], base: int
) -> bool:
    if not rows:
        return True
    c32 = zlib.crc32
    seed = channel_seed(thread_id, ns, channel, "append", base)
    return {r[0] for r in rows} == {"append"} and [
        c32(r[2], c32(r[1].to_bytes(8, "big", signed=True), seed)) for r in rows
    ] == [r[3] for r in rows]


# -- tasks and memos ------------------------------------------------------------------------

TASK_COLS = "task_id, node, status, attempts, started_at, ended_at, error, body, crc"


def task_row(thread_id: str, ns: str, t: TaskRecord, body: bytes | None) -> tuple[Any, ...]:
    """A task's values as written (table order, ``crc`` last)."""
    values = (thread_id, ns, t.checkpoint_id, t.task_id, t.node, t.status, t.attempts,
              time_value(t.started_at), time_value(t.ended_at), t.error, body)  # fmt: skip
    return (*values, crc(values))


def task(thread_id: str, ns: str, checkpoint_id: str, row: Sequence[Any]) -> TaskRecord:
    """Decode a task row (``TASK_COLS``) of checkpoint ``checkpoint_id``."""
    tid, node, status, attempts, started, ended, error, body, stored = row
    what = f"task {node!r}" if type(node) is str else "task"
    values = (thread_id, ns, checkpoint_id, tid, node, status, attempts, started, ended,
              error, body)  # fmt: skip
    check_crc(stored, values, thread_id, checkpoint_id, what)
    if not (
        type(tid) is str and type(node) is str and type(status) is str
        and status in TASK_STATUSES and is_count(attempts) and is_opt_time(started)
        and is_opt_time(ended) and is_opt_str(error)
        and (body is None or type(body) is bytes)
    ):  # fmt: skip
        raise bad_shape(thread_id, checkpoint_id, what, "a column of the wrong type or value")
    writes = routes = None
    if body is not None:
        found = load_value(body, thread_id, checkpoint_id, what)
        if type(found) is not list or len(found) != 2:
            raise bad_shape(thread_id, checkpoint_id, what, f"{found!r:.80}")
        writes, routes = found
        if routes is not None and type(routes) is not list:
            raise bad_shape(thread_id, checkpoint_id, what, "its routes are not a list")
        if writes is not None and (type(writes) is not list or any(
            type(w) not in (tuple, list) or len(w) != 2 or type(w[0]) is not str for w in writes
        )):  # fmt: skip
            raise bad_shape(thread_id, checkpoint_id, what, "its writes are not (key, value) pairs")
    return TaskRecord(
        CheckpointId(checkpoint_id), TaskId(tid), node, cast(TaskStatus, status), attempts,
        started, ended, error, writes, routes,
    )  # fmt: skip


MEMO_COLS = "task_id, key, value, created_at, crc"


def memo_row(
    thread_id: str, ns: str, checkpoint_id: str, task_id: str, key: str, value: bytes, at: float
) -> tuple[Any, ...]:
    """A memo's values as written (table order, ``crc`` last)."""
    values = (thread_id, ns, checkpoint_id, task_id, key, value, time_value(at))
    return (*values, crc(values))


def memo(
    thread_id: str, ns: str, checkpoint_id: str, row: Sequence[Any]
) -> tuple[TaskId, str, Any]:
    """Decode a memo row (``MEMO_COLS``): (task id, key, value)."""
    tid, key, value, created, stored = row
    what = f"step {key!r}" if type(key) is str else "memoized step"
    check_crc(
        stored,
        (thread_id, ns, checkpoint_id, tid, key, value, created),
        thread_id,
        checkpoint_id,
        what,
    )
    if not (
        type(tid) is str and type(key) is str and type(value) is bytes and is_time(created)
    ):  # fmt: skip
        raise bad_shape(thread_id, checkpoint_id, what, "a column of the wrong type")
    return TaskId(tid), key, load_value(value, thread_id, checkpoint_id, what)
