"""Reads of ``SqliteCheckpointer`` on a connection, shared by its methods and by
``resume_thread``, which makes several of them in one transaction.

Each function runs inside its caller's transaction (or is one statement) and decodes what
it read through ``_sqlite_rows`` (checksums, types, shapes). Reads of a collection (a
checkpoint's tasks or memos, a thread's pauses, answers, decisions, checkpoints, the threads
of a status) compare the rows found with the count stored for it in the same statement: a
row whose key was damaged moves out of every read, and only the count shows it is gone.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from checkpoints import _sqlite_rows as rows
from checkpoints._sqlite_sql import _CKPT, _INFO, _INFO_OF_STATUS, _PAUSE, _channel
from checkpoints.errors import CorruptCheckpointError
from checkpoints.models import (
    AnswerRecord,
    CheckpointId,
    CheckpointRecord,
    DecisionRecord,
    PauseId,
    PauseRecord,
    TaskId,
    TaskRecord,
    ThreadInfo,
    ThreadRecord,
)

_THREAD_AND_HEAD = (
    f"SELECT {', '.join('t.' + c.strip() for c in rows.THREAD_COLS.split(','))},"
    f" {', '.join('c.' + c.strip() for c in rows.CKPT_COLS.split(','))}"
    " FROM gf_threads t LEFT JOIN gf_checkpoints c"
    " ON c.thread_id = t.thread_id AND c.ns = '' AND c.id = t.head WHERE t.thread_id = ?"
)
_NT = len(rows.THREAD_COLS.split(","))  # the columns of the thread row in _THREAD_AND_HEAD


def thread_is_missing(conn: sqlite3.Connection, thread_id: str) -> CorruptCheckpointError | None:
    """For a thread row not found: damage if the thread has checkpoints (its row moved)."""
    if conn.execute(
        "SELECT 1 FROM gf_checkpoints WHERE thread_id = ? LIMIT 1", (thread_id,)
    ).fetchone():
        return rows.damaged(thread_id, None, "thread row", "missing, its checkpoints are not")
    return None


MISSED = object()
"""What a lookup returns, asked not to check a miss (``check_miss=False``): the caller looks
again in a read transaction, where the miss is checked on one snapshot."""


def read_thread_and_head(
    conn: sqlite3.Connection, thread_id: str, *, check_miss: bool = True
) -> tuple[ThreadRecord, Sequence[Any], CheckpointRecord | None, Sequence[Any]] | None:
    """The thread (decoded; its raw row for the counts) and its head checkpoint (decoded;
    its raw row), or None when the thread does not exist. A missing head row is damage."""
    row = conn.execute(_THREAD_AND_HEAD, (thread_id,)).fetchone()
    if row is None:
        if not check_miss:
            return MISSED  # type: ignore[return-value]
        missing = thread_is_missing(conn, thread_id)
        if missing is not None:
            raise missing
        return None
    thread_row, ck_row = row[:_NT], row[_NT:]
    thread = rows.thread(thread_id, thread_row)
    if thread.head is None:
        return thread, thread_row, None, ck_row
    if ck_row[0] is None:  # a head without its checkpoint: never guess
        raise CorruptCheckpointError(
            f"thread {thread_id!r}: head checkpoint {thread.head!r} is missing",
            thread_id=thread_id,
            checkpoint_id=thread.head,
        )
    return thread, thread_row, rows.checkpoint(thread_id, "", ck_row), ck_row


def _check_checkpoints(conn: sqlite3.Connection, thread_id: str, ns: str) -> None:
    """After a checkpoint was not found by id: damage if the namespace lost a row (its
    count), or holds one whose key changed (its checksum, so every row is decoded)."""
    found = conn.execute(_CKPT + " WHERE thread_id = ? AND ns = ?", (thread_id, ns)).fetchall()
    for row in found:
        rows.checkpoint(thread_id, ns, row)
    if ns == "":
        anchor = conn.execute(
            "SELECT n_checkpoints FROM gf_threads WHERE thread_id = ?", (thread_id,)
        ).fetchone()
    else:
        anchor = conn.execute(
            "SELECT n_checkpoints FROM gf_namespaces WHERE thread_id = ? AND ns = ?",
            (thread_id, ns),
        ).fetchone()
    if anchor is None:
        if found and ns != "":
            raise rows.damaged(thread_id, None, f"namespace {ns!r}", "its count is missing")
        return
    rows.count(thread_id, f"checkpoints of namespace {ns!r}", anchor[0], len(found))


def read_checkpoint(
    conn: sqlite3.Connection,
    thread_id: str,
    ns: str,
    checkpoint_id: str | None,
    *,
    check_miss: bool = True,
) -> CheckpointRecord | None:
    """A checkpoint by id, or the newest of ``ns`` (the thread head for the root); call in a
    read transaction (or with ``check_miss=False``: a lookup of one statement, ``MISSED``
    when it found nothing or needs more statements).

    A head whose checkpoint row is missing raises ``CorruptCheckpointError``: the thread is
    not mistaken for a new one.
    """
    if checkpoint_id is not None:
        sql = _CKPT + " WHERE thread_id = ? AND ns = ? AND id = ?"
        row = conn.execute(sql, (thread_id, ns, checkpoint_id)).fetchone()
        if row is not None:
            return rows.checkpoint(thread_id, ns, row)
        if not check_miss:
            return MISSED  # type: ignore[return-value]
        _check_checkpoints(conn, thread_id, ns)
        return None
    if ns == "":  # the root's newest is the thread head
        found = read_thread_and_head(conn, thread_id, check_miss=check_miss)
        if found is MISSED:
            return MISSED  # type: ignore[return-value]
        return found[2] if found is not None else None
    if not check_miss:
        return MISSED  # type: ignore[return-value]
    newest = conn.execute(
        "SELECT newest, n_checkpoints FROM gf_namespaces WHERE thread_id = ? AND ns = ?",
        (thread_id, ns),
    ).fetchone()
    row = conn.execute(
        _CKPT + " WHERE thread_id = ? AND ns = ? ORDER BY id DESC LIMIT 1", (thread_id, ns)
    ).fetchone()
    if row is None and newest is None:
        return None
    if row is None or newest is None or row[0] != newest[0]:
        raise rows.damaged(
            thread_id, None, f"checkpoints of namespace {ns!r}",
            f"the newest is {row[0] if row else None!r}, its record says "
            f"{newest[0] if newest else None!r}",
        )  # fmt: skip
    return rows.checkpoint(thread_id, ns, row)


def list_checkpoints(
    conn: sqlite3.Connection, thread_id: str, ns: str, limit: int | None
) -> list[CheckpointRecord]:
    """Checkpoints of one namespace, newest first; call in a read transaction.

    Without a limit every row is counted against the namespace's count; with one, the first
    row read must be the newest.
    """
    sql = _CKPT + " WHERE thread_id = ? AND ns = ? ORDER BY id DESC LIMIT ?"
    sql_limit = limit if limit is not None and limit >= 0 else -1
    found = conn.execute(sql, (thread_id, ns, sql_limit)).fetchall()
    if ns == "":
        anchor = conn.execute(
            "SELECT n_checkpoints, newest FROM gf_threads WHERE thread_id = ?", (thread_id,)
        ).fetchone()
    else:
        anchor = conn.execute(
            "SELECT n_checkpoints, newest FROM gf_namespaces WHERE thread_id = ? AND ns = ?",
            (thread_id, ns),
        ).fetchone()
    what = f"checkpoints of namespace {ns!r}"
    if anchor is None:
        if found and ns != "":
            raise rows.damaged(thread_id, None, what, "their count is missing")
        if found and thread_is_missing(conn, thread_id) is not None:
            raise rows.damaged(thread_id, None, "thread row", "missing, its checkpoints are not")
    elif sql_limit < 0:
        rows.count(thread_id, what, anchor[0], len(found))
    elif found and found[0][0] != anchor[1]:
        raise rows.damaged(thread_id, None, what, "the newest is not the one recorded")
    if limit is not None and limit < 0:
        found = found[:limit]  # Python slicing, as MemoryCheckpointer does
    return [rows.checkpoint(thread_id, ns, r) for r in found]


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


def _tasks(
    found: Sequence[Any], thread_id: str, ns: str, checkpoint_id: str, anchor: object
) -> dict[TaskId, TaskRecord]:
    if anchor is not None:
        rows.count(thread_id, f"tasks of checkpoint {checkpoint_id!r}", anchor, len(found))
    out: dict[TaskId, TaskRecord] = {}
    for row in found:
        rec = rows.task(thread_id, ns, checkpoint_id, row)
        out[rec.task_id] = rec
    return out


def _memos(
    found: Sequence[Any], thread_id: str, ns: str, checkpoint_id: str, anchor: object
) -> dict[TaskId, dict[str, Any]]:
    if anchor is not None:
        rows.count(thread_id, f"memos of checkpoint {checkpoint_id!r}", anchor, len(found))
    out: dict[TaskId, dict[str, Any]] = {}
    for row in found:
        tid, key, value = rows.memo(thread_id, ns, checkpoint_id, row)
        out.setdefault(tid, {})[key] = value
    return out


def _answers(
    found: Sequence[Any], thread_id: str, wanted: set[str] | None, anchor: object
) -> dict[PauseId, AnswerRecord]:
    if anchor is not None:
        rows.count(thread_id, "answers", anchor, len(found))
    out: dict[PauseId, AnswerRecord] = {}
    for row in found:  # oldest first: the latest wins
        a = rows.answer(thread_id, row)
        if wanted is None or a.pause_id in wanted:
            out[a.pause_id] = a
    return out


def _with_count(found: list[Any]) -> tuple[list[Any], object]:
    """Split the rows of a ``SELECT 0, o1, o2, <cols> ... UNION ALL SELECT 1, 0, 0, <count>``
    read: (rows in (o1, o2) order, the count or None). The order is a rowid, or ``seq``
    (an alias of it), or comes from the SQL: never damaged into another type."""
    found.sort(key=lambda r: (r[0], r[1], r[2]))
    tail = [r for r in found if r[0] == 1]
    return [r[3:] for r in found if r[0] == 0], tail[0][3] if tail else None


def _pad(n: int) -> str:
    return ", NULL" * n


_TASK_N = len(rows.TASK_COLS.split(","))
_MEMO_N = len(rows.MEMO_COLS.split(","))
_ANSWER_N = len(rows.ANSWER_COLS.split(","))
_PAUSE_N = len(rows.PAUSE_COLS.split(","))
_DECISION_N = len(rows.DECISION_COLS.split(","))


def read_tasks(
    conn: sqlite3.Connection, thread_id: str, ns: str, checkpoint_id: CheckpointId
) -> dict[TaskId, TaskRecord]:
    """Task records of one checkpoint, by task id, in the order first written."""
    found, anchor = _with_count(conn.execute(
        f"SELECT 0, rowid, 0, {rows.TASK_COLS} FROM gf_tasks WHERE thread_id = ?1"
        " AND ns = ?2 AND checkpoint_id = ?3"
        f" UNION ALL SELECT 1, 0, 0, n_tasks{_pad(_TASK_N - 1)} FROM gf_checkpoints"
        " WHERE thread_id = ?1 AND ns = ?2 AND id = ?3",
        (thread_id, ns, checkpoint_id),
    ).fetchall())  # fmt: skip
    return _tasks(found, thread_id, ns, checkpoint_id, anchor)


def read_memos(
    conn: sqlite3.Connection, thread_id: str, ns: str, checkpoint_id: CheckpointId
) -> dict[TaskId, dict[str, Any]]:
    """Memoized step results of one checkpoint's tasks: task id -> key -> value."""
    found, anchor = _with_count(conn.execute(
        f"SELECT 0, rowid, 0, {rows.MEMO_COLS} FROM gf_memos WHERE thread_id = ?1"
        " AND ns = ?2 AND checkpoint_id = ?3"
        f" UNION ALL SELECT 1, 0, 0, n_memos{_pad(_MEMO_N - 1)} FROM gf_checkpoints"
        " WHERE thread_id = ?1 AND ns = ?2 AND id = ?3",
        (thread_id, ns, checkpoint_id),
    ).fetchall())  # fmt: skip
    return _memos(found, thread_id, ns, checkpoint_id, anchor)


