"""SQL of the runnable index of ``SqliteCheckpointer`` (table ``gf_runnable``, migration
``0003_runnable``; see ``Checkpointer.mark_runnable``), and what a commit does to it.

Kept apart from ``runnable`` (the store's methods) so that the commit transaction
(``writes``) can call ``after_commit`` without an import cycle. Every function
runs inside the caller's write transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, cast

from checkpoints.batch import CommitBatch
from checkpoints.models import (
    RUNNABLE_REASONS,
    RunnableMark,
    RunnableReason,
    ThreadId,
    now,
)
from checkpoints.sqlite.rows.checks import damaged

UPSERT = (  # a mark replaces the thread's, keeping the earlier due time (and its reason)
    "INSERT INTO gf_runnable (thread_id, reason, due_at, marked_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (thread_id) DO UPDATE SET"
    " reason = CASE WHEN due_at < excluded.due_at THEN reason ELSE excluded.reason END,"
    " due_at = min(due_at, excluded.due_at), marked_at = excluded.marked_at"
)
UPDATED = "SELECT updated_at FROM gf_threads WHERE thread_id = ?"
MARK = "SELECT reason, due_at, marked_at FROM gf_runnable WHERE thread_id = ?"
DUE = (  # a range of gf_runnable_due; the graph name from the thread row's primary key
    "SELECT r.thread_id, r.reason, r.due_at, r.marked_at, t.graph_name FROM gf_runnable r"
    " LEFT JOIN gf_threads t ON t.thread_id = r.thread_id WHERE r.due_at <= ?"
    " ORDER BY r.due_at, r.thread_id LIMIT ?"
)


def decode(thread_id: object, row: Sequence[Any], graph_name: object = None) -> RunnableMark:
    """A mark from its row (``reason, due_at, marked_at``); a damaged one raises."""
    reason, due_at, marked_at = row
    if not (
        type(thread_id) is str and type(reason) is str and reason in RUNNABLE_REASONS
        and type(due_at) is float and type(marked_at) is float
        and (graph_name is None or type(graph_name) is str)
    ):  # fmt: skip
        raise damaged(str(thread_id), None, "runnable index", "a column of the wrong type or value")
    return RunnableMark(
        ThreadId(thread_id), cast(RunnableReason, reason), due_at, marked_at, graph_name
    )


def mark(
    conn: sqlite3.Connection,
    thread_id: str,
    reason: str,
    due_at: float | None,
    if_updated_at: float | None,
) -> bool:
    """Mark inside the caller's write transaction (see ``Checkpointer.mark_runnable``)."""
    found = conn.execute(UPDATED, (thread_id,)).fetchone()
    if found is None or (if_updated_at is not None and found[0] != if_updated_at):
        return False
    t = now()
    conn.execute(UPSERT, (thread_id, reason, t if due_at is None else float(due_at), t))
    return True


def after_commit(conn: sqlite3.Connection, thread_id: str, batch: CommitBatch) -> None:
    """A commit's change to the thread's mark, inside its transaction: one that changes the
    thread's status removes it, or replaces it with a ``deferred`` one."""
    if batch.thread is None:
        return
    if batch.runnable_at is None:
        conn.execute("DELETE FROM gf_runnable WHERE thread_id = ?", (thread_id,))
        return
    conn.execute(
        "INSERT OR REPLACE INTO gf_runnable VALUES (?, 'deferred', ?, ?)",
        (thread_id, float(batch.runnable_at), now()),
    )
