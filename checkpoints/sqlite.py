"""``SqliteCheckpointer``: durable checkpoints in one SQLite file.

Semantics are exactly ``MemoryCheckpointer``'s (the conformance suite checks both); this
module adds durability and multi-process safety. Decisions behind it:

- **One connection per object, used off the event loop.** Every method hands one function to
  ``anyio.to_thread.run_sync`` with this object's ``CapacityLimiter(1)``, so calls on one
  object are serialized and the event loop never waits for the disk. A ``threading.Lock``
  guards the connection as well, for an object shared by several event loops. The one
  exception is a private event loop of graphflow's sync API (``checkpoints.blocking``),
  where nothing else runs: there calls run inline, as a thread hop costs about as much as
  an fsync'd commit.
- **Durable commits.** WAL with ``synchronous=FULL`` (the default): ``commit`` returns after
  the WAL is fsync'd (promise 2). A lease alone, or a run's input checkpoint, waits for no
  fsync: the next durable commit covers it (``_ensure_sync``, ``_relaxed_txn``).
- **Room in the WAL.** Under the write lock, a new WAL and every durable commit keep zeros
  written ahead of the WAL's end, so that commits overwrite the file instead of growing it
  (an fsync then skips a filesystem-journal commit); ``_wal`` says why that is safe. One
  descriptor on the WAL is kept while the connection is open.
- **Every write is ``BEGIN IMMEDIATE``**, so the write lock is taken (waiting up to
  ``busy_timeout`` for other processes) before anything is read: the lease test-and-set and
  the head compare-and-set cannot race with another process, and a transaction never fails
  upgrading from read to write. Reads of several statements share one deferred transaction
  (one snapshot).
- **Values are serialized before the transaction begins**: a ``SerializationError`` writes
  nothing and the write lock is held only for SQL.
- **Damage is reported, never guessed around.** SQLite's "file is not a database" (for a
  file that was an SQLite file) and "database disk image is malformed", undecodable blobs
  and missing rows raise ``CorruptCheckpointError`` naming the thread (and the checkpoint
  when known).
- **Every record is checked when read.** Rows carry checksums of their columns and
  collections are anchored by counts (migration ``0002_checksums`` says which); the
  decoders (``_sqlite_rows``) then check types, ranges and shapes. A changed, erased,
  swapped or moved value raises ``CorruptCheckpointError``: it never becomes the state. The
  checks cost a ``zlib.crc32`` of each row read or written; a step's commit computes them
  from values it has (no SQL callback), and a write never gives a damaged row a new checksum.
- **Other SQLite errors get names too.** A path that cannot hold a store, or a file that is
  not one, raises ``StorePathError`` naming it (``_sqlite_path``); a store whose file or
  directory is not writable is opened read-only (a write raises ``ReadOnlyStoreError``); a
  write lock held by another client past ``busy_timeout`` raises ``StoreLockedError``
  (nothing written, retry the call).
- **No statement outlives a call**: multi-row reads ``fetchall()`` before decoding, so an
  error while decoding never leaves a statement open holding an old snapshot.
- **Lifecycle.** The file and its schema are created when the object is made (or, if that
  failed, by ``setup()``, which every method calls lazily and which reports the error);
  the schema changes only through ``checkpoints.migrations``. ``close()`` closes the
  connection; a later call opens it again. A process forked while the connection is open
  must not use this object (SQLite's lock bookkeeping is per process): close it first.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import sniffio

from checkpoints import _sqlite_path as _path
from checkpoints import _sqlite_read as read
from checkpoints import _sqlite_rows as rows
from checkpoints import _wal, migrations
from checkpoints._sqlite_runnable import SqliteRunnable
from checkpoints._sqlite_sql import (
    _DISPATCH,
    _INSERT_DECISION,
    _THREAD,
    RELEASE,
    RENEW,
    _commit,
    _dumps,
    _is_damage,
    _lease_existing,
    _RoomTxn,
    _take_lease,
    _Txn,
    insert_answers,
    next_seq,
)
from checkpoints.blocking import inline_io
from checkpoints.errors import (
    CheckpointError,
    CorruptCheckpointError,
    LeaseLostError,
    ReadOnlyStoreError,
    SerializationError,
    StoreLockedError,
    StorePathError,
)
from checkpoints.keeper import keeper
from checkpoints.models import (
    AnswerRecord,
    CallId,
    CheckpointId,
    CheckpointRecord,
    CommitBatch,
    DecisionRecord,
    DispatchRecord,
    PauseId,
    PauseRecord,
    ResumePoint,
    TaskId,
    TaskRecord,
    ThreadId,
    ThreadInfo,
    ThreadRecord,
    ThreadStatus,
    check_thread_status,
    now,
)

__all__ = ["SqliteCheckpointer"]

T = TypeVar("T")

_RELAXED_MAX_BYTES = 1 << 20
"""An input commit larger than this (in serialized values) is never run at ``OFF``: at
most ~300 pages, far below the 1,000 of SQLite's automatic checkpoint (see ``_relaxed_txn``)."""