def check_pauses(conn: sqlite3.Connection, thread_id: str) -> None:
    """After asked-for pauses were not found: damage if the thread lost a pause row (its
    count) or holds one whose key changed (its checksum: every pause is decoded)."""
    found = conn.execute(_PAUSE + " WHERE thread_id = ?", (thread_id,)).fetchall()
    for row in found:
        rows.pause(thread_id, row)
    anchor = conn.execute(
        "SELECT n_pauses FROM gf_threads WHERE thread_id = ?", (thread_id,)
    ).fetchone()
    if anchor is not None:
        rows.count(thread_id, "pauses", anchor[0], len(found))


def read_pauses(
    conn: sqlite3.Connection, thread_id: str, pause_ids: Sequence[str]
) -> list[PauseRecord]:
    """Pause records by id, in the order asked; unknown ids are left out (after the thread's
    count of pauses showed that none was lost); call in a read transaction."""
    sql = _PAUSE + " WHERE thread_id = ? AND id = ?"
    found = [conn.execute(sql, (thread_id, p)).fetchone() for p in pause_ids]
    if any(r is None for r in found):
        check_pauses(conn, thread_id)
    return [rows.pause(thread_id, r) for r in found if r is not None]


def list_pauses(conn: sqlite3.Connection, thread_id: str) -> list[PauseRecord]:
    """Every pause record of the thread, oldest first."""
    found, anchor = _with_count(conn.execute(
        f"SELECT 0, rank, rowid, {rows.PAUSE_COLS} FROM (SELECT *, rank() OVER"
        " (ORDER BY created_at) AS rank FROM gf_pauses WHERE thread_id = ?1)"
        f" UNION ALL SELECT 1, 0, 0, n_pauses{_pad(_PAUSE_N - 1)}"
        " FROM gf_threads WHERE thread_id = ?1",
        (thread_id,),
    ).fetchall())  # fmt: skip
    if anchor is not None:
        rows.count(thread_id, "pauses", anchor, len(found))
    return [rows.pause(thread_id, r) for r in found]


