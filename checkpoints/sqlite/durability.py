"""``Durability``: the whole fsync story of one ``SqliteCheckpointer`` connection.

- **Durable commits.** WAL with ``synchronous=FULL`` (the default): a commit returns after
  the WAL is fsync'd (DESIGN.md promise 2).
- **Relaxed commits.** A transaction nothing durable depends on yet (a lease alone, a run's
  input checkpoint, made before any node runs) is committed without waiting for an fsync:
  it is visible to other processes at once, and WAL keeps commits in order, so the next
  fsync'd commit makes it durable too. (A power loss that drops a lease also ended its
  owner; one that drops an input loses only the call that had not returned.)
- **A new WAL's first write** runs at ``OFF`` (see ``relaxed``): at ``NORMAL`` SQLite would
  sync the new WAL header and its directory, the costliest sync of a resumed run.
- **Room in the WAL** (``wal``): under the write lock, a new WAL and every durable commit
  keep zeros written ahead of the WAL's end, so commits overwrite the file rather than grow
  it (an fsync then skips a filesystem-journal commit).
- **A large commit's checkpoint left to the next commit** (``commit``): the pages of a
  list channel's chunk and the checkpoint they would start are written by two commits.

``tuned=False`` turns the last four off (every write is a plain transaction at the
configured level, no room is kept): the baseline the tuning is measured against (W4, W5
resume a thread per process; W1 commits a step per fsync).
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Literal

from checkpoints.sqlite import wal
from checkpoints.sqlite.txn import Txn

SYNC_LEVELS = ("OFF", "NORMAL", "FULL", "EXTRA")

DurabilityLevel = Literal["fsync", "process"]
"""What a commit survives once it returns: a power loss (``fsync``), or a crash of the
process only (``process``; see ``SqliteCheckpointer``)."""
SYNC_OF: dict[str, str] = {"fsync": "FULL", "process": "NORMAL"}
"""The ``synchronous`` level of each durability (WAL mode)."""


def check_durability(durability: object) -> DurabilityLevel:
    """``durability`` itself, when it is one of the levels; else a ``ValueError`` naming them."""
    if durability not in SYNC_OF:
        raise ValueError(
            f"durability must be 'fsync' (survives a power loss) or 'process' (survives a "
            f"crash of the process only), not {durability!r}"
        )
    return durability  # type: ignore[return-value]


def check_options(busy_timeout: object, synchronous: object, **flags: object) -> None:
    """Refuse ``SqliteCheckpointer`` options of the wrong kind when the store is made (before
    any file is touched), naming the option and what it takes."""
    if (
        type(busy_timeout) not in (int, float)
        or not math.isfinite(busy_timeout)  # type: ignore[arg-type]
        or busy_timeout < 0  # type: ignore[operator]
    ):
        raise ValueError(
            f"busy_timeout must be a number of seconds, 0 or more, not {busy_timeout!r}"
        )
    if synchronous is not None and not isinstance(synchronous, str):
        raise ValueError(
            f"synchronous must be OFF, NORMAL, FULL or EXTRA (or None), not {synchronous!r}"
        )
    for name, value in flags.items():
        if type(value) is not bool:
            raise ValueError(f"{name} must be True or False, not {value!r}")


AUTOCHECKPOINT_PAGES = 250
"""SQLite checkpoints the WAL into the file after the commit that takes it to this many
pages (its default: 1,000). A checkpoint's cost grows with the pages it copies and the
commit that triggers it pays it: at 1,000 those commits were the slowest steps of a long
chat loop (3-4 ms, 10-17x the median step), at 250 they are no longer
(``benchmarks/chat_history.py``; W1's per-step cost did not change)."""

LARGE_COMMIT_BYTES = 1 << 16
"""A durable commit of a thread writing at least this many bytes of values (16 pages: a
chunk of a long list channel, ``checkpoints.chunks``) leaves the automatic checkpoint that it
would start to the next commit (``commit``): the two costliest writes of a long chat loop
then land on two steps, not one (``benchmarks/chat_history.py``)."""

RELAXED_MAX_BYTES = 1 << 18
"""An input commit larger than this (in serialized values) is never run at ``OFF``: at
most ~80 pages, far below the ``AUTOCHECKPOINT_PAGES`` that would start SQLite's automatic
checkpoint (see ``relaxed``)."""


class RoomTxn(Txn):
    """``Txn`` for a durable commit: once it holds the write lock, it keeps room in the WAL
    (``wal.make_room``: the commit then overwrites the file rather than grows it)."""

    __slots__ = ("_fd",)

    def __init__(self, conn: sqlite3.Connection, wal_fd: int | None) -> None:
        super().__init__(conn)
        self._fd = wal_fd

    def __enter__(self) -> None:
        super().__enter__()
        try:
            wal.make_room(self._fd)
        except BaseException:  # (make_room reports no OSError; anything else ends the txn)
            self.rollback()
            raise


class Durability:
    """The ``synchronous`` level of one connection, when commits may skip their fsync, and
    the descriptor on its WAL (kept while the connection is open)."""

    def __init__(self, path: str, synchronous: str, *, tuned: bool = True) -> None:
        if synchronous.upper() not in SYNC_LEVELS:
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
        self.synchronous = synchronous.upper()
        self.tuned = tuned
        # Where SQLite keeps the WAL: next to the file, symlinks resolved, whatever the
        # working directory becomes later.
        self._wal_path = os.path.realpath(path) + "-wal"
        self.wal_fd: int | None = None
        """A descriptor on the WAL while the connection is open (see ``wal``)."""
        self._conn: sqlite3.Connection | None = None
        self._level = self.synchronous
        self._deferred = False  # (the last durable commit left its checkpoint to the next)

    # -- the connection's life -------------------------------------------------------------
    def configure(self, conn: sqlite3.Connection) -> None:
        """Set WAL mode and the durable level on a new writable connection."""
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        conn.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES}")

    def opened(self, conn: sqlite3.Connection, *, writable: bool) -> None:
        """Track ``conn`` (its level is the durable one); open the WAL's descriptor (SQLite
        made the WAL as it first read; a read-only store writes none)."""
        self._conn, self._level = conn, self.synchronous
        self.wal_fd = wal.open_fd(self._wal_path) if writable and self.tuned else None

    def closing(self) -> None:
        """Before the connection closes: never checkpoint the WAL without its syncs (closing
        does), then drop the descriptor."""
        if self._conn is not None and self._level == "OFF" != self.synchronous:
            with contextlib.suppress(sqlite3.Error):
                self.ensure(True)
        fd, self.wal_fd, self._conn = self.wal_fd, None, None
        if fd is not None:
            os.close(fd)

    def before_call(self) -> None:
        """Every call starts durable (unless it relaxes itself)."""
        if self._level != self.synchronous:
            self.ensure(True)

    # -- levels ----------------------------------------------------------------------------
    def ensure(self, durable: bool, *, off: bool = False) -> None:
        """Set the connection's ``synchronous`` for the next transaction (outside of one:
        SQLite refuses it inside). ``off``: not even the WAL header's sync (``relaxed``)."""
        if off:
            want = "OFF"
        elif durable or self.synchronous not in ("FULL", "EXTRA"):
            want = self.synchronous
        else:
            want = "NORMAL"
        if self._level != want:
            assert self._conn is not None
            self._conn.execute(f"PRAGMA synchronous={want}")
            self._level = want

    def wal_is_empty(self) -> bool:
        """Whether the WAL is known to hold nothing (unknown: it may hold frames)."""
        return wal.size(self.wal_fd) == 0

    # -- transactions ----------------------------------------------------------------------
    def write(
        self, conn: sqlite3.Connection, durable: bool, size: Callable[[], int]
    ) -> AbstractContextManager[None]:
        """A commit's transaction: fsync'd, with room kept in the WAL; or, for a commit nothing
        durable depends on yet (a run's input), relaxed like a lease's when it is small
        (``size()``: the bytes of the values it writes); a larger one runs at ``NORMAL``."""
        if not self.tuned:
            return Txn(conn)
        if durable:
            return RoomTxn(conn, self.wal_fd)
        if self.wal_is_empty() and size() < RELAXED_MAX_BYTES:
            return self.relaxed(conn)  # (which looks again, under the write lock)
        self.ensure(False)
        return Txn(conn)

    def commit(
        self, conn: sqlite3.Connection, durable: bool, size: Callable[[], int]
    ) -> AbstractContextManager[None]:
        """A thread's commit: ``write``'s transaction; a large durable one (``size()`` at
        least ``LARGE_COMMIT_BYTES``) runs with SQLite's automatic checkpoint off, so that
        the checkpoint its pages would start is made by the next commit instead. Never two
        in a row: a run of large commits still checkpoints at every other one."""
        txn = self.write(conn, durable, size)
        if not (durable and self.tuned):
            return txn
        if self._deferred or size() < LARGE_COMMIT_BYTES:
            self._deferred = False
            return txn
        self._deferred = True
        return self._checkpoint_after(conn, txn)

    @contextlib.contextmanager
    def _checkpoint_after(
        self, conn: sqlite3.Connection, txn: AbstractContextManager[None]
    ) -> Iterator[None]:
        conn.execute("PRAGMA wal_autocheckpoint=0")
        try:
            with txn:
                yield
        finally:
            with contextlib.suppress(sqlite3.Error):  # (configure sets it on a new connection)
                conn.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES}")

    def relaxed(self, conn: sqlite3.Connection) -> AbstractContextManager[None]:
        """A write transaction that need not wait for an fsync: a lease alone, or a small
        input commit (see the module docstring)."""
        return self._relaxed(conn) if self.tuned else Txn(conn)

    @contextlib.contextmanager
    def _relaxed(self, conn: sqlite3.Connection) -> Iterator[None]:
        """When the WAL file is empty (a process's first write to a store no other process has
        open: every resume, or new run, in a new process) this transaction's frames start it,
        and at ``NORMAL`` SQLite would sync the new WAL header and its directory. That sync
        guards against replaying an earlier cycle's frames after a power loss; an empty file
        has none, so the transaction runs at ``OFF``, and the next fsync'd commit (or
        checkpoint, which syncs the WAL first) makes header and directory durable. The
        transaction must stay far below SQLite's automatic checkpoint
        (``AUTOCHECKPOINT_PAGES``), which would otherwise run at ``OFF``, unsynced, right
        after it: a lease writes a page or
        two, an input commit is relaxed only below ``RELAXED_MAX_BYTES`` (``write``). The
        emptiness is checked again under the write lock: another process may have written in
        between. The durable level is set again at once, so a checkpoint (on close, or
        SQLite's own) never runs at ``OFF``. Under the lock, a new WAL is also given room
        (``wal.make_room``), so that the run's commits overwrite it rather than grow it.
        """
        off = self.synchronous != "OFF" and self.wal_is_empty()
        self.ensure(False, off=off)
        try:
            with Txn(conn):
                if off and not self.wal_is_empty():  # another process wrote since the look
                    conn.execute("ROLLBACK")
                    self.ensure(False)
                    conn.execute("BEGIN IMMEDIATE")
                elif off:  # a new WAL, and the write lock is ours: give it room (see wal)
                    wal.make_room(self.wal_fd)
                yield
        finally:
            if self._level == "OFF" != self.synchronous:
                with contextlib.suppress(sqlite3.Error):  # else before_call sets it
                    self.ensure(True)
