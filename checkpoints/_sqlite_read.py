"""Reads of ``SqliteCheckpointer`` on a connection, shared by its methods and by
``resume_thread``, which makes several of them in one transaction.

Each function runs inside its caller's transaction (or autocommit) and decodes what it read;
undecodable or misshapen rows raise ``CorruptCheckpointError``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from checkpoints._decode import load_value as _load
from checkpoints._sqlite_sql import (
    _CKPT,
    _PAUSE,
    _bad_shape,
    _channel,
    _checkpoint,
    _pause,
)
from checkpoints.errors import CorruptCheckpointError
from checkpoints.models import (
    AnswerRecord,
    CheckpointId,
    CheckpointRecord,
    PauseId,
    PauseRecord,
    TaskId,
    TaskRecord,
    ThreadId,
)

_THREAD_AND_HEAD = (
    "SELECT t.status, t.head, t.graph_name, t.lease_owner, t.lease_expires_at,"
    " t.pending_pause_ids, t.created_at, t.updated_at, c.id, c.parent_id, c.step, c.source,"
    " c.channel_versions, c.channel_bases, c.body, c.created_at FROM gf_threads t LEFT JOIN"
    " gf_checkpoints c ON c.thread_id = t.thread_id AND c.ns = '' AND c.id = t.head"
    " WHERE t.thread_id = ?"
)


def read_thread_and_head(conn: sqlite3.Connection, thread_id: str) -> tuple[Any, Any] | None:
    """The thread row (``_THREAD``'s columns) and its head checkpoint row (``_CKPT``'s), or
    None when the thread does not exist or has no head. A missing head row is damage."""
    row = conn.execute(_THREAD_AND_HEAD, (thread_id,)).fetchone()
    if row is None or row[1] is None:
        return None
    if row[8] is None:  # a head without its checkpoint: never guess
        raise CorruptCheckpointError(
            f"thread {thread_id!r}: head checkpoint {row[1]!r} is missing",
            thread_id=thread_id,
            checkpoint_id=row[1],
        )
    return row[:8], row[8:]


def read_checkpoint(
    conn: sqlite3.Connection, thread_id: str, ns: str, checkpoint_id: str | None
) -> CheckpointRecord | None:
    """A checkpoint by id, or the newest of ``ns`` (the thread head for the root).

    A head whose checkpoint row is missing raises ``CorruptCheckpointError``: the thread is
    not mistaken for a new one.
    """
    if checkpoint_id is not None:
        sql = _CKPT + " WHERE thread_id = ? AND ns = ? AND id = ?"
        row = conn.execute(sql, (thread_id, ns, checkpoint_id)).fetchone()
    elif ns != "":
        sql = _CKPT + " WHERE thread_id = ? AND ns = ? ORDER BY id DESC LIMIT 1"
        row = conn.execute(sql, (thread_id, ns)).fetchone()
    else:  # the root's newest is the thread head
        found = read_thread_and_head(conn, thread_id)
        row = found[1] if found is not None else None
    return _checkpoint(thread_id, ns, row) if row is not None else None


def read_channels(
    conn: sqlite3.Connection,
    thread_id: str,
    ns: str,
    versions: Mapping[str, int],
    bases: Mapping[str, tuple[int, int]],
) -> dict[str, Any]:
    """Channel values at ``versions``: one indexed query per channel."""
    return {
        channel: _channel(conn, thread_id, ns, channel, version, bases.get(channel))
        for channel, version in versions.items()
    }


_TASK_COLS = "task_id, node, status, attempts, started_at, ended_at, error, body"
_ANSWER_COLS = "pause_id, value, by, reason, created_at"


def _tasks(
    rows: Sequence[Any], thread_id: str, checkpoint_id: CheckpointId
) -> dict[TaskId, TaskRecord]:
    out: dict[TaskId, TaskRecord] = {}
    for tid, node, status, attempts, started, ended, error, body in rows:
        what = f"task {node!r}"
        try:
            writes, routes = (
                (None, None) if body is None else _load(body, thread_id, checkpoint_id, what)
            )
        except (TypeError, ValueError) as e:
            raise _bad_shape(thread_id, checkpoint_id, what, e) from e
        out[tid] = TaskRecord(
            checkpoint_id, tid, node, status, attempts, started, ended, error, writes, routes
        )
    return out


def _memos(
    rows: Sequence[Any], thread_id: str, checkpoint_id: CheckpointId
) -> dict[TaskId, dict[str, Any]]:
    out: dict[TaskId, dict[str, Any]] = {}
    for tid, key, blob in rows:
        value = _load(blob, thread_id, checkpoint_id, f"step {key!r}")
        out.setdefault(tid, {})[key] = value
    return out


def _answers(
    rows: Sequence[Any], thread_id: str, wanted: set[str] | None
) -> dict[PauseId, AnswerRecord]:
    out: dict[PauseId, AnswerRecord] = {}
    for pid, blob, by, reason, created in rows:  # oldest first: the latest wins
        if wanted is None or pid in wanted:
            value = _load(blob, thread_id, None, f"answer to {pid!r}")
            out[pid] = AnswerRecord(pid, ThreadId(thread_id), value, by, reason, created)
    return out


def read_tasks(
    conn: sqlite3.Connection, thread_id: str, ns: str, checkpoint_id: CheckpointId
) -> dict[TaskId, TaskRecord]:
    """Task records of one checkpoint, by task id, in the order first written."""
    rows = conn.execute(
        f"SELECT {_TASK_COLS} FROM gf_tasks WHERE thread_id = ? AND ns = ?"
        " AND checkpoint_id = ? ORDER BY rowid",
        (thread_id, ns, checkpoint_id),
    ).fetchall()
    return _tasks(rows, thread_id, checkpoint_id)


def read_memos(
    conn: sqlite3.Connection, thread_id: str, ns: str, checkpoint_id: CheckpointId
) -> dict[TaskId, dict[str, Any]]:
    """Memoized step results of one checkpoint's tasks: task id -> key -> value."""
    rows = conn.execute(
        "SELECT task_id, key, value FROM gf_memos WHERE thread_id = ? AND ns = ?"
        " AND checkpoint_id = ? ORDER BY rowid",
        (thread_id, ns, checkpoint_id),
    ).fetchall()
    return _memos(rows, thread_id, checkpoint_id)