def read_answers(
    conn: sqlite3.Connection, thread_id: str, wanted: set[str] | None
) -> dict[PauseId, AnswerRecord]:
    """The latest answer per pause (of every pause of the thread when ``wanted`` is None)."""
    found, anchor = _with_count(conn.execute(
        f"SELECT 0, seq, 0, {rows.ANSWER_COLS} FROM gf_answers WHERE thread_id = ?1"
        f" UNION ALL SELECT 1, 0, 0, n_answers{_pad(_ANSWER_N - 1)} FROM gf_threads"
        " WHERE thread_id = ?1",
        (thread_id,),
    ).fetchall())  # fmt: skip
    return _answers(found, thread_id, wanted, anchor)


def list_decisions(
    conn: sqlite3.Connection, thread_id: str, call_id: str | None
) -> list[DecisionRecord]:
    """Decisions of a thread (optionally of one call), oldest first. All of the thread's are
    read (and counted), then filtered."""
    found, anchor = _with_count(conn.execute(
        f"SELECT 0, seq, 0, {rows.DECISION_COLS} FROM gf_decisions WHERE thread_id = ?1"
        f" UNION ALL SELECT 1, 0, 0, n_decisions{_pad(_DECISION_N - 1)}"
        " FROM gf_threads WHERE thread_id = ?1",
        (thread_id,),
    ).fetchall())  # fmt: skip
    if anchor is not None:
        rows.count(thread_id, "decisions", anchor, len(found))
    out = [rows.decision(thread_id, r) for r in found]
    return out if call_id is None else [d for d in out if d.call_id == call_id]


