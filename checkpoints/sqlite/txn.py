"""``Txn``: one SQLite transaction on a connection, committed or rolled back as a whole."""

from __future__ import annotations

import contextlib
import sqlite3
from types import TracebackType


class Txn:
    """``with Txn(conn):`` one transaction, committed on success, rolled back on any error.

    ``BEGIN IMMEDIATE`` (the default) for writes: the write lock is taken (waiting up to
    ``busy_timeout`` for other processes) before anything is read, so a test-and-set cannot
    race with another process, and a transaction never fails upgrading from read to write.
    ``BEGIN`` (deferred) for reads of several statements (one snapshot). A plain class
    rather than ``contextlib.contextmanager``: it is on every step's path.
    """

    __slots__ = ("_begin", "_conn")

    def __init__(self, conn: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> None:
        self._conn = conn
        self._begin = begin

    def __enter__(self) -> None:
        self._conn.execute(self._begin)

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is None:
            try:
                self._conn.execute("COMMIT")
                return
            except BaseException:
                self.rollback()
                raise
        self.rollback()

    def rollback(self) -> None:
        """Roll back if a transaction is open; a failed rollback never hides the error that
        caused it."""
        if self._conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")


def read_txn(conn: sqlite3.Connection) -> Txn:
    """A deferred transaction: several reads on one snapshot."""
    return Txn(conn, "BEGIN")
