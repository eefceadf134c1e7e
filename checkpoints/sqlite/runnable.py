"""The runnable-index methods of ``SqliteCheckpointer`` (see ``Checkpointer.mark_runnable``;
the SQL is ``marks``).

Every write is one ``BEGIN IMMEDIATE`` transaction, so the tests a method makes (the thread
row's ``updated_at``, the mark's presence, the lease) and its write cannot race with another
process.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from checkpoints.encoding import dumps as _dumps
from checkpoints.fencing import answers_fenced
from checkpoints.runnable_memory import check_limit, check_reason
from checkpoints.sqlite import marks
from checkpoints.sqlite.reads import THREAD as _THREAD
from checkpoints.sqlite.reads_records import next_seq
from checkpoints.sqlite.rows.records import decision_row
from checkpoints.sqlite.rows.threads import thread as _thread
from checkpoints.sqlite.txn import Txn as _Txn
from checkpoints.sqlite.writes import INSERT_DECISION as _INSERT_DECISION
from checkpoints.sqlite.writes import insert_answers
from checkpoints.sqlite.writes import lease_existing as _lease_existing

if TYPE_CHECKING:
    from checkpoints.sqlite.connection import Connection
    from checkpoints.sqlite.durability import Durability
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
        _db: Connection
        _durability: Durability

    async def record_answers(
        self,
        thread_id: ThreadId,
        decisions: Sequence[DecisionRecord],
        answers: Sequence[AnswerRecord],
        *,
        runnable_if_updated_at: float | None = None,
        if_idle_at: float | None = None,
    ) -> bool:
        """Append decisions and answers and mark the thread runnable, in one transaction
        (every value serialized first), fenced by ``if_idle_at``."""
        extras = [
            _dumps(d.extra, key=f"extra of decision {d.call_id!r}") if d.extra else None
            for d in decisions
        ]
        blobs = [(a, _dumps(a.value, key=f"answer to {a.pause_id!r}")) for a in answers]

        def run(conn: sqlite3.Connection) -> bool:
            with _Txn(conn):
                if if_idle_at is not None:
                    row = conn.execute(_THREAD, (thread_id,)).fetchone()
                    rec = _thread(thread_id, row) if row is not None else None
                    if (fenced := answers_fenced(thread_id, rec, if_idle_at, now())) is not None:
                        raise fenced
                if decisions:
                    seq = next_seq(conn, "gf_decisions")
                    conn.executemany(
                        _INSERT_DECISION,
                        [decision_row(seq + i, d, x)
                         for i, (d, x) in enumerate(zip(decisions, extras, strict=True))],
                    )  # fmt: skip
                if blobs:
                    insert_answers(conn, blobs)
                if runnable_if_updated_at is None:
                    return False
                return marks.mark(conn, thread_id, "answered", None, runnable_if_updated_at)

        return await self._db.run(thread_id, run)

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

        return await self._db.run(thread_id, run)

    async def list_runnable(
        self, *, due_by: float | None = None, limit: int = 100
    ) -> list[RunnableMark]:
        """Marks due by ``due_by``, earliest first: one range of the ``due_at`` index."""
        limit = check_limit(limit)
        by = now() if due_by is None else float(due_by)

        def run(conn: sqlite3.Connection) -> list[RunnableMark]:
            found = conn.execute(marks.DUE, (by, limit)).fetchall()
            return [marks.decode(r[0], r[1:4], r[4]) for r in found]

        return await self._db.run(None, run)

    async def claim_runnable(
        self, thread_id: ThreadId, owner: str, ttl: float
    ) -> RunnableMark | None:
        """Test the mark and take the lease in one ``BEGIN IMMEDIATE`` transaction (a lease's:
        it waits for no fsync, see ``Durability.relaxed``)."""

        def run(conn: sqlite3.Connection) -> RunnableMark | None:
            with self._durability.relaxed(conn):
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

        return await self._db.run(thread_id, run)

    async def unmark_runnable(self, mark: RunnableMark) -> bool:
        """Remove ``mark`` if it is still the thread's (one statement)."""

        def run(conn: sqlite3.Connection) -> bool:
            with _Txn(conn):
                cur = conn.execute(
                    "DELETE FROM gf_runnable WHERE thread_id = ? AND marked_at = ?",
                    (mark.thread_id, mark.marked_at),
                )
                return cur.rowcount == 1

        return await self._db.run(mark.thread_id, run)
