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


def read_tasks(
    conn: sqlite3.Connection, thread_id: str, ns: str, checkpoint_id: CheckpointId
) -> dict[TaskId, TaskRecord]:
    """Task records of one checkpoint, by task id, in the order first written."""
    rows = conn.execute(
        "SELECT task_id, node, status, attempts, started_at, ended_at, error, body"
        " FROM gf_tasks WHERE thread_id = ? AND ns = ? AND checkpoint_id = ?"
        " ORDER BY rowid",
        (thread_id, ns, checkpoint_id),
    ).fetchall()
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


def read_memos(
    conn: sqlite3.Connection, thread_id: str, ns: str, checkpoint_id: CheckpointId
) -> dict[TaskId, dict[str, Any]]:
    """Memoized step results of one checkpoint's tasks: task id -> key -> value."""
    rows = conn.execute(
        "SELECT task_id, key, value FROM gf_memos WHERE thread_id = ? AND ns = ?"
        " AND checkpoint_id = ? ORDER BY rowid",
        (thread_id, ns, checkpoint_id),
    ).fetchall()
    out: dict[TaskId, dict[str, Any]] = {}
    for tid, key, blob in rows:
        value = _load(blob, thread_id, checkpoint_id, f"step {key!r}")
        out.setdefault(tid, {})[key] = value
    return out


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
        "SELECT pause_id, value, by, reason, created_at FROM gf_answers"
        " WHERE thread_id = ? ORDER BY seq",
        (thread_id,),
    ).fetchall()
    out: dict[PauseId, AnswerRecord] = {}
    for pid, blob, by, reason, created in rows:  # oldest first: the latest wins
        if wanted is None or pid in wanted:
            value = _load(blob, thread_id, None, f"answer to {pid!r}")
            out[pid] = AnswerRecord(pid, ThreadId(thread_id), value, by, reason, created)
    return out
