"""Reads of the records of a step and of a thread: tasks, memos, pauses, answers, decisions and
dispatches (see ``reads``). Each read of a collection compares the rows found with the count
stored for it, read in the same statement (``with_count``): a row whose key was damaged
moves out of every read, and only the count shows it is gone.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from checkpoints.models import (
    AnswerRecord,
    CheckpointId,
    DecisionRecord,
    DispatchRecord,
    PauseId,
    PauseRecord,
    TaskId,
    TaskRecord,
)
from checkpoints.sqlite.rows import checks, records, steps, threads
from checkpoints.sqlite.txn import read_txn

PAUSE = f"SELECT {records.PAUSE_COLS} FROM gf_pauses"
DISPATCH = f"SELECT {records.DISPATCH_COLS} FROM gf_dispatches WHERE thread_id = ? AND call_id = ?"


# A checkpoint's tasks in the order first written: ``ord`` (``m0005_compact``), numbered in
# SQL so that a damaged one (another type) cannot break the sort; the raw value follows.
TASK_ORDER = "row_number() OVER (ORDER BY ord, task_id)"


def _tasks(
    found: Sequence[Any], thread_id: str, ns: str, checkpoint_id: str, anchor: object
) -> dict[TaskId, TaskRecord]:
    """Task records from rows ``(ord, *TASK_COLS)`` sorted by ``TASK_ORDER``."""
    what = f"tasks of checkpoint {checkpoint_id!r}"
    if anchor is not None:
        checks.count(thread_id, what, anchor, len(found))
    if any(row[0] != i or type(row[0]) is not int for i, row in enumerate(found)):
        raise checks.damaged(thread_id, checkpoint_id, what, "their order is not 0, 1, ...")
    out: dict[TaskId, TaskRecord] = {}
    for row in found:
        rec = steps.task(thread_id, ns, checkpoint_id, row[1:])
        out[rec.task_id] = rec
    return out


def _memos(
    found: Sequence[Any], thread_id: str, ns: str, checkpoint_id: str, anchor: object
) -> dict[TaskId, dict[str, Any]]:
    if anchor is not None:
        checks.count(thread_id, f"memos of checkpoint {checkpoint_id!r}", anchor, len(found))
    out: dict[TaskId, dict[str, Any]] = {}
    for row in found:
        tid, key, value = steps.memo(thread_id, ns, checkpoint_id, row)
        out.setdefault(tid, {})[key] = value
    return out


def _answers(
    found: Sequence[Any], thread_id: str, wanted: set[str] | None, anchor: object
) -> dict[PauseId, AnswerRecord]:
    if anchor is not None:
        checks.count(thread_id, "answers", anchor, len(found))
    out: dict[PauseId, AnswerRecord] = {}
    for row in found:  # oldest first: the latest wins
        a = records.answer(thread_id, row)
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


_TASK_N = len(steps.TASK_COLS.split(","))
_MEMO_N = len(steps.MEMO_COLS.split(","))
_ANSWER_N = len(records.ANSWER_COLS.split(","))
_PAUSE_N = len(records.PAUSE_COLS.split(","))
_DECISION_N = len(records.DECISION_COLS.split(","))


def read_tasks(
    conn: sqlite3.Connection, thread_id: str, ns: str, checkpoint_id: CheckpointId
) -> dict[TaskId, TaskRecord]:
    """Task records of one checkpoint, by task id, in the order first written."""
    found, anchor = _with_count(conn.execute(
        f"SELECT 0, {TASK_ORDER}, 0, ord, {steps.TASK_COLS} FROM gf_tasks WHERE thread_id = ?1"
        " AND ns = ?2 AND checkpoint_id = ?3"
        f" UNION ALL SELECT 1, 0, 0, n_tasks{_pad(_TASK_N)} FROM gf_checkpoints"
        " WHERE thread_id = ?1 AND ns = ?2 AND id = ?3",
        (thread_id, ns, checkpoint_id),
    ).fetchall())  # fmt: skip
    return _tasks(found, thread_id, ns, checkpoint_id, anchor)


def read_memos(
    conn: sqlite3.Connection, thread_id: str, ns: str, checkpoint_id: CheckpointId
) -> dict[TaskId, dict[str, Any]]:
    """Memoized step results of one checkpoint's tasks: task id -> key -> value."""
    found, anchor = _with_count(conn.execute(
        f"SELECT 0, rowid, 0, {steps.MEMO_COLS} FROM gf_memos WHERE thread_id = ?1"
        " AND ns = ?2 AND checkpoint_id = ?3"
        f" UNION ALL SELECT 1, 0, 0, n_memos{_pad(_MEMO_N - 1)} FROM gf_checkpoints"
        " WHERE thread_id = ?1 AND ns = ?2 AND id = ?3",
        (thread_id, ns, checkpoint_id),
    ).fetchall())  # fmt: skip
    return _memos(found, thread_id, ns, checkpoint_id, anchor)


