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
  the WAL is fsync'd (promise 2).
- **Every write is ``BEGIN IMMEDIATE``**, so the write lock is taken (waiting up to
  ``busy_timeout`` for other processes) before anything is read: the lease test-and-set and
  the head compare-and-set cannot race with another process, and a transaction never fails
  upgrading from read to write. Reads of several statements share one deferred transaction
  (one snapshot).
- **Values are serialized before the transaction begins**: a ``SerializationError`` writes
  nothing and the write lock is held only for SQL.
- **Damage is reported, never guessed around.** SQLite's "file is not a database" and
  "database disk image is malformed", undecodable blobs and missing rows raise
  ``CorruptCheckpointError`` naming the thread (and the checkpoint when known).
- **No statement outlives a call**: multi-row reads ``fetchall()`` before decoding, so an
  error while decoding never leaves a statement open holding an old snapshot.
- **Lifecycle.** The file and its schema are created when the object is made (or, if that
  failed, by ``setup()``, which every method calls lazily and which reports the error);
  the schema changes only through ``checkpoints.migrations``. ``close()`` closes the
  connection; a later call opens it again.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from checkpoints import migrations, serde
from checkpoints.blocking import inline_io
from checkpoints.errors import (
    CheckpointError,
    CorruptCheckpointError,
    HeadConflictError,
    LeaseHeldError,
    LeaseLostError,
    SerializationError,
)
from checkpoints.lease import lease_free
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
    TaskId,
    TaskRecord,
    TaskSpec,
    ThreadId,
    ThreadInfo,
    ThreadRecord,
    ThreadStatus,
    now,
)

__all__ = ["SqliteCheckpointer"]

T = TypeVar("T")
_dumps = serde.dumps

