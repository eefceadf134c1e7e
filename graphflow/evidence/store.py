"""``EvidenceStore``: an evidence log's SQLite file, its connection and its transactions.

Decisions behind it:

- **Its own file**, independent of the checkpoint tables. A file that holds other tables is
  refused. ``":memory:"`` is an in-memory SQLite database: one implementation for both.
- **One chain for many processes.** A write runs under ``BEGIN IMMEDIATE`` (SQLite's write
  lock, waited for up to ``busy_timeout``). ``seq`` is the primary key and ``prev_hash`` is
  unique, so two writers that raced could not both commit. WAL: a write is durable when it
  returns, its WAL synced (``graphflow.evidence.walsync``: which syncs, and how few;
  ``fsync=False``: none, durable against a crash of the process, not a power loss:
  ``EvidenceLog(durability="process")``).
- **Append-only**: triggers refuse ``UPDATE`` and ``DELETE``. That guards against mistakes;
  whoever can write the file can drop them, and ``verify`` is what detects a change.
- **Failure is typed**: an error of SQLite or of the file system becomes ``EvidenceError``
  naming the path; the connection is dropped and the next call opens the file again, so a
  log that is writable again is used again. Each call first checks that the file at the
  path is still the one opened: one that was removed (or replaced) is opened anew, which
  starts a new chain in a new file; a removed directory is an ``EvidenceError``, and so is
  a write to a file made read-only (checked with ``access``, so it holds for root when
  the file is immutable).
- Bytes are read as stored (``CAST(body AS BLOB)``), never canonicalized again.
- A process forked while a connection is open does not use it (SQLite's locks are per
  process): the child opens its own.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from checkpoints.sqlite.paths import open_read_only
from graphflow.evidence.chain import StoredRow
from graphflow.evidence.errors import EvidenceError, InvalidEventError
from graphflow.evidence.walsync import WalSync, immediate

MEMORY = ":memory:"
APPLICATION_ID = 0x47464556  # "GFEV": marks a SQLite file as a graphflow evidence log
FORMAT_VERSION = 2
"""1: the events; 2: each event may carry a unique ``event_key`` (the runtime's, so an
event of a stage that a node's rerun passes again is written once)."""

_KEY_INDEX = (
    "CREATE UNIQUE INDEX evidence_events_key ON evidence_events (event_key) "
    "WHERE event_key IS NOT NULL"
)
_SCHEMA = (
    """CREATE TABLE evidence_events (
        seq INTEGER PRIMARY KEY,
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL,
        thread_id TEXT,
        event_type TEXT NOT NULL,
        body TEXT NOT NULL,
        event_key TEXT
    )""",
    "CREATE UNIQUE INDEX evidence_events_prev_hash ON evidence_events (prev_hash)",
    _KEY_INDEX,
    "CREATE INDEX evidence_events_thread ON evidence_events (thread_id, seq)",
    """CREATE TRIGGER evidence_events_no_update BEFORE UPDATE ON evidence_events
        BEGIN SELECT RAISE(ABORT, 'evidence events are append-only'); END""",
    """CREATE TRIGGER evidence_events_no_delete BEFORE DELETE ON evidence_events
        BEGIN SELECT RAISE(ABORT, 'evidence events are append-only'); END""",
    f"PRAGMA application_id = {APPLICATION_ID}",
    f"PRAGMA user_version = {FORMAT_VERSION}",
)
_ROWS = (
    "SELECT seq, prev_hash, hash, CAST(body AS BLOB), thread_id, event_type FROM evidence_events"
)
_BATCH = 2000


def last_row(conn: sqlite3.Connection) -> tuple[Any, Any] | None:
    """The last stored row's seq and hash, as stored (None: the log is empty)."""
    row: tuple[Any, Any] | None = conn.execute(
        "SELECT seq, hash FROM evidence_events ORDER BY seq DESC LIMIT 1"
    ).fetchone()
    return row


def insert_rows(conn: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert ``(seq, prev_hash, hash, thread_id, event_type, body, event_key)`` rows."""
    conn.executemany(
        "INSERT INTO evidence_events "
        "(seq, prev_hash, hash, thread_id, event_type, body, event_key) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


def existing_keys(conn: sqlite3.Connection, keys: Sequence[str]) -> set[str]:
    """Which of ``keys`` stored events already carry."""
    found: set[str] = set()
    for i in range(0, len(keys), 500):
        part = keys[i : i + 500]
        marks = ", ".join("?" * len(part))
        found.update(
            row[0]
            for row in conn.execute(
                f"SELECT event_key FROM evidence_events WHERE event_key IN ({marks})", part
            )
        )
    return found


def select_rows(
    conn: sqlite3.Connection, thread_id: str | None, since: int | None
) -> list[StoredRow]:
    """The rows in seq order: all, or ``thread_id``'s; after seq ``since``."""
    clauses: list[str] = []
    params: list[Any] = []
    if thread_id is not None:
        clauses.append("thread_id = ?")
        params.append(thread_id)
    if since is not None:
        clauses.append("seq > ?")
        params.append(since)
    where = " WHERE " + " AND ".join(clauses) if clauses else ""
    return [StoredRow(*row) for row in conn.execute(f"{_ROWS}{where} ORDER BY seq", params)]


def stream_rows(conn: sqlite3.Connection) -> Iterator[StoredRow]:
    """Every row in seq order, read in batches (a log may not fit in memory twice)."""
    cursor = conn.execute(f"{_ROWS} ORDER BY seq")
    while batch := cursor.fetchmany(_BATCH):
        for row in batch:
            yield StoredRow(*row)


def _close_quietly(conn: sqlite3.Connection, pid: int) -> None:
    if pid == os.getpid():
        with contextlib.suppress(sqlite3.Error):
            conn.close()


class EvidenceStore:
    """The SQLite file of one evidence log, used by one thread at a time (a lock).

    Args:
        path: the SQLite file (created when missing; its directory must exist), or
            ``":memory:"``.
        busy_timeout: seconds to wait for another process's write.
        fsync: every write waits for its fsync (else for the operating system only).
    """

    def __init__(self, path: str, *, busy_timeout: float, fsync: bool = True) -> None:
        self.path = path
        self.synchronous = "FULL" if fsync else "NORMAL"
        self.busy_timeout = busy_timeout
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
        self._writable = False  # whether the file could be written when it was opened
        self._pid = 0
        self._wal = WalSync(path, fsync=fsync)

    def open(self) -> None:
        """Open the file now (else the first read or write does).

        Raises:
            EvidenceError: the path's directory does not exist, the path is a directory, or
                the file cannot be opened or is not an evidence log.
        """
        with self._lock:
            self._connection()

    def close(self) -> None:
        """Close the connection; a later call opens the file again."""
        with self._lock:
            self._drop()

    def fail(self, what: str, error: BaseException) -> EvidenceError:
        """Drop the connection (the next call opens the file again) and name the path; the
        caller holds the lock (it is inside ``reading`` or ``writing``)."""
        self._drop()
        if "no such table: evidence_events" in str(error):  # (the log's file, its table gone)
            error = Exception("its table of events is gone (every event was deleted: run verify)")
        return EvidenceError(f"evidence log {self.path!r}: {what}: {error}", path=self.path)

    @contextlib.contextmanager
    def writing(self, *, sync: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction under the lock: all of the block's writes or none
        (``sync=False``: see ``walsync``).

        Raises:
            EvidenceError: the file cannot be written (nothing was written; or, when the
                file system fails its sync, perhaps written but not durable); or the block
                raised ``ValueError``/``TypeError``, which means the last row is damaged
                (its seq or hash is not what was written); ``InvalidEventError`` passes.
        """
        with self._lock:
            conn = self._connection(write=True)
            try:
                with self._wal.append(conn, self.busy_timeout, sync=sync):  # (walsync)
                    yield conn
            except (sqlite3.Error, OSError) as e:
                raise self.fail("cannot be written", e) from e
            except (ValueError, TypeError) as e:  # a damaged head row
                if isinstance(e, InvalidEventError):
                    raise
                raise self.fail("its last event is damaged (run verify)", e) from e

    @contextlib.contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """One read transaction (one snapshot) under the lock; errors name the path."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN")
                try:
                    yield conn
                finally:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("COMMIT")
            except sqlite3.Error as e:
                raise self.fail("cannot be read", e) from e

    # -- the connection -------------------------------------------------------------------
    def _drop(self) -> None:
        conn, self._conn, self._identity = self._conn, None, None
        self._wal.closed()
        if conn is not None and self._pid == os.getpid():
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def _connection(self, *, write: bool = False) -> sqlite3.Connection:
        """The open connection, after checking that the file is still the one opened (and,
        to ``write``, that it may be written: a file made read-only is, even though the
        descriptor SQLite holds could still write it)."""
        conn = self._conn
        if conn is not None and self._pid != os.getpid():  # a forked child: never reuse it
            self._conn = conn = None
        if conn is not None and self.path != MEMORY and self._stat() != self._identity:
            self._drop()
            conn = None
        if conn is not None and write and not self._writable and self._may_write():
            self._drop()  # SQLite opened it read-only: now it may be written, open it again
            conn = None
        if conn is None:
            conn = self._open()
        if write and not self._may_write():
            self._drop()
            raise EvidenceError(
                f"evidence log {self.path!r} cannot be written: the file (or its directory) "
                "is read-only; make it writable again (nothing was written)",
                path=self.path,
            )
        return conn

    def _may_write(self) -> bool:
        """Whether the file, and its directory (where SQLite keeps its ``-wal`` and
        ``-shm``), may be written."""
        if self.path == MEMORY:
            return True
        directory = os.path.dirname(os.path.abspath(self.path))
        return os.access(self.path, os.W_OK) and os.access(directory, os.W_OK | os.X_OK)

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _open(self) -> sqlite3.Connection:
        if self.path != MEMORY:
            directory = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(directory):
                raise EvidenceError(
                    f"evidence log {self.path!r}: its directory {directory!r} does not exist; "
                    "create it (the log file itself is created when missing)",
                    path=self.path,
                )
            if os.path.isdir(self.path):
                raise EvidenceError(
                    f"evidence log {self.path!r} is a directory; give a file path",
                    path=self.path,
                )
        # A log that exists but may not be written (a read-only file, directory or file
        # system) is opened read-only, as the checkpoint store is: audit and verify work.
        read_only = self.path != MEMORY and os.path.exists(self.path) and not self._may_write()
        try:
            conn = self._connect_read_only() if read_only else self._connect(self.path)
        except sqlite3.Error as e:
            raise self.fail("cannot be opened", e) from e
        try:
            if self.path != MEMORY and not read_only:
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            self._setup(conn)
        except EvidenceError:
            conn.close()
            raise
        except sqlite3.Error as e:
            conn.close()
            raise self.fail("cannot be opened", e) from e
        self._conn, self._pid = conn, os.getpid()
        # A connection left open holds itself in a cycle (its statement cache): close it
        # when this store is freed, so dropping a log without close() leaks nothing.
        weakref.finalize(self, _close_quietly, conn, self._pid)
        self._identity = self._stat() if self.path != MEMORY else None
        self._writable = self._may_write()
        self._wal.opened(conn, self._writable and self.path != MEMORY)
        return conn

    def _connect(self, target: str, *, uri: bool = False) -> sqlite3.Connection:
        return sqlite3.connect(
            target,
            timeout=self.busy_timeout,
            isolation_level=None,  # transactions are explicit
            check_same_thread=False,  # guarded by self._lock; used by worker threads
            uri=uri,
        )

    def _connect_read_only(self) -> sqlite3.Connection:
        """The file read-only: ``mode=ro``, else (no ``-shm`` can be made beside it and no
        WAL is left over) ``immutable`` (``checkpoints.sqlite.paths.open_read_only``)."""
        return open_read_only(
            self.path,
            lambda uri: self._connect(uri, uri=True),
            lambda conn: conn.execute("PRAGMA application_id").fetchone(),
        )

    def _setup(self, conn: sqlite3.Connection) -> None:
        """Create the tables of a new file; refuse a file that is not an evidence log."""
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if app_id == 0:
            with immediate(conn):
                app_id = conn.execute("PRAGMA application_id").fetchone()[0]  # a racing opener
                tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if app_id == 0 and tables == 0:
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    app_id = APPLICATION_ID
        if app_id != APPLICATION_ID:
            raise EvidenceError(
                f"{self.path!r} is not an evidence log (it holds other tables): keep evidence "
                "in its own file, e.g. EvidenceLog.beside(checkpoint_path)",
                path=self.path,
            )
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 1 and self._may_write():
            with immediate(conn):  # format 1 -> 2: the event keys (no event changes)
                if conn.execute("PRAGMA user_version").fetchone()[0] == 1:
                    conn.execute("ALTER TABLE evidence_events ADD COLUMN event_key TEXT")
                    conn.execute(_KEY_INDEX)
                    conn.execute(f"PRAGMA user_version = {FORMAT_VERSION}")
            version = FORMAT_VERSION
        if version > FORMAT_VERSION:
            raise EvidenceError(
                f"evidence log {self.path!r} has format {version}, newer than this graphflow "
                f"reads ({FORMAT_VERSION}); upgrade graphflow",
                path=self.path,
            )