def check_pauses(conn: sqlite3.Connection, thread_id: str) -> None:
    """After asked-for pauses were not found: damage if the thread lost a pause row (its
    count) or holds one whose key changed (its checksum: every pause is decoded)."""
    found = conn.execute(PAUSE + " WHERE thread_id = ?", (thread_id,)).fetchall()
    for row in found:
        records.pause(thread_id, row)
    anchor = conn.execute(
        "SELECT n_pauses FROM gf_threads WHERE thread_id = ?", (thread_id,)
    ).fetchone()
    if anchor is not None:
        checks.count(thread_id, "pauses", anchor[0], len(found))


def read_pauses(
    conn: sqlite3.Connection, thread_id: str, pause_ids: Sequence[str]
) -> list[PauseRecord]:
    """Pause records by id, in the order asked; unknown ids are left out (after the thread's
    count of pauses showed that none was lost); call in a read transaction."""
    sql = PAUSE + " WHERE thread_id = ? AND id = ?"
    found = [conn.execute(sql, (thread_id, p)).fetchone() for p in pause_ids]
    if any(r is None for r in found):
        check_pauses(conn, thread_id)
    return [records.pause(thread_id, r) for r in found if r is not None]


def list_pauses(conn: sqlite3.Connection, thread_id: str) -> list[PauseRecord]:
    """Every pause record of the thread, oldest first."""
    found, anchor = _with_count(conn.execute(
        f"SELECT 0, rank, 0, {records.PAUSE_COLS} FROM (SELECT *, row_number() OVER"
        " (ORDER BY created_at, id) AS rank FROM gf_pauses WHERE thread_id = ?1)"
        f" UNION ALL SELECT 1, 0, 0, n_pauses{_pad(_PAUSE_N - 1)}"
        " FROM gf_threads WHERE thread_id = ?1",
        (thread_id,),
    ).fetchall())  # fmt: skip
    if anchor is not None:
        checks.count(thread_id, "pauses", anchor, len(found))
    return [records.pause(thread_id, r) for r in found]