_THREAD = (
    "SELECT status, head, graph_name, lease_owner, lease_expires_at, pending_pause_ids,"
    " created_at, updated_at FROM gf_threads WHERE thread_id = ?"
)
_NEW_THREAD = (
    "INSERT INTO gf_threads (thread_id, status, graph_name, lease_owner, lease_expires_at,"
    " pending_count, created_at, updated_at) VALUES (?, 'running', ?, ?, ?, 0, ?, ?)"
)
_INFO = (
    "SELECT thread_id, status, updated_at, pending_count, graph_name, head, created_at"
    " FROM gf_threads"
)
_CKPT = (
    "SELECT id, parent_id, step, source, channel_versions, channel_bases, body, created_at"
    " FROM gf_checkpoints"
)
_UPSERT_TASK = (
    "INSERT INTO gf_tasks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (thread_id, ns, checkpoint_id, task_id) DO UPDATE SET node = excluded.node,"
    " status = excluded.status, attempts = excluded.attempts, started_at = excluded.started_at,"
    " ended_at = excluded.ended_at, error = excluded.error, body = excluded.body"
)
_UPSERT_MEMO = (
    "INSERT INTO gf_memos VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT"
    " (thread_id, ns, checkpoint_id, task_id, key) DO UPDATE SET value = excluded.value,"
    " created_at = excluded.created_at"
)
_UPSERT_PAUSE = (
    "INSERT INTO gf_pauses VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (thread_id, id) DO UPDATE"
    " SET ns = excluded.ns, checkpoint_id = excluded.checkpoint_id, task_id = excluded.task_id,"
    " node = excluded.node, kind = excluded.kind, value = excluded.value,"
    " created_at = excluded.created_at"
)
_PAUSE = "SELECT id, ns, checkpoint_id, task_id, node, kind, value, created_at FROM gf_pauses"
_INSERT_ANSWER = (
    "INSERT INTO gf_answers (thread_id, pause_id, value, by, reason, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
_DECISION = (
    "SELECT thread_id, call_id, verdict, fingerprint, by, reason, applied, note, created_at"
    " FROM gf_decisions WHERE thread_id = ?"
)
_DISPATCH = (
    "SELECT thread_id, call_id, tool, fingerprint, owner, status, result, error, claimed_at,"
    " completed_at FROM gf_dispatches WHERE thread_id = ? AND call_id = ?"
)


@functools.cache
def _fenced_update(set_head: bool, update: bool, check_head: bool, release: bool) -> str:
    """The statement that opens a commit's writes (cached: a few shapes, on the hot path).

    It returns a row only if ``owner`` holds the lease and, with ``check_head``, the head is
    the expected one. It rewrites the thread row only for what changes: the head, the
    status (``updated_at`` moves with it), the lease on release. Nothing to change: a read.
    """
    sets = []
    if set_head:
        sets.append("head = ?")
    if update:
        sets.append(
            "updated_at = ?, status = ?, pending_pause_ids = ?, pending_count = ?,"
            " graph_name = coalesce(?, graph_name)"
        )
    if release:
        sets.append("lease_owner = NULL, lease_expires_at = NULL")
    where = "thread_id = ? AND lease_owner = ?" + (" AND head IS ?" if check_head else "")
    if not sets:
        return f"SELECT 1 FROM gf_threads WHERE {where}"
    return f"UPDATE gf_threads SET {', '.join(sets)} WHERE {where} RETURNING 1"


def _take_lease(
    conn: sqlite3.Connection, thread_id: str, owner: str, ttl: float, graph_name: str | None
) -> ThreadRecord:
    """Take the lease inside the caller's write transaction, creating the row if missing."""
    t = now()
    row = conn.execute(_THREAD, (thread_id,)).fetchone()
    if row is None:
        conn.execute(_NEW_THREAD, (thread_id, graph_name, owner, t + ttl, t, t))
        tid = ThreadId(thread_id)
        return ThreadRecord(tid, "running", None, graph_name, owner, t + ttl, (), t, t)
    rec = _thread_record(thread_id, row)
    if not lease_free(rec.lease_owner, rec.lease_expires_at, owner, t):
        raise LeaseHeldError(thread_id, rec.lease_owner)
    conn.execute(
        "UPDATE gf_threads SET lease_owner = ?, lease_expires_at = ? WHERE thread_id = ?",
        (owner, t + ttl, thread_id),
    )
    rec.lease_owner, rec.lease_expires_at = owner, t + ttl
    return rec


class _Txn:
    """``with _Txn(conn):`` one transaction, committed on success, rolled back on any error.

    ``BEGIN IMMEDIATE`` (the default) for writes; ``BEGIN`` (deferred) for multi-statement
    reads. A plain class rather than ``contextlib.contextmanager``: it is on the hot path.
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
                self._rollback()
                raise
        self._rollback()

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            # A failed rollback must not hide the error that caused it.
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    """Whether a sqlite3 error means the file is damaged (not busy, locked or misused).

    Damaged pages or header (SQLITE_CORRUPT, SQLITE_NOTADB), or tables missing although the
    file says its schema is complete.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return type(exc) is sqlite3.DatabaseError
    return code & 0xFF in (11, 26) or str(exc).startswith(("no such table", "no such column"))


def _load(blob: bytes, thread_id: str, checkpoint_id: str | None, what: str) -> Any:
    try:
        return serde.loads(blob)
    except CorruptCheckpointError as e:
        raise CorruptCheckpointError(
            f"cannot decode {what} of thread {thread_id!r} checkpoint {checkpoint_id!r}: {e}",
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
        ) from e


def _bad_shape(
    thread_id: str, checkpoint_id: str | None, what: str, e: Exception
) -> CorruptCheckpointError:
    """A blob that decodes, but not to what was stored there (damage or a foreign writer)."""
    return CorruptCheckpointError(
        f"{what} of thread {thread_id!r} checkpoint {checkpoint_id!r} has an invalid shape: {e}",
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
    )


def _missing(thread_id: str, channel: str, version: int) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"thread {thread_id!r}: stored value of channel {channel!r} at version {version} is "
        "missing",
        thread_id=thread_id,
    )


def _channel(
    conn: sqlite3.Connection,
    thread_id: str,
    ns: str,
    channel: str,
    version: int,
    base: tuple[int, int] | None,
) -> Any:
    """One channel's value: its row at ``version``, or its set row + append chain."""
    what = f"channel {channel!r}"
    if base is None:
        sql = (
            "SELECT coalesce(c.blob, b.data) FROM gf_channels c LEFT JOIN gf_blobs b"
            " ON b.id = c.blob_id"
            " WHERE thread_id=? AND ns=? AND channel=? AND base=? AND version=?"
        )
        row = conn.execute(sql, (thread_id, ns, channel, version, version)).fetchone()
        if row is None:
            raise _missing(thread_id, channel, version)
        return _load(row[0], thread_id, None, what)
    sql = (
        "SELECT kind, coalesce(c.blob, b.data) FROM gf_channels c LEFT JOIN gf_blobs b"
        " ON b.id = c.blob_id WHERE thread_id = ? AND ns = ? AND channel = ?"
        " AND base = ? AND version <= ? ORDER BY version"
    )
    value: list[Any] = []
    count = 0
    try:
        for kind, blob in conn.execute(sql, (thread_id, ns, channel, base[0], version)).fetchall():
            if kind == "set":  # only the set row at the base is in this range
                value = list(_load(blob, thread_id, None, what))
            else:
                value.extend(_load(blob, thread_id, None, what))
                count += 1
    except TypeError as e:
        raise _bad_shape(thread_id, None, what, e) from e
    if count != base[1]:
        raise _missing(thread_id, channel, version)
    return value


