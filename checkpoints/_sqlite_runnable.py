"""The runnable-index methods of ``SqliteCheckpointer`` (see ``Checkpointer.mark_runnable``;
the SQL is ``_sqlite_marks``).

Every write is one ``BEGIN IMMEDIATE`` transaction, so the tests a method makes (the thread
row's ``updated_at``, the mark's presence, the lease) and its write cannot race with another
process.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, TypeVar

from checkpoints import _sqlite_marks as marks
from checkpoints import _sqlite_rows as rows
from checkpoints._runnable_memory import check_limit, check_reason
from checkpoints._sqlite_sql import (
    _INSERT_DECISION,
    _THREAD,
    _dumps,
    _lease_existing,
    _Txn,
    insert_answers,
    next_seq,
)
from checkpoints.models import (
    AnswerRecord,
    DecisionRecord,
    RunnableMark,
    RunnableReason,
    ThreadId,
    now,
)

T = TypeVar("T")


class SqliteRunnable:
    """The runnable-index methods of ``SqliteCheckpointer``."""

    if TYPE_CHECKING:

        async def _run(self, thread_id: str | None, fn: Callable[[sqlite3.Connection], T]) -> T: ...

        def _relaxed_txn(self, conn: sqlite3.Connection) -> AbstractContextManager[None]: ...

    async def record_answers(
        self,
        thread_id: ThreadId,
        decisions: Sequence[DecisionRecord],
        answers: Sequence[AnswerRecord],
        *,
        runnable_if_updated_at: float | None = None,
    ) -> bool:
        """Append decisions and answers and mark the thread runnable, in one transaction
        (every value serialized first)."""
        extras = [
            _dumps(d.extra, key=f"extra of decision {d.call_id!r}") if d.extra else None
            for d in decisions
        ]
        blobs = [(a, _dumps(a.value, key=f"answer to {a.pause_id!r}")) for a in answers]

        def run(conn: sqlite3.Connection) -> bool:
            with _Txn(conn):
                if decisions:
                    seq = next_seq(conn, "gf_decisions")
                    conn.executemany(
                        _INSERT_DECISION,
                        [rows.decision_row(seq + i, d, x)
                         for i, (d, x) in enumerate(zip(decisions, extras, strict=True))],
                    )  # fmt: skip
                if blobs:
                    insert_answers(conn, blobs)
                if runnable_if_updated_at is None:
                    return False
                return marks.mark(conn, thread_id, "answered", None, runnable_if_updated_at)

        return await self._run(thread_id, run)

    async def mark_runnable(
        self,
        thread_id: ThreadId,
        *,
        reason: RunnableReason,
        due_at: float | None = None,
        if_updated_at: float | None = None,
    ) -> bool:
        """Mark the thread runnable (one write transaction: the test and the mark)."""
        check_reason(reason)

        def run(conn: sqlite3.Connection) -> bool:
            with _Txn(conn):
                return marks.mark(conn, thread_id, reason, due_at, if_updated_at)

        return await self._run(thread_id, run)

    async def list_runnable(
        self, *, due_by: float | None = None, limit: int = 100
    ) -> list[RunnableMark]:
        """Marks due by ``due_by``, earliest first: one range of the ``due_at`` index."""
        limit = check_limit(limit)
        by = now() if due_by is None else float(due_by)

        def run(conn: sqlite3.Connection) -> list[RunnableMark]:
            found = conn.execute(marks.DUE, (by, limit)).fetchall()
            return [marks.decode(r[0], r[1:4], r[4]) for r in found]

        return await self._run(None, run)

    async def claim_runnable(
        self, thread_id: ThreadId, owner: str, ttl: float
    ) -> RunnableMark | None:
        """Test the mark and take the lease in one ``BEGIN IMMEDIATE`` transaction (a lease's:
        it waits for no fsync, see ``SqliteCheckpointer._relaxed_txn``)."""

        def run(conn: sqlite3.Connection) -> RunnableMark | None:
            with self._relaxed_txn(conn):
                found = conn.execute(marks.MARK, (thread_id,)).fetchone()
                if found is None:
                    return None
                mark = marks.decode(thread_id, found)
                if mark.due_at > now():
                    return None
                row = conn.execute(_THREAD, (thread_id,)).fetchone()
                if row is None:  # (a mark outlives no thread; dropped if one did)
                    conn.execute("DELETE FROM gf_runnable WHERE thread_id = ?", (thread_id,))
                    return None
                rec = _lease_existing(conn, thread_id, owner, ttl, row)  # LeaseHeldError
                return RunnableMark(
                    mark.thread_id, mark.reason, mark.due_at, mark.marked_at, rec.graph_name
                )

        return await self._run(thread_id, run)

    async def unmark_runnable(self, mark: RunnableMark) -> bool:
        """Remove ``mark`` if it is still the thread's (one statement)."""

        def run(conn: sqlite3.Connection) -> bool:
            with _Txn(conn):
                cur = conn.execute(
                    "DELETE FROM gf_runnable WHERE thread_id = ? AND marked_at = ?",
                    (mark.thread_id, mark.marked_at),
                )
                return cur.rowcount == 1

        return await self._run(mark.thread_id, run)