def list_threads(conn: sqlite3.Connection, status: str | None) -> list[ThreadInfo]:
    """Threads, most recently updated first (of one status: a range of the status index),
    counted against the number of threads of that status (or of all); call in a read
    transaction."""
    if status is None:
        found = conn.execute(_INFO + " ORDER BY updated_at DESC, thread_id DESC").fetchall()
        total = conn.execute("SELECT coalesce(sum(n), 0) FROM gf_thread_counts").fetchone()[0]
    else:
        found = conn.execute(_INFO_OF_STATUS, (status,)).fetchall()
        row = conn.execute("SELECT n FROM gf_thread_counts WHERE status = ?", (status,)).fetchone()
        total = row[0] if row is not None else 0
    if total != len(found) or type(total) is not int:
        raise CorruptCheckpointError(
            f"the threads {'of status ' + repr(status) if status else ''} are damaged: "
            f"{len(found)} found where their count says {total!r:.40}; restore the store from "
            "a backup"
        )
    return [rows.info(r) for r in found]


def read_step_records(
    conn: sqlite3.Connection,
    thread_id: str,
    thread_row: Sequence[Any],
    pause_ids: Sequence[str],
    head: CheckpointId,
    head_row: Sequence[Any],
) -> tuple[
    list[PauseRecord],
    dict[PauseId, AnswerRecord],
    dict[TaskId, TaskRecord],
    dict[TaskId, dict[str, Any]],
]:
    """``read_pauses``, ``read_answers`` (all), ``read_tasks`` and ``read_memos`` of the root
    head, in one statement: a process that resumes a thread prepares one, not four. The
    counts come from the thread and head rows, read already."""
    marks = ", ".join(f"?{i}" for i in range(3, 3 + len(pause_ids)))
    found = conn.execute(
        f"SELECT 0, rowid, {rows.PAUSE_COLS}"
        f" FROM gf_pauses WHERE thread_id = ?1 AND id IN ({marks})"
        f" UNION ALL SELECT 1, seq, {rows.ANSWER_COLS}{_pad(_PAUSE_N - _ANSWER_N)}"
        " FROM gf_answers WHERE thread_id = ?1"
        f" UNION ALL SELECT 2, rowid, {rows.TASK_COLS}"
        " FROM gf_tasks WHERE thread_id = ?1 AND ns = '' AND checkpoint_id = ?2"
        f" UNION ALL SELECT 3, rowid, {rows.MEMO_COLS}{_pad(_PAUSE_N - _MEMO_N)}"
        " FROM gf_memos WHERE thread_id = ?1 AND ns = '' AND checkpoint_id = ?2",
        (thread_id, head, *pause_ids),
    ).fetchall()
    found.sort(key=lambda r: (r[0], r[1]))  # each table's rows in their own order (rowids)
    parts: list[list[Any]] = [[], [], [], []]
    for r in found:
        parts[r[0]].append(r[2:])
    by_id = {r[0]: r for r in parts[0]}
    if len(by_id) < len(set(pause_ids)):
        check_pauses(conn, thread_id)
    n_tasks, n_memos = rows.anchored_counts(thread_id, head_row)
    pauses = [rows.pause(thread_id, by_id[p]) for p in pause_ids if p in by_id]
    return (
        pauses,
        _answers([r[:_ANSWER_N] for r in parts[1]], thread_id, None, thread_row[rows.N_ANSWERS]),
        _tasks(parts[2], thread_id, "", head, n_tasks),
        _memos([r[:_MEMO_N] for r in parts[3]], thread_id, "", head, n_memos),
    )