def _thread_record(thread_id: str, row: Any) -> ThreadRecord:
    ids: tuple[PauseId, ...] = ()
    if row[5] is not None:
        found = _load(row[5], thread_id, row[1], "pending pauses")
        if type(found) is not list:
            raise _bad_shape(thread_id, row[1], "pending pauses", TypeError(type(found)))
        ids = tuple(found)
    return ThreadRecord(
        ThreadId(thread_id), row[0], row[1], row[2], row[3], row[4], ids, row[6], row[7]
    )


def _checkpoint(thread_id: str, ns: str, row: Any) -> CheckpointRecord:
    cid = row[0]
    versions = _load(row[4], thread_id, cid, "checkpoint")
    bases = {} if row[5] is None else _load(row[5], thread_id, cid, "checkpoint")
    body = _load(row[6], thread_id, cid, "checkpoint")
    try:
        frontier, metadata = body
        if not (
            type(versions) is dict
            and all(type(v) is int for v in versions.values())
            and type(bases) is dict
            and type(frontier) is list
            and type(metadata) is dict
        ):
            raise TypeError("versions, bases, frontier or metadata of the wrong type")
        return CheckpointRecord(
            id=cid,
            thread_id=ThreadId(thread_id),
            ns=ns,
            parent_id=row[1],
            step=row[2],
            source=row[3],
            channel_versions=versions,
            frontier=tuple(TaskSpec(TaskId(i), n, h, a) for i, n, h, a in frontier),
            channel_bases={k: (b, c) for k, (b, c) in bases.items()},
            metadata=metadata,
            created_at=row[7],
        )
    except (TypeError, ValueError, AttributeError) as e:
        raise _bad_shape(thread_id, cid, "checkpoint", e) from e


def _pause(thread_id: str, row: Any) -> PauseRecord:
    value = _load(row[6], thread_id, row[2], f"pause {row[0]!r}")
    return PauseRecord(
        row[0], ThreadId(thread_id), row[1], row[2], row[3], row[4], row[5], value, row[7]
    )


def _fenced_off(
    conn: sqlite3.Connection, thread_id: str, owner: str, batch: CommitBatch
) -> CheckpointError | None:
    """The error a fenced commit hits (the lease first, then the head), if any."""
    row = conn.execute("SELECT lease_owner, head FROM gf_threads WHERE thread_id = ?", (thread_id,))
    found = row.fetchone()
    if found is None or found[0] != owner:
        return LeaseLostError(thread_id, owner)
    if batch.check_head and found[1] != batch.expected_head:
        return HeadConflictError(thread_id, batch.expected_head, found[1])
    return None


_INLINE_MAX = 900
"""Serialized channel values larger than this go to gf_blobs (see migrations._initial)."""