def _on_event_loop() -> bool:
    """Whether an async library runs an event loop on this thread (anyio's own test)."""
    try:
        return sniffio.current_async_library() is not None
    except sniffio.AsyncLibraryNotFoundError:
        return False


class SqliteCheckpointer(SqliteRunnable):
    """A ``Checkpointer`` storing everything in one SQLite file, safe for many processes.

    Args:
        path: the database file; it and its tables are created when missing.
        busy_timeout: seconds to wait for another process's write transaction to end.
        synchronous: SQLite's ``synchronous`` pragma; ``FULL`` (default) fsyncs every commit.
            ``NORMAL`` is faster but a power loss may drop the last commits.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, busy_timeout: float = 5.0, synchronous: str = "FULL"
    ) -> None:
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
        self.path = os.fspath(path)
        # Where SQLite keeps the WAL: next to the file, symlinks resolved, whatever the
        # working directory becomes later.
        self._wal_path = os.path.realpath(self.path) + "-wal"
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous.upper()
        self._conn: sqlite3.Connection | None = None
        self._read_only: str | None = None  # what is not writable, when opened read-only
        self._wal_fd: int | None = None  # on the WAL, while the connection is open (_wal)
        self._sync_level = self.synchronous
        self._lock = threading.Lock()
        self._limiter = anyio.CapacityLimiter(1)
        # Open now, so that the first run does not pay for connecting and migrating, unless
        # this runs on an event loop's thread: the first call then opens the file off the
        # loop. A file that cannot be opened is reported by the first call.
        if not _on_event_loop():
            with contextlib.suppress(sqlite3.Error, CheckpointError):
                self._open()

    # -- connection ----------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        """Connect, set the pragmas and migrate the schema (the lazy ``setup``)."""
        keeper().start()  # its thread starts while this waits for the file (see keeper)
        read_only = _path.locate(self.path)  # a path that cannot serve raises, naming it
        if read_only is not None:
            conn = self._connect_read_only(read_only)
        else:
            conn = self._connect(self.path)
            try:
                # What the file holds is looked at first: a foreign file is left as it was.
                pending = migrations.pending(conn, self.path)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(f"PRAGMA synchronous={self.synchronous}")
                if pending:
                    with _Txn(conn):
                        migrations.apply(conn, self.path)
            except BaseException:
                conn.close()
                raise
        self._sync_level = self.synchronous
        self._read_only = read_only
        self._conn = conn
        # SQLite made the WAL as it first read (a read-only store writes none).
        self._wal_fd = _wal.open_fd(self._wal_path) if read_only is None else None
        return conn

    def _connect(self, target: str, *, uri: bool = False) -> sqlite3.Connection:
        conn = sqlite3.connect(
            target,
            timeout=self.busy_timeout,
            isolation_level=None,  # transactions are explicit (_Txn)
            check_same_thread=False,  # used by anyio's worker threads, one at a time
            uri=uri,
        )
        rows.install(conn)  # gf_crc(), for updates that recompute a row's checksum in SQL
        return conn

    def _connect_read_only(self, why: str) -> sqlite3.Connection:
        """Open a store whose file or directory is not writable (see ``_sqlite_path``)."""
        uris = _path.read_only_uris(self.path)
        for i, target in enumerate(uris):
            conn = self._connect(target, uri=True)
            try:
                if migrations.pending(conn, self.path):
                    raise ReadOnlyStoreError(
                        f"checkpoint store {self.path!r} was written by an older graphflow and "
                        f"must be upgraded, but it is read-only (its {why} is not writable): "
                        "open it once with write access",
                        path=self.path,
                    )
                return conn
            except sqlite3.OperationalError as e:
                conn.close()
                # No -shm index could be made beside it: try the next way (immutable).
                cannot = (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY)
                if i + 1 == len(uris) or e.sqlite_errorcode & 0xFF not in cannot:
                    raise
            except BaseException:
                conn.close()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _close_conn(self) -> None:
        """Close the connection (and the descriptor on its WAL)."""
        conn, fd = self._conn, self._wal_fd
        self._conn, self._wal_fd = None, None
        try:
            if fd is not None:
                os.close(fd)
        finally:
            if conn is not None:
                conn.close()

    def _drop_if_stuck(self) -> None:
        """Close a connection left inside a transaction (its ROLLBACK failed).

        Such a connection would keep the write lock and refuse every later BEGIN; closing
        it rolls back, and the next call opens a fresh one.
        """
        conn = self._conn
        if conn is not None and conn.in_transaction:
            with contextlib.suppress(sqlite3.Error, OSError):
                self._close_conn()

    def _call(self, thread_id: str | None, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the connection (in a worker thread); SQLite errors become typed ones."""
        with self._lock:
            try:
                conn = self._conn if self._conn is not None else self._open()
                if self._sync_level != self.synchronous:
                    self._ensure_sync(True)  # durable unless the call itself relaxes it
                return fn(conn)
            except sqlite3.DatabaseError as e:
                self._drop_if_stuck()
                raise self._typed(e, thread_id) from e
            except BaseException:
                self._drop_if_stuck()  # (a call that returns never leaves a transaction open)
                raise

    def _typed(self, e: sqlite3.DatabaseError, thread_id: str | None) -> Exception:
        """The ``CheckpointError`` that an SQLite error stands for (``e`` itself if none)."""
        path = self.path
        code = getattr(e, "sqlite_errorcode", 0) & 0xFF
        if code == sqlite3.SQLITE_BUSY:
            return StoreLockedError(path, self.busy_timeout)
        if code == sqlite3.SQLITE_READONLY:
            return _path.read_only_error(path, self._read_only or "file or directory")
        if code == sqlite3.SQLITE_NOTADB and _path.is_foreign(path):
            return _path.not_a_store(path, "it is not an SQLite file")
        if code == sqlite3.SQLITE_CANTOPEN:
            try:
                _path.locate(path)
            except StorePathError as found:
                return found
            return StorePathError(f"cannot open checkpoint store {path!r}: {e}", path=path)
        if not _is_damage(e):
            return e
        who = f"thread {thread_id!r}: " if thread_id is not None else ""
        return CorruptCheckpointError(
            f"{who}checkpoint store {path!r} is damaged ({e}); restore it from a backup",
            thread_id=thread_id,
        )

    async def _run(self, thread_id: str | None, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` off the event loop, one call of this object at a time."""
        if inline_io.get():
            # A private event loop (graphflow's sync API): a thread hop would only add latency.
            return self._call(thread_id, fn)
        return await anyio.to_thread.run_sync(self._call, thread_id, fn, limiter=self._limiter)

    async def setup(self) -> None:
        """Create the file and its tables, or migrate them; idempotent."""
        await self._run(None, lambda conn: None)

    async def close(self) -> None:
        """Close the connection; a later call opens it again."""

        def close() -> None:
            with self._lock:
                if self._conn is not None:
                    if self._sync_level == "OFF" != self.synchronous:
                        # closing checkpoints the WAL: never without its syncs
                        with contextlib.suppress(sqlite3.Error):
                            self._ensure_sync(True)
                    self._close_conn()

        if inline_io.get():  # a private event loop, as in _run
            close()
            return
        await anyio.to_thread.run_sync(close, limiter=self._limiter)

    # -- threads and leases ------------------------------------------------------------
    async def get_thread(self, thread_id: ThreadId) -> ThreadRecord | None:
        """The thread's row, or ``None`` when the thread does not exist (and has no
        checkpoints: a row missing from a thread that has some is damage)."""

        def run(conn: sqlite3.Connection) -> ThreadRecord | None:
            row = conn.execute(_THREAD, (thread_id,)).fetchone()
            if row is not None:
                return rows.thread(thread_id, row)
            with _Txn(conn, "BEGIN"):  # one snapshot for the look and the probe
                row = conn.execute(_THREAD, (thread_id,)).fetchone()
                if row is not None:
                    return rows.thread(thread_id, row)
                missing = read.thread_is_missing(conn, thread_id)
            if missing is not None:
                raise missing
            return None

        return await self._run(thread_id, run)

    def _ensure_sync(self, durable: bool, *, off: bool = False) -> None:
        """Set the connection's ``synchronous`` for the next transaction (outside of one).

        A transaction nothing durable depends on yet (a lease, a run's input checkpoint) is
        committed without waiting for an fsync: it is visible to other processes at once, and
        WAL keeps commits in order, so the next fsync'd commit makes it durable too. The level
        is changed before BEGIN (SQLite refuses it inside a transaction). ``off``: not even
        the WAL header's sync (see ``_relaxed_txn``).
        """
        if off:
            want = "OFF"
        elif durable or self.synchronous not in ("FULL", "EXTRA"):
            want = self.synchronous
        else:
            want = "NORMAL"
        if self._sync_level != want:
            assert self._conn is not None
            self._conn.execute(f"PRAGMA synchronous={want}")
            self._sync_level = want

    def _wal_is_empty(self) -> bool:
        return _wal.size(self._wal_fd) == 0  # (unknown: it may hold frames)

    @contextlib.contextmanager
    def _relaxed_txn(self, conn: sqlite3.Connection) -> Iterator[None]:
        """A write transaction that need not wait for an fsync: a lease alone (a power loss
        that drops it also ended its owner), or a run's input (see ``_ensure_sync``).

        When the WAL file is empty (a process's first write to a store no other process has
        open: every resume, or new run, in a new process) this transaction's frames start it,
        and at ``NORMAL`` SQLite would sync the new WAL header and its directory, the
        costliest sync of a resumed run. That sync guards against replaying an earlier
        cycle's frames after a power loss; an empty file has none, so the transaction runs at
        ``OFF``, and the next fsync'd commit (or checkpoint, which syncs the WAL first) makes
        header and directory durable. The transaction must stay far below SQLite's automatic
        checkpoint (1,000 pages), which would otherwise run at ``OFF``, unsynced, right after
        it: a lease writes a page or two, an input commit is relaxed only below
        ``_RELAXED_MAX_BYTES`` (``_commit_txn``). The emptiness is checked again under the
        write lock: another process may have written in between. The durable level is set
        again at once, so a checkpoint (on close, or SQLite's own) never runs at ``OFF``.
        Under the lock, a new WAL is also given room (``_wal.make_room``), so that the run's
        commits overwrite it rather than grow it, and each fsync costs less.
        """
        off = self.synchronous != "OFF" and self._wal_is_empty()
        self._ensure_sync(False, off=off)
        try:
            with _Txn(conn):
                if off and not self._wal_is_empty():  # another process wrote since the look
                    conn.execute("ROLLBACK")
                    self._ensure_sync(False)
                    conn.execute("BEGIN IMMEDIATE")
                elif off:  # a new WAL, and the write lock is ours: give it room (see _wal)
                    _wal.make_room(self._wal_fd)
                yield
        finally:
            if self._sync_level == "OFF" != self.synchronous:
                with contextlib.suppress(sqlite3.Error):  # else _call sets it before its next use
                    self._ensure_sync(True)

    async def acquire_lease(
        self, thread_id: ThreadId, owner: str, ttl: float, *, graph_name: str | None = None
    ) -> ThreadRecord:
        """Take the thread's lease, creating the thread row when missing.

        Read, test and write happen in one ``BEGIN IMMEDIATE`` transaction, so two processes
        never both get it.
        """

        def run(conn: sqlite3.Connection) -> ThreadRecord:
            with self._relaxed_txn(conn):
                return _take_lease(conn, thread_id, owner, ttl, graph_name)

        return await self._run(thread_id, run)

    async def renew_lease(self, thread_id: ThreadId, owner: str, ttl: float) -> None:
        """Extend ``owner``'s lease; ``LeaseLostError`` when it no longer holds it."""

        def run(conn: sqlite3.Connection) -> None:
            with self._relaxed_txn(conn):
                expires = now() + ttl
                crc = rows.lease_crc(thread_id, owner, expires)
                if conn.execute(RENEW, (expires, crc, thread_id, owner)).rowcount != 1:
                    self._check_thread_row(conn, thread_id)  # (a checksum that failed)
                    raise LeaseLostError(thread_id, owner)

        await self._run(thread_id, run)

    async def release_lease(self, thread_id: ThreadId, owner: str) -> None:
        """Give the lease up if ``owner`` holds it; otherwise do nothing."""

        def run(conn: sqlite3.Connection) -> None:
            with self._relaxed_txn(conn):
                crc = rows.lease_crc(thread_id, None, None)
                if conn.execute(RELEASE, (crc, thread_id, owner)).rowcount != 1:
                    self._check_thread_row(conn, thread_id)

        await self._run(thread_id, run)

    @staticmethod
    def _check_thread_row(conn: sqlite3.Connection, thread_id: str) -> None:
        """Raise if the thread row is damaged (an update of the lease matched nothing: the
        lease was not this owner's, or the row is damaged)."""
        row = conn.execute(_THREAD, (thread_id,)).fetchone()
        if row is not None:
            rows.thread(thread_id, row)

    async def resume_thread(
        self, thread_id: ThreadId, owner: str, ttl: float
    ) -> ResumePoint | None:
        """Take the lease of an existing thread and read what resuming it needs, in one
        transaction (see ``Checkpointer.resume_thread``)."""

        def run(conn: sqlite3.Connection) -> ResumePoint | None:
            with self._relaxed_txn(conn):  # an error rolls the lease back
                found = read.read_thread_and_head(conn, thread_id)
                if found is None or found[2] is None:
                    return None
                _, thread_row, ck, ck_row = found
                assert ck is not None
                thread = _lease_existing(conn, thread_id, owner, ttl, thread_row)
                channels = read.read_channels(
                    conn, thread_id, "", ck.channel_versions, ck.channel_bases
                )
                pauses, answers, tasks, memos = read.read_step_records(
                    conn, thread_id, thread_row, thread.pending_pause_ids, ck.id, ck_row
                )
                return ResumePoint(thread, ck, channels, pauses, answers, tasks, memos)

        return await self._run(thread_id, run)

    async def list_threads(self, status: ThreadStatus | None = None) -> list[ThreadInfo]:
        """Threads, most recently updated first (by status: a range of the status index),
        counted against the number of threads of that status."""
        if status is not None:
            check_thread_status(status)

        def run(conn: sqlite3.Connection) -> list[ThreadInfo]:
            with _Txn(conn, "BEGIN"):
                return read.list_threads(conn, status)

        return await self._run(None, run)

    # -- checkpoints and state -------------------------------------------------------------
    async def commit(self, thread_id: ThreadId, owner: str, batch: CommitBatch) -> None:
        """Write ``batch`` in one transaction (fsync'd unless ``batch.durable`` is false),
        fenced by the lease and the head."""
        txn = self._commit_txn
        await self._run(thread_id, lambda conn: _commit(conn, thread_id, owner, batch, txn))

    def _commit_txn(
        self, conn: sqlite3.Connection, durable: bool, size: Callable[[], int]
    ) -> AbstractContextManager[None]:
        """A commit's transaction: fsync'd (``_call`` set the durable level; room is kept
        in the WAL, see ``_wal``), or, for a commit nothing durable depends on yet (a run's
        input), relaxed like a lease's when it is small (see ``_relaxed_txn``); a larger one
        runs at ``NORMAL``."""
        if durable:
            return _RoomTxn(conn, self._wal_fd)
        if self._wal_is_empty() and size() < _RELAXED_MAX_BYTES:
            return self._relaxed_txn(conn)  # (which looks again, under the write lock)
        self._ensure_sync(False)
        return _Txn(conn)

    async def get_checkpoint(
        self, thread_id: ThreadId, ns: str = "", checkpoint_id: CheckpointId | None = None
    ) -> CheckpointRecord | None:
        """A checkpoint by id, or the newest of ``ns`` (the thread head for the root).

        A head whose checkpoint row is missing raises ``CorruptCheckpointError``: the thread
        is not mistaken for a new one.
        """

        def run(conn: sqlite3.Connection) -> CheckpointRecord | None:
            found = read.read_checkpoint(conn, thread_id, ns, checkpoint_id, check_miss=False)
            if found is not read.MISSED:  # (one statement: its own snapshot)
                return found
            with _Txn(conn, "BEGIN"):
                return read.read_checkpoint(conn, thread_id, ns, checkpoint_id)

        return await self._run(thread_id, run)

    async def list_checkpoints(
        self, thread_id: ThreadId, ns: str = "", *, limit: int | None = None
    ) -> list[CheckpointRecord]:
        """Checkpoints of one namespace, newest first."""

        def run(conn: sqlite3.Connection) -> list[CheckpointRecord]:
            with _Txn(conn, "BEGIN"):
                return read.list_checkpoints(conn, thread_id, ns, limit)

        return await self._run(thread_id, run)

    async def load_channels(
        self,
        thread_id: ThreadId,
        ns: str,
        versions: Mapping[str, int],
        bases: Mapping[str, tuple[int, int]],
    ) -> dict[str, Any]:
        """Channel values at ``versions``: one indexed query per channel, one snapshot."""

        def run(conn: sqlite3.Connection) -> dict[str, Any]:
            with _Txn(conn, "BEGIN"):
                return read.read_channels(conn, thread_id, ns, versions, bases)

        return await self._run(thread_id, run)

    async def load_tasks(
        self, thread_id: ThreadId, ns: str, checkpoint_id: CheckpointId
    ) -> dict[TaskId, TaskRecord]:
        """Task records of one checkpoint, by task id, in the order first written."""
        return await self._run(
            thread_id, lambda conn: read.read_tasks(conn, thread_id, ns, checkpoint_id)
        )

    async def load_memos(
        self, thread_id: ThreadId, ns: str, checkpoint_id: CheckpointId
    ) -> dict[TaskId, dict[str, Any]]:
        """Memoized step results of one checkpoint's tasks: task id -> key -> value."""
        return await self._run(
            thread_id, lambda conn: read.read_memos(conn, thread_id, ns, checkpoint_id)
        )

    # -- pauses and answers ------------------------------------------------------------
    async def get_pauses(
        self, thread_id: ThreadId, pause_ids: Sequence[PauseId]
    ) -> list[PauseRecord]:
        """Pause records by id, in the order asked; unknown ids are left out."""

        def run(conn: sqlite3.Connection) -> list[PauseRecord]:
            with _Txn(conn, "BEGIN"):
                return read.read_pauses(conn, thread_id, pause_ids)

        return await self._run(thread_id, run)

    async def list_pauses(self, thread_id: ThreadId) -> list[PauseRecord]:
        """Every pause record of the thread, oldest first."""
        return await self._run(thread_id, lambda conn: read.list_pauses(conn, thread_id))

    async def put_answers(self, answers: Sequence[AnswerRecord]) -> None:
        """Append answers in one transaction (all are serialized first)."""
        blobs = [(a, _dumps(a.value, key=f"answer to {a.pause_id!r}")) for a in answers]

        def run(conn: sqlite3.Connection) -> None:
            with _Txn(conn):
                insert_answers(conn, blobs)

        if blobs:
            await self._run(blobs[0][0].thread_id, run)

    async def load_answers(
        self, thread_id: ThreadId, pause_ids: Sequence[PauseId] | None = None
    ) -> dict[PauseId, AnswerRecord]:
        """The latest answer per pause (all pauses of the thread when ``pause_ids`` is None)."""
        wanted = {str(p) for p in pause_ids} if pause_ids is not None else None
        return await self._run(thread_id, lambda conn: read.read_answers(conn, thread_id, wanted))

    # -- decisions and dispatch ------------------------------------------------------------
    async def put_decisions(self, decisions: Sequence[DecisionRecord]) -> None:
        """Append decisions in one transaction (every ``extra`` is serialized first)."""
        extras = [
            _dumps(d.extra, key=f"extra of decision {d.call_id!r}") if d.extra else None
            for d in decisions
        ]

        def run(conn: sqlite3.Connection) -> None:
            with _Txn(conn):
                seq = next_seq(conn, "gf_decisions")
                conn.executemany(
                    _INSERT_DECISION,
                    [rows.decision_row(seq + i, d, x)
                     for i, (d, x) in enumerate(zip(decisions, extras, strict=True))],
                )  # fmt: skip

        if decisions:
            await self._run(decisions[0].thread_id, run)

    async def list_decisions(
        self, thread_id: ThreadId, call_id: CallId | None = None
    ) -> list[DecisionRecord]:
        """Decisions of a thread (optionally of one call), oldest first."""
        return await self._run(
            thread_id, lambda conn: read.list_decisions(conn, thread_id, call_id)
        )

    async def claim_dispatch(self, record: DispatchRecord) -> bool:
        """Insert the claim; False when the primary key says it was already claimed."""
        r = record
        # Like MemoryCheckpointer, a claim stores no result (None is stored as NULL).
        claimed, completed = rows.time_value(r.claimed_at), rows.time_value(r.completed_at)
        assert claimed is not None
        crc = rows.dispatch_crc(r.thread_id, r.call_id, r.tool, r.fingerprint, r.owner, r.status,
                                None, r.error, claimed, completed)  # fmt: skip
        row = (r.thread_id, r.call_id, r.tool, r.fingerprint, r.owner, r.status, None, r.error,
               claimed, completed, crc)  # fmt: skip

        def run(conn: sqlite3.Connection) -> bool:
            with _Txn(conn):
                cur = conn.execute(
                    "INSERT INTO gf_dispatches VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (thread_id, call_id) DO NOTHING",
                    row,
                )
                return cur.rowcount == 1

        return await self._run(r.thread_id, run)

    async def complete_dispatch(
        self,
        thread_id: ThreadId,
        call_id: CallId,
        *,
        status: str,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        """Record a claimed call's outcome (``succeeded`` or ``failed``)."""
        # Checks run in MemoryCheckpointer's order: claimed?, status, then the result.
        problem: SerializationError | None = None
        blob: bytes | None = None
        try:
            if result is not None:
                blob = _dumps(result, key=f"result of tool call {call_id!r}")
        except SerializationError as e:
            problem = e

        def run(conn: sqlite3.Connection) -> None:
            with _Txn(conn):
                found = conn.execute(_DISPATCH, (thread_id, call_id)).fetchone()
                if found is None:
                    self._check_dispatch_count(conn, thread_id)
                    raise CorruptCheckpointError(
                        f"tool call {call_id!r} of thread {thread_id!r} was never claimed",
                        thread_id=thread_id,
                    )
                claim = rows.dispatch(thread_id, call_id, found)  # (damage raises here)
                if status not in ("succeeded", "failed"):
                    raise ValueError(
                        f"dispatch status must be 'succeeded' or 'failed', not {status!r}"
                    )
                if problem is not None:
                    raise problem
                done = now()
                crc = rows.dispatch_crc(
                    thread_id, call_id, claim.tool, claim.fingerprint, claim.owner, status,
                    blob, error, claim.claimed_at, done,
                )  # fmt: skip
                conn.execute(
                    "UPDATE gf_dispatches SET status = ?, result = ?, error = ?,"
                    " completed_at = ?, crc = ? WHERE thread_id = ? AND call_id = ?",
                    (status, blob, error, done, crc, thread_id, call_id),
                )

        await self._run(thread_id, run)

    async def get_dispatch(self, thread_id: ThreadId, call_id: CallId) -> DispatchRecord | None:
        """The dispatch record of a call, with its outcome when known."""

        def run(conn: sqlite3.Connection) -> DispatchRecord | None:
            r = conn.execute(_DISPATCH, (thread_id, call_id)).fetchone()
            if r is not None:
                return rows.dispatch(thread_id, call_id, r)
            with _Txn(conn, "BEGIN"):
                r = conn.execute(_DISPATCH, (thread_id, call_id)).fetchone()
                if r is not None:
                    return rows.dispatch(thread_id, call_id, r)
                self._check_dispatch_count(conn, thread_id)
            return None

        return await self._run(thread_id, run)

    @staticmethod
    def _check_dispatch_count(conn: sqlite3.Connection, thread_id: str) -> None:
        """After a dispatch was not found: damage if the thread lost one, or holds one whose
        key changed (a claim is the at-most-once guard: a lost claim must never let the call
        run again)."""
        found = conn.execute(
            f"SELECT call_id, {rows.DISPATCH_COLS} FROM gf_dispatches WHERE thread_id = ?",
            (thread_id,),
        ).fetchall()
        for row in found:  # a claim whose key changed fails its checksum
            rows.dispatch(thread_id, row[0], row[1:])
        anchor = conn.execute(
            "SELECT n_dispatches FROM gf_threads WHERE thread_id = ?", (thread_id,)
        ).fetchone()
        if anchor is not None:
            rows.count(thread_id, "dispatches", anchor[0], len(found))