def read_answers(
    conn: sqlite3.Connection, thread_id: str, wanted: set[str] | None
) -> dict[PauseId, AnswerRecord]:
    """The latest answer per pause (of every pause of the thread when ``wanted`` is None)."""
    found, anchor = _with_count(conn.execute(
        f"SELECT 0, seq, 0, {records.ANSWER_COLS} FROM gf_answers WHERE thread_id = ?1"
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
        f"SELECT 0, seq, 0, {records.DECISION_COLS} FROM gf_decisions WHERE thread_id = ?1"
        f" UNION ALL SELECT 1, 0, 0, n_decisions{_pad(_DECISION_N - 1)}"
        " FROM gf_threads WHERE thread_id = ?1",
        (thread_id,),
    ).fetchall())  # fmt: skip
    if anchor is not None:
        checks.count(thread_id, "decisions", anchor, len(found))
    out = [records.decision(thread_id, r) for r in found]
    return out if call_id is None else [d for d in out if d.call_id == call_id]


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
        f"SELECT 0, 0, 0, {records.PAUSE_COLS}"
        f" FROM gf_pauses WHERE thread_id = ?1 AND id IN ({marks})"
        f" UNION ALL SELECT 1, seq, 0, {records.ANSWER_COLS}{_pad(_PAUSE_N - _ANSWER_N)}"
        " FROM gf_answers WHERE thread_id = ?1"
        f" UNION ALL SELECT 2, {TASK_ORDER}, ord, {steps.TASK_COLS}"
        " FROM gf_tasks WHERE thread_id = ?1 AND ns = '' AND checkpoint_id = ?2"
        f" UNION ALL SELECT 3, rowid, 0, {steps.MEMO_COLS}{_pad(_PAUSE_N - _MEMO_N)}"
        " FROM gf_memos WHERE thread_id = ?1 AND ns = '' AND checkpoint_id = ?2",
        (thread_id, head, *pause_ids),
    ).fetchall()
    found.sort(key=lambda r: (r[0], r[1]))  # each table's rows in their own order
    parts: list[list[Any]] = [[], [], [], []]
    for r in found:  # (a task's row keeps its ord)
        parts[r[0]].append(r[2:] if r[0] == 2 else r[3:])
    by_id = {r[0]: r for r in parts[0]}
    if len(by_id) < len(set(pause_ids)):
        check_pauses(conn, thread_id)
    n_tasks, n_memos = steps.anchored_counts(thread_id, head_row)
    pauses = [records.pause(thread_id, by_id[p]) for p in pause_ids if p in by_id]
    return (
        pauses,
        _answers([r[:_ANSWER_N] for r in parts[1]], thread_id, None, thread_row[threads.N_ANSWERS]),
        _tasks(parts[2], thread_id, "", head, n_tasks),
        _memos([r[:_MEMO_N] for r in parts[3]], thread_id, "", head, n_memos),
    )


def check_dispatch_count(conn: sqlite3.Connection, thread_id: str) -> None:
    """After a dispatch was not found: damage if the thread lost one, or holds one whose key
    changed (a claim is the at-most-once guard: a lost claim must never let the call run
    again)."""
    found = conn.execute(
        f"SELECT call_id, {records.DISPATCH_COLS} FROM gf_dispatches WHERE thread_id = ?",
        (thread_id,),
    ).fetchall()
    for row in found:  # a claim whose key changed fails its checksum
        records.dispatch(thread_id, row[0], row[1:])
    anchor = conn.execute(
        "SELECT n_dispatches FROM gf_threads WHERE thread_id = ?", (thread_id,)
    ).fetchone()
    if anchor is not None:
        checks.count(thread_id, "dispatches", anchor[0], len(found))


def dispatch_row(conn: sqlite3.Connection, thread_id: str, call_id: str) -> Any:
    """A dispatch's raw row (``records.DISPATCH_COLS``), or None."""
    return conn.execute(DISPATCH, (thread_id, call_id)).fetchone()


def get_dispatch(conn: sqlite3.Connection, thread_id: str, call_id: str) -> DispatchRecord | None:
    """The dispatch record of a call (a miss is checked on one snapshot)."""
    r = dispatch_row(conn, thread_id, call_id)
    if r is not None:
        return records.dispatch(thread_id, call_id, r)
    with read_txn(conn):
        r = dispatch_row(conn, thread_id, call_id)
        if r is not None:
            return records.dispatch(thread_id, call_id, r)
        check_dispatch_count(conn, thread_id)
    return None


def next_seq(conn: sqlite3.Connection, table: str) -> int:
    """The next ``seq`` of an append-only table (its checksum covers it, so it is chosen
    before the row is written; the caller holds the write lock)."""
    row = conn.execute(f"SELECT coalesce(max(seq), 0) + 1 FROM {table}").fetchone()
    return int(row[0])