def _commit(
    conn: sqlite3.Connection,
    thread_id: str,
    owner: str,
    batch: CommitBatch,
    ensure_sync: Callable[[bool], None],
) -> None:
    """The body of ``commit``: serialize everything, then one write transaction."""
    ns = batch.ns
    ck = batch.checkpoint
    upd = batch.thread
    ck_row: Any = None
    try:
        tasks = [
            (thread_id, ns, t.checkpoint_id, t.task_id, t.node, t.status, t.attempts,
             t.started_at, t.ended_at, t.error,
             None if t.writes is None and t.routes is None
             else _dumps([t.writes, t.routes], key=f"writes of task {t.node!r}"))
            for t in batch.tasks
        ]  # fmt: skip
        memos = [
            (thread_id, ns, m.checkpoint_id, m.task_id, m.key,
             _dumps(m.value, key=f"step {m.key!r}"), m.created_at)
            for m in batch.memos
        ]  # fmt: skip
        chans = [
            (thread_id, ns, c.channel, c.version, c.kind,
             c.version if c.kind == "set" else c.base, _dumps(c.value, key=c.channel))
            for c in batch.channels
        ]  # fmt: skip
        large = [i for i, row in enumerate(chans) if len(row[6]) > _INLINE_MAX]
        pauses = [
            (thread_id, p.id, p.ns, p.checkpoint_id, p.task_id, p.node, p.kind,
             _dumps(p.value, key=f"pause {p.id!r}"), p.created_at)
            for p in batch.pauses
        ]  # fmt: skip
        answers = [
            (thread_id, a.pause_id, _dumps(a.value, key=f"answer to {a.pause_id!r}"), a.by,
             a.reason, a.created_at)
            for a in batch.answers
        ]  # fmt: skip
        if ck is not None:
            try:
                # TaskSpecs as plain lists: msgpack packs them in C, several times faster.
                body = _dumps(
                    [[[s.id, s.node, s.has_arg, s.arg] for s in ck.frontier], ck.metadata]
                )
            except SerializationError:
                _dumps((ck.frontier, ck.metadata), key="frontier")  # MemoryCheckpointer's message
                raise
            ck_row = (
                thread_id, ns, ck.id, ck.parent_id, ck.step, ck.source,
                _dumps(ck.channel_versions, key="channel_versions"),
                _dumps({k: list(v) for k, v in ck.channel_bases.items()}, key="channel_bases")
                if ck.channel_bases else None,
                body, ck.created_at,
            )  # fmt: skip
        ids = upd.pending_pause_ids if upd is not None else ()
        pending = _dumps(list(ids), key="pending_pause_ids") if ids else None
    except SerializationError:
        fenced: CheckpointError | None
        with _Txn(conn, "BEGIN"):
            if batch.acquire_ttl is not None:  # the commit would take the lease: is it free?
                row = conn.execute(_THREAD, (thread_id,)).fetchone()
                rec = _thread_record(thread_id, row) if row is not None else None
                held = rec is not None and not lease_free(
                    rec.lease_owner, rec.lease_expires_at, owner, now()
                )
                fenced = LeaseHeldError(thread_id, rec.lease_owner) if held and rec else None
            else:
                fenced = _fenced_off(conn, thread_id, owner, batch)
        if fenced is not None:  # fencing errors come first, as in MemoryCheckpointer
            raise fenced from None
        raise

    set_head = ck is not None and ns == ""
    sql = _fenced_update(set_head, upd is not None, batch.check_head, batch.release)
    params: list[Any] = []
    if set_head:
        params.append(ck.id)  # type: ignore[union-attr]
    if upd is not None:
        params += (now(), upd.status, pending, len(ids), upd.graph_name)
    params += (thread_id, owner)
    if batch.check_head:
        params.append(batch.expected_head)
    ensure_sync(batch.durable)  # before BEGIN: nothing runs after the COMMIT
    _write(conn, thread_id, owner, batch, sql, params, tasks, memos, ck_row, chans, large,
           pauses, answers)  # fmt: skip


def _write(
    conn: sqlite3.Connection,
    thread_id: str,
    owner: str,
    batch: CommitBatch,
    sql: str,
    params: list[Any],
    tasks: list[Any],
    memos: list[Any],
    ck_row: Any,
    chans: list[Any],
    large: list[int],
    pauses: list[Any],
    answers: list[Any],
) -> None:
    """The write transaction of ``_commit`` (everything already serialized)."""
    upd = batch.thread
    ck = batch.checkpoint
    with _Txn(conn):
        if batch.acquire_ttl is not None:
            _take_lease(conn, thread_id, owner, batch.acquire_ttl, upd.graph_name if upd else None)
        if not conn.execute(sql, params).fetchall():
            raise _fenced_off(conn, thread_id, owner, batch) or LeaseLostError(thread_id, owner)
        if tasks:
            conn.executemany(_UPSERT_TASK, tasks)
        if memos:
            conn.executemany(_UPSERT_MEMO, memos)
        if ck is not None:
            conn.execute(
                "INSERT OR REPLACE INTO gf_checkpoints VALUES (?,?,?,?,?,?,?,?,?,?)", ck_row
            )
        if chans:
            rows: list[tuple[Any, ...]] = [(*row, None) for row in chans]
            for i in large:
                cur = conn.execute("INSERT INTO gf_blobs (data) VALUES (?)", (chans[i][6],))
                rows[i] = (*chans[i][:6], None, cur.lastrowid)
            conn.executemany("INSERT OR REPLACE INTO gf_channels VALUES (?,?,?,?,?,?,?,?)", rows)
        if pauses:
            conn.executemany(_UPSERT_PAUSE, pauses)
        if answers:
            conn.executemany(_INSERT_ANSWER, answers)


