"""An evidence log's write transactions and their fsyncs (``EvidenceStore.writing``).

An append is durable when it returns. How, with as few syncs as that allows (each one is
about as costly as the rest of an append; the approval flow W7 appends twice in each of its
processes, W4 and W5 once per run):

- **We sync the WAL ourselves**: the connection runs at ``synchronous=NORMAL`` and each
  append, once committed, is made durable by one ``fdatasync`` of the WAL, the sync that
  ``FULL`` would make at the commit. (SQLite's first sync of a WAL on each connection also
  syncs its directory, every time a process opens the log; ours does so only for a new WAL.)
  At ``NORMAL`` SQLite still syncs what keeps the WAL consistent: a restarted WAL's header
  before its frames, and the WAL before a checkpoint copies it.
- **A new WAL's first append** (every process that appends to a log no other process has
  open: an approval from the command line, a resume in a new process) runs at ``OFF``: at
  ``NORMAL`` SQLite would sync the new WAL's header first. The file is empty, so it holds no
  earlier frames that a power loss could replay, and the header's own sync guards nothing;
  one ``fdatasync`` then makes header and frames durable, and one of the directory the new
  file's name. The emptiness is checked again under the write lock (another process may have
  written in between: then the append runs as any other). SQLite's automatic checkpoint is
  off for that one transaction, so that nothing is copied from an unsynced WAL.
- **Appends that a store's record vouches for** (``sync=False``: an interrupt's pause,
  whose event the runtime writes again from the pause record if it is missing when the
  pause is answered or resumed) are committed without their own sync: a later append's
  sync, or closing the log, makes them durable, and a process crash loses nothing (the
  operating system has them). W5 (a thousand threads to an interrupt) appends only these.
- **Room in the WAL** (``checkpoints.sqlite.wal``): from a connection's third append on,
  zeros are kept ahead of the WAL's end, so appends overwrite the file rather than grow it
  (their fsync then skips a filesystem-journal commit). A process that appends once or twice
  would only pay for writing them.

Where no descriptor on the WAL can be had, SQLite syncs at ``FULL`` as usual. A log made
with ``durability="process"`` runs at ``NORMAL`` and syncs nothing; an in-memory log has no
WAL.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import weakref
from collections.abc import Iterator

import checkpoints.sqlite.wal as wal
from checkpoints.lockwait import is_busy, pause

AUTOCHECKPOINT = 1000  # (SQLite's default)
ROOM_AFTER = 2
"""Appends of a connection before it keeps room in the WAL (see the module docstring)."""


@contextlib.contextmanager
def immediate(conn: sqlite3.Connection, wait: float | None = None) -> Iterator[None]:
    """One write transaction (``BEGIN IMMEDIATE``: SQLite's write lock, taken at once):
    committed when the block ends, rolled back when it raises. ``wait``: seconds to wait for
    another process's lock in short, jittered tries of our own (``checkpoints.lockwait``:
    SQLite's busy handler sleeps up to 100 ms between tries, and appends of many processes
    then queue unfairly); None: the connection's busy handler."""
    if wait is None:
        conn.execute("BEGIN IMMEDIATE")
    else:
        begin_waiting(conn, wait)
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise


def begin_waiting(conn: sqlite3.Connection, wait: float) -> None:
    """``BEGIN IMMEDIATE``, waiting up to ``wait`` seconds for another process's lock."""
    conn.execute("PRAGMA busy_timeout = 0")  # (a locked file answers at once)
    try:
        started: float | None = None
        attempt = 0
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as e:
                now = time.monotonic()
                started = now if started is None else started
                if not is_busy(e) or now - started >= wait:
                    raise
                time.sleep(pause(attempt))
                attempt += 1
    finally:
        conn.execute(f"PRAGMA busy_timeout = {round(wait * 1000)}")


class WalSync:
    """The descriptor on one evidence log's WAL while its connection is open, and the
    level of that connection (see the module docstring)."""

    def __init__(self, path: str, *, fsync: bool) -> None:
        self._path = path
        self._wal_path = ""  # (where SQLite keeps it, symlinks resolved: found on opening)
        self._fsync = fsync
        self.fd: int | None = None
        self._finalizer: weakref.finalize[[int], WalSync] | None = None
        self._appends = 0
        self.unsynced = False
        """Whether an append committed since the last sync was not synced (``sync=False``)."""

    @property
    def level(self) -> str:
        """The connection's ``synchronous`` between appends."""
        return "FULL" if self._fsync and self.fd is None else "NORMAL"

    def opened(self, conn: sqlite3.Connection, writable: bool) -> None:
        """``conn`` is open (SQLite made its WAL as it first read): take a descriptor on the
        WAL and set the level."""
        self.closed()
        if writable and self._fsync:
            self._wal_path = os.path.realpath(self._path) + "-wal"
            self.fd = fd = wal.open_fd(self._wal_path)
            if fd is not None:  # (closed with the store that is freed without close())
                self._finalizer = weakref.finalize(self, _close, fd)
        conn.execute(f"PRAGMA synchronous={self.level}")

    def closed(self) -> None:
        """The connection is closed (or belongs to the parent of a forked process): what
        was appended without a sync is synced first."""
        if self.unsynced and self.fd is not None:
            with contextlib.suppress(OSError):
                os.fdatasync(self.fd)
        self.unsynced = False
        finalizer, self._finalizer, self.fd = self._finalizer, None, None
        self._appends = 0
        if finalizer is not None:
            finalizer()

    def is_new(self) -> bool:
        """Whether the WAL is known to be empty (a new WAL: see the module docstring)."""
        return wal.size(self.fd) == 0

    @contextlib.contextmanager
    def append(self, conn: sqlite3.Connection, wait: float, *, sync: bool = True) -> Iterator[None]:
        """One durable write transaction on ``conn`` (``immediate``), synced as the module
        docstring says (``sync=False``: durable once a later append is, or the log closed;
        a new WAL's first append is synced all the same, with its directory).

        Raises:
            sqlite3.Error, OSError: it could not be written, or not synced (then it may be
                in the log without being durable).
        """
        new = self.is_new()
        try:
            if new:
                conn.execute("PRAGMA synchronous=OFF")
                conn.execute("PRAGMA wal_autocheckpoint=0")
            with immediate(conn, wait):
                if new and not self.is_new():  # another process wrote since the look
                    conn.execute("ROLLBACK")
                    self._restore(conn)
                    new = False
                    begin_waiting(conn, wait)
                if self._appends >= ROOM_AFTER:
                    wal.make_room(self.fd)
                yield
            self._appends += 1
            if self.fd is not None:
                if sync or new:
                    self._sync(new)
                    self.unsynced = False
                else:
                    self.unsynced = True
        finally:
            if new:
                with contextlib.suppress(sqlite3.Error):
                    self._restore(conn)

    def _restore(self, conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA synchronous={self.level}")
        conn.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT}")

    def _sync(self, new: bool) -> None:
        """Make the committed append durable: the WAL's data, and for a ``new`` WAL its
        directory entry."""
        assert self.fd is not None
        os.fdatasync(self.fd)
        if new:
            directory = os.open(os.path.dirname(self._wal_path), os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
