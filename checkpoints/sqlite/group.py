"""Calls that share a thread hop, and commits that share a transaction (group commit).

A call of a store from an event loop runs on a worker thread (``Connection.run``), and on
these machines the hop there and back costs about as much as an fsync'd commit (~150 µs
for the operating system's part, ~250 µs through ``anyio.to_thread``). So calls that
arrive while another hop is under way wait in a queue, and the next hop runs all of them,
one after the other, each exactly as it would run alone (its own transaction, its own
errors), in the order they were made.

Commits among them (``Job.grouped``: a worker resuming many threads at once) share more:
consecutive commits run in one write transaction, one fsync for all of them, each inside a
savepoint of its own. Each batch is still fenced by its own lease and head, and one that
fails (fenced off, a value that cannot be stored, a damaged row, an SQLite error of its own
statement) rolls back to its savepoint and gets its own error; the others commit. An error
of the transaction itself (``TRANSACTION_ERRORS``: the disk, the lock) fails it whole, so
every commit of it gets that error and none is written: as for a commit alone, an error
means nothing of the batch was written.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

import anyio

from checkpoints.errors import CheckpointError

WriteTxn = Callable[[sqlite3.Connection, bool, Callable[[], int]], AbstractContextManager[None]]
"""Makes a commit's transaction: ``(conn, durable, size)``."""

GroupFn = Callable[[sqlite3.Connection, WriteTxn], Any]
"""A commit that can share a transaction: it writes inside the transaction its ``WriteTxn``
makes (its own, or a savepoint of the group's)."""


class Job:
    """One call waiting for (or done by) a thread hop."""

    __slots__ = ("done", "durable", "error", "fn", "grouped", "taken", "thread_id", "value")

    def __init__(
        self,
        thread_id: str | None,
        fn: Callable[[sqlite3.Connection], Any] | None,
        grouped: GroupFn | None = None,
        durable: bool = True,
    ) -> None:
        self.thread_id = thread_id
        self.fn = fn
        self.grouped = grouped
        """A commit that may share a transaction with the commits next to it."""
        self.durable = durable
        self.taken = False
        """A hop has taken the job (it runs, or ran): it can no longer be withdrawn."""
        self.done = False
        """The job ran (``value`` or ``error`` is its outcome)."""
        self.value: Any = None
        self.error: BaseException | None = None

    def result(self) -> Any:
        """What the call returned, or raise what it raised."""
        error = self.error
        if error is None:
            return self.value
        self.error = None
        try:
            raise error
        finally:
            del error  # (no reference cycle through this frame and the traceback)


class Lane:
    """What a store's hops on one event loop share (``blocking.per_loop``: anyio's limiters
    serve the loop they are used on, and one store may serve several loops at once): the
    limiter that lets one hop run at a time, the worker thread it runs on, and the calls
    waiting for the next hop. Made at the loop's first hop, on the loop."""

    __slots__ = ("hop_thread", "limiter", "queue")

    def __init__(self) -> None:
        self.limiter = anyio.CapacityLimiter(1)
        """Held by the hop under way; calls made meanwhile queue for the next one."""
        self.hop_thread = anyio.CapacityLimiter(1)
        """The hops' worker thread: not anyio's default limiter, which other work of the
        process may fill."""
        self.queue: list[Job] = []
        """Calls waiting for the next hop (only the loop's own thread touches it)."""


class Savepoint:
    """A group member's transaction: a savepoint of the group's, released on success,
    rolled back to on any error (the member's writes undone, the others' kept)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection, durable: bool, size: Callable[[], int]) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("SAVEPOINT gf_member")

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is None:
            self._conn.execute("RELEASE gf_member")
            return
        if not self._conn.in_transaction:
            return  # SQLite rolled the whole transaction back (a full disk): its error goes on
        try:
            self._conn.execute("ROLLBACK TO gf_member")
            self._conn.execute("RELEASE gf_member")
        except sqlite3.Error:
            if e is not None:
                raise e from None  # (the member's error, not the rollback's, fails the group)
            raise


def runs(jobs: Sequence[Job], grouping: bool) -> list[list[Job]]:
    """The jobs of one hop in order, cut into what runs as one call: a run of consecutive
    grouped commits (with ``grouping``), or one job."""
    out: list[list[Job]] = []
    for job in jobs:
        if grouping and job.grouped is not None and out and out[-1][-1].grouped is not None:
            out[-1].append(job)
        else:
            out.append([job])
    return out


BeginGroup = Callable[[sqlite3.Connection, bool], AbstractContextManager[None]]
"""Makes a group commit's transaction: ``(conn, durable)``."""


TRANSACTION_ERRORS = frozenset(
    (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_IOERR,
     sqlite3.SQLITE_FULL, sqlite3.SQLITE_INTERRUPT, sqlite3.SQLITE_READONLY)
)  # fmt: skip
"""SQLite errors after which a transaction may have been rolled back, or must be (SQLite's
advice): they fail the group. Other SQLite errors belong to the statement, and so to the
member that ran it, once its savepoint is rolled back."""

Typed = Callable[[sqlite3.DatabaseError, str | None], Exception]
"""The typed error an SQLite error stands for, naming a thread (``Connection.typed``)."""


def group_fn(
    members: Sequence[Job], begin: BeginGroup, typed: Typed
) -> Callable[[sqlite3.Connection], None]:
    """The call that commits ``members`` in one transaction (``begin(conn, durable)``: a
    durable one when any member is), each in a savepoint. A member's own error (a
    ``CheckpointError``, or an SQLite error of its statements, ``typed`` for its thread) is
    its own; one that concerns the transaction (``TRANSACTION_ERRORS``) fails it (raised)."""

    def run(conn: sqlite3.Connection) -> None:
        for m in members:  # (a retried transaction starts over)
            m.value = m.error = None
        with begin(conn, any(m.durable for m in members)):
            for m in members:
                assert m.grouped is not None
                try:
                    m.value = m.grouped(conn, Savepoint)
                except CheckpointError as e:
                    m.error = e
                except sqlite3.DatabaseError as e:
                    code = getattr(e, "sqlite_errorcode", 0) & 0xFF
                    if code in TRANSACTION_ERRORS or not conn.in_transaction:
                        raise
                    m.error = typed(e, m.thread_id)

    return run