class SqliteCheckpointer:
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
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous.upper()
        self._conn: sqlite3.Connection | None = None
        self._sync_level = self.synchronous
        self._lock = threading.Lock()
        self._limiter = anyio.CapacityLimiter(1)
        # Open now, so that the first run does not pay for connecting and migrating. A file
        # that cannot be opened is reported by the first call, which knows the thread.
        with contextlib.suppress(sqlite3.Error, CheckpointError):
            self._open()

    # -- connection ----------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        """Connect, set the pragmas and migrate the schema (the lazy ``setup``)."""
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout,
            isolation_level=None,  # transactions are explicit (_Txn)
            check_same_thread=False,  # used by anyio's worker threads, one at a time
        )
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            self._sync_level = self.synchronous
            if migrations.pending(conn, self.path):
                with _Txn(conn):
                    migrations.apply(conn, self.path)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _drop_if_stuck(self) -> None:
        """Close a connection left inside a transaction (its ROLLBACK failed).

        Such a connection would keep the write lock and refuse every later BEGIN; closing
        it rolls back, and the next call opens a fresh one.
        """
        conn = self._conn
        if conn is not None and conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
            self._conn = None

    def _call(self, thread_id: str | None, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the connection (in a worker thread); damage becomes an error."""
        with self._lock:
            try:
                conn = self._conn if self._conn is not None else self._open()
                self._ensure_sync(True)  # durable unless the call itself relaxes it
                return fn(conn)
            except sqlite3.DatabaseError as e:
                if not _is_damage(e):
                    raise
                who = f"thread {thread_id!r}: " if thread_id is not None else ""
                raise CorruptCheckpointError(
                    f"{who}checkpoint store {self.path!r} is damaged ({e}); restore it from a "
                    "backup",
                    thread_id=thread_id,
                ) from e
            finally:
                self._drop_if_stuck()

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
                    self._conn.close()
                    self._conn = None

        await anyio.to_thread.run_sync(close, limiter=self._limiter)

    # -- threads and leases ------------------------------------------------------------
    async def get_thread(self, thread_id: ThreadId) -> ThreadRecord | None:
        """The thread's row, or ``None`` when the thread does not exist."""

        def run(conn: sqlite3.Connection) -> ThreadRecord | None:
            row = conn.execute(_THREAD, (thread_id,)).fetchone()
            return _thread_record(thread_id, row) if row is not None else None

        return await self._run(thread_id, run)

    def _ensure_sync(self, durable: bool) -> None:
        """Set the connection's ``synchronous`` for the next transaction (outside of one).

        A transaction nothing durable depends on yet (a lease, a run's input checkpoint) is
        committed without waiting for an fsync: it is visible to other processes at once, and
        WAL keeps commits in order, so the next fsync'd commit makes it durable too. The level
        is changed before BEGIN, never after COMMIT, so nothing runs once a commit is done.
        """
        want = (
            self.synchronous if durable or self.synchronous not in ("FULL", "EXTRA") else "NORMAL"
        )
        if self._sync_level != want:
            assert self._conn is not None
            self._conn.execute(f"PRAGMA synchronous={want}")
            self._sync_level = want

    @contextlib.contextmanager
    def _lease_txn(self, conn: sqlite3.Connection) -> Iterator[None]:
        """A write transaction for a lease alone: it need not wait for an fsync (a power loss
        that drops it also ended its owner; see ``_ensure_sync``)."""
        self._ensure_sync(False)
        with _Txn(conn):
            yield

    async def acquire_lease(
        self, thread_id: ThreadId, owner: str, ttl: float, *, graph_name: str | None = None
    ) -> ThreadRecord:
        """Take the thread's lease, creating the thread row when missing.

        Read, test and write happen in one ``BEGIN IMMEDIATE`` transaction, so two processes
        never both get it.
        """

        def run(conn: sqlite3.Connection) -> ThreadRecord:
            with self._lease_txn(conn):
                return _take_lease(conn, thread_id, owner, ttl, graph_name)

        return await self._run(thread_id, run)

    async def renew_lease(self, thread_id: ThreadId, owner: str, ttl: float) -> None:
        """Extend ``owner``'s lease; ``LeaseLostError`` when it no longer holds it."""

        def run(conn: sqlite3.Connection) -> None:
            with self._lease_txn(conn):
                sql = (
                    "UPDATE gf_threads SET lease_expires_at = ? WHERE thread_id = ?"
                    " AND lease_owner = ?"
                )
                if conn.execute(sql, (now() + ttl, thread_id, owner)).rowcount != 1:
                    raise LeaseLostError(thread_id, owner)

        await self._run(thread_id, run)

    async def release_lease(self, thread_id: ThreadId, owner: str) -> None:
        """Give the lease up if ``owner`` holds it; otherwise do nothing."""

        def run(conn: sqlite3.Connection) -> None:
            with self._lease_txn(conn):
                conn.execute(
                    "UPDATE gf_threads SET lease_owner = NULL, lease_expires_at = NULL"
                    " WHERE thread_id = ? AND lease_owner = ?",
                    (thread_id, owner),
                )

        await self._run(thread_id, run)

    async def list_threads(self, status: ThreadStatus | None = None) -> list[ThreadInfo]:
        """Threads, most recently updated first (by status: a range of the status index)."""

        def run(conn: sqlite3.Connection) -> list[ThreadInfo]:
            order = " ORDER BY updated_at DESC, thread_id DESC"
            if status is None:
                rows = conn.execute(_INFO + order).fetchall()
            else:  # a backwards range of the threads_by_status index
                rows = conn.execute(_INFO + " WHERE status = ?" + order, (status,)).fetchall()
            return [ThreadInfo(*row) for row in rows]

        return await self._run(None, run)

    # -- checkpoints and state -------------------------------------------------------------
    async def commit(self, thread_id: ThreadId, owner: str, batch: CommitBatch) -> None:
        """Write ``batch`` in one transaction (fsync'd unless ``batch.durable`` is false),
        fenced by the lease and the head."""
        ensure = self._ensure_sync
        await self._run(thread_id, lambda conn: _commit(conn, thread_id, owner, batch, ensure))

    async def get_checkpoint(
        self, thread_id: ThreadId, ns: str = "", checkpoint_id: CheckpointId | None = None
    ) -> CheckpointRecord | None:
        """A checkpoint by id, or the newest of ``ns`` (the thread head for the root).

        A head whose checkpoint row is missing raises ``CorruptCheckpointError``: the thread
        is not mistaken for a new one.
        """

        def run(conn: sqlite3.Connection) -> CheckpointRecord | None:
            key = (thread_id, ns)
            if checkpoint_id is not None:
                sql = _CKPT + " WHERE thread_id = ? AND ns = ? AND id = ?"
                row = conn.execute(sql, (*key, checkpoint_id)).fetchone()
            elif ns != "":
                sql = _CKPT + " WHERE thread_id = ? AND ns = ? ORDER BY id DESC LIMIT 1"
                row = conn.execute(sql, key).fetchone()
            else:  # the root's newest is the thread head
                sql = (
                    "SELECT t.head, c.id, c.parent_id, c.step, c.source, c.channel_versions,"
                    " c.channel_bases, c.body, c.created_at FROM gf_threads t LEFT JOIN"
                    " gf_checkpoints c ON c.thread_id = t.thread_id AND c.ns = '' AND c.id = t.head"
                    " WHERE t.thread_id = ?"
                )
                found = conn.execute(sql, (thread_id,)).fetchone()
                if found is None or found[0] is None:
                    return None
                if found[1] is None:  # a head without its checkpoint: never guess
                    raise CorruptCheckpointError(
                        f"thread {thread_id!r}: head checkpoint {found[0]!r} is missing",
                        thread_id=thread_id,
                        checkpoint_id=found[0],
                    )
                row = found[1:]
            return _checkpoint(thread_id, ns, row) if row is not None else None

        return await self._run(thread_id, run)

    async def list_checkpoints(
        self, thread_id: ThreadId, ns: str = "", *, limit: int | None = None
    ) -> list[CheckpointRecord]:
        """Checkpoints of one namespace, newest first."""

        def run(conn: sqlite3.Connection) -> list[CheckpointRecord]:
            sql = _CKPT + " WHERE thread_id = ? AND ns = ? ORDER BY id DESC LIMIT ?"
            sql_limit = limit if limit is not None and limit >= 0 else -1
            rows = conn.execute(sql, (thread_id, ns, sql_limit)).fetchall()
            if limit is not None and limit < 0:
                rows = rows[:limit]  # Python slicing, as MemoryCheckpointer does
            return [_checkpoint(thread_id, ns, r) for r in rows]

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
                return {
                    channel: _channel(conn, thread_id, ns, channel, version, bases.get(channel))
                    for channel, version in versions.items()
                }

        return await self._run(thread_id, run)

    async def load_tasks(
        self, thread_id: ThreadId, ns: str, checkpoint_id: CheckpointId
    ) -> dict[TaskId, TaskRecord]:
        """Task records of one checkpoint, by task id, in the order first written."""

        def run(conn: sqlite3.Connection) -> dict[TaskId, TaskRecord]:
            rows = conn.execute(
                "SELECT task_id, node, status, attempts, started_at, ended_at, error, body"
                " FROM gf_tasks WHERE thread_id = ? AND ns = ? AND checkpoint_id = ?"
                " ORDER BY rowid",
                (thread_id, ns, checkpoint_id),
            ).fetchall()
            out: dict[TaskId, TaskRecord] = {}
            for tid, node, status, attempts, started, ended, error, body in rows:
                what = f"task {node!r}"
                try:
                    writes, routes = (
                        (None, None) if body is None
                        else _load(body, thread_id, checkpoint_id, what)
                    )  # fmt: skip
                except (TypeError, ValueError) as e:
                    raise _bad_shape(thread_id, checkpoint_id, what, e) from e
                out[tid] = TaskRecord(
                    checkpoint_id, tid, node, status, attempts, started, ended, error, writes,
                    routes,
                )  # fmt: skip
            return out

        return await self._run(thread_id, run)

    async def load_memos(
        self, thread_id: ThreadId, ns: str, checkpoint_id: CheckpointId
    ) -> dict[TaskId, dict[str, Any]]:
        """Memoized step results of one checkpoint's tasks: task id -> key -> value."""

        def run(conn: sqlite3.Connection) -> dict[TaskId, dict[str, Any]]:
            rows = conn.execute(
                "SELECT task_id, key, value FROM gf_memos WHERE thread_id = ? AND ns = ?"
                " AND checkpoint_id = ? ORDER BY rowid",
                (thread_id, ns, checkpoint_id),
            ).fetchall()
            out: dict[TaskId, dict[str, Any]] = {}
            for tid, key, blob in rows:
                value = _load(blob, thread_id, checkpoint_id, f"step {key!r}")
                out.setdefault(tid, {})[key] = value
            return out

        return await self._run(thread_id, run)

    # -- pauses and answers ------------------------------------------------------------
    async def get_pauses(
        self, thread_id: ThreadId, pause_ids: Sequence[PauseId]
    ) -> list[PauseRecord]:
        """Pause records by id, in the order asked; unknown ids are left out."""

        def run(conn: sqlite3.Connection) -> list[PauseRecord]:
            sql = _PAUSE + " WHERE thread_id = ? AND id = ?"
            with _Txn(conn, "BEGIN"):
                rows = [conn.execute(sql, (thread_id, p)).fetchone() for p in pause_ids]
            return [_pause(thread_id, r) for r in rows if r is not None]

        return await self._run(thread_id, run)

    async def list_pauses(self, thread_id: ThreadId) -> list[PauseRecord]:
        """Every pause record of the thread, oldest first."""

        def run(conn: sqlite3.Connection) -> list[PauseRecord]:
            sql = _PAUSE + " WHERE thread_id = ? ORDER BY created_at, rowid"
            return [_pause(thread_id, r) for r in conn.execute(sql, (thread_id,)).fetchall()]

        return await self._run(thread_id, run)

    async def put_answers(self, answers: Sequence[AnswerRecord]) -> None:
        """Append answers in one transaction (all are serialized first)."""
        rows = [
            (a.thread_id, a.pause_id, _dumps(a.value, key=f"answer to {a.pause_id!r}"), a.by,
             a.reason, a.created_at)
            for a in answers
        ]  # fmt: skip

        def run(conn: sqlite3.Connection) -> None:
            with _Txn(conn):
                conn.executemany(_INSERT_ANSWER, rows)

        if rows:
            await self._run(rows[0][0], run)

    async def load_answers(
        self, thread_id: ThreadId, pause_ids: Sequence[PauseId] | None = None
    ) -> dict[PauseId, AnswerRecord]:
        """The latest answer per pause (all pauses of the thread when ``pause_ids`` is None)."""
        wanted = set(pause_ids) if pause_ids is not None else None

        def run(conn: sqlite3.Connection) -> dict[PauseId, AnswerRecord]:
            rows = conn.execute(
                "SELECT pause_id, value, by, reason, created_at FROM gf_answers"
                " WHERE thread_id = ? ORDER BY seq",
                (thread_id,),
            ).fetchall()
            out: dict[PauseId, AnswerRecord] = {}
            for pid, blob, by, reason, created in rows:  # oldest first: the latest wins
                if wanted is None or pid in wanted:
                    value = _load(blob, thread_id, None, f"answer to {pid!r}")
                    out[pid] = AnswerRecord(pid, thread_id, value, by, reason, created)
            return out

        return await self._run(thread_id, run)

    # -- decisions and dispatch ------------------------------------------------------------
    async def put_decisions(self, decisions: Sequence[DecisionRecord]) -> None:
        """Append decisions in one transaction."""
        rows = [
            (d.thread_id, d.call_id, d.verdict, d.fingerprint, d.by, d.reason, d.applied, d.note,
             d.created_at)
            for d in decisions
        ]  # fmt: skip

        def run(conn: sqlite3.Connection) -> None:
            with _Txn(conn):
                conn.executemany(
                    "INSERT INTO gf_decisions (thread_id, call_id, verdict, fingerprint, by,"
                    " reason, applied, note, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )

        if rows:
            await self._run(rows[0][0], run)

    async def list_decisions(
        self, thread_id: ThreadId, call_id: CallId | None = None
    ) -> list[DecisionRecord]:
        """Decisions of a thread (optionally of one call), oldest first."""

        def run(conn: sqlite3.Connection) -> list[DecisionRecord]:
            if call_id is None:
                rows = conn.execute(_DECISION + " ORDER BY seq", (thread_id,)).fetchall()
            else:
                sql = _DECISION + " AND call_id = ? ORDER BY seq"
                rows = conn.execute(sql, (thread_id, call_id)).fetchall()
            return [
                DecisionRecord(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]), r[7], r[8])
                for r in rows
            ]

        return await self._run(thread_id, run)

    async def claim_dispatch(self, record: DispatchRecord) -> bool:
        """Insert the claim; False when the primary key says it was already claimed."""
        r = record
        # Like MemoryCheckpointer, a claim stores no result (None is stored as NULL).
        row = (r.thread_id, r.call_id, r.tool, r.fingerprint, r.owner, r.status, None, r.error,
               r.claimed_at, r.completed_at)  # fmt: skip

        def run(conn: sqlite3.Connection) -> bool:
            with _Txn(conn):
                cur = conn.execute(
                    "INSERT INTO gf_dispatches VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
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
                cur = conn.execute(
                    "UPDATE gf_dispatches SET status = ?, result = ?, error = ?, completed_at = ?"
                    " WHERE thread_id = ? AND call_id = ?",
                    (status, blob, error, now(), thread_id, call_id),
                )
                if cur.rowcount != 1:
                    raise CorruptCheckpointError(
                        f"tool call {call_id!r} of thread {thread_id!r} was never claimed",
                        thread_id=thread_id,
                    )
                if status not in ("succeeded", "failed"):
                    raise ValueError(
                        f"dispatch status must be 'succeeded' or 'failed', not {status!r}"
                    )
                if problem is not None:
                    raise problem

        await self._run(thread_id, run)

    async def get_dispatch(self, thread_id: ThreadId, call_id: CallId) -> DispatchRecord | None:
        """The dispatch record of a call, with its outcome when known."""

        def run(conn: sqlite3.Connection) -> DispatchRecord | None:
            r = conn.execute(_DISPATCH, (thread_id, call_id)).fetchone()
            if r is None:
                return None
            result = None if r[6] is None else _load(r[6], thread_id, None, "tool result")
            return DispatchRecord(r[0], r[1], r[2], r[3], r[4], r[5], result, r[7], r[8], r[9])

        return await self._run(thread_id, run)