def read_pauses(
    conn: sqlite3.Connection, thread_id: str, pause_ids: Sequence[str]
) -> list[PauseRecord]:
    """Pause records by id, in the order asked; unknown ids are left out."""
    sql = _PAUSE + " WHERE thread_id = ? AND id = ?"
    rows = [conn.execute(sql, (thread_id, p)).fetchone() for p in pause_ids]
    return [_pause(thread_id, r) for r in rows if r is not None]


def read_answers(
    conn: sqlite3.Connection, thread_id: str, wanted: set[str] | None
) -> dict[PauseId, AnswerRecord]:
    """The latest answer per pause (of every pause of the thread when ``wanted`` is None)."""
    rows = conn.execute(
        f"SELECT {_ANSWER_COLS} FROM gf_answers WHERE thread_id = ? ORDER BY seq", (thread_id,)
    ).fetchall()
    return _answers(rows, thread_id, wanted)


def read_step_records(
    conn: sqlite3.Connection, thread_id: str, pause_ids: Sequence[str], head: CheckpointId
) -> tuple[
    list[PauseRecord],
    dict[PauseId, AnswerRecord],
    dict[TaskId, TaskRecord],
    dict[TaskId, dict[str, Any]],
]:
    """``read_pauses``, ``read_answers`` (all), ``read_tasks`` and ``read_memos`` of the root
    head, in one statement: a process that resumes a thread prepares one, not four."""
    marks = ", ".join(f"?{i}" for i in range(3, 3 + len(pause_ids)))
    rows = conn.execute(
        "SELECT 0, rowid, id, ns, checkpoint_id, task_id, node, kind, value, created_at"
        f" FROM gf_pauses WHERE thread_id = ?1 AND id IN ({marks})"
        f" UNION ALL SELECT 1, seq, {_ANSWER_COLS}, 0, 0, 0"
        " FROM gf_answers WHERE thread_id = ?1"
        f" UNION ALL SELECT 2, rowid, {_TASK_COLS}"
        " FROM gf_tasks WHERE thread_id = ?1 AND ns = '' AND checkpoint_id = ?2"
        " UNION ALL SELECT 3, rowid, task_id, key, value, 0, 0, 0, 0, 0"
        " FROM gf_memos WHERE thread_id = ?1 AND ns = '' AND checkpoint_id = ?2",
        (thread_id, head, *pause_ids),
    ).fetchall()
    rows.sort(key=lambda r: (r[0], r[1]))  # each table's rows in their own order
    parts: list[list[Any]] = [[], [], [], []]
    for r in rows:
        parts[r[0]].append(r[2:])
    by_id = {r[0]: r for r in parts[0]}
    pauses = [_pause(thread_id, by_id[p]) for p in pause_ids if p in by_id]
    return (
        pauses,
        _answers([r[:5] for r in parts[1]], thread_id, None),
        _tasks(parts[2], thread_id, head),
        _memos([r[:3] for r in parts[3]], thread_id, head),
    )
