"""SQL, row codecs and the commit transaction of ``SqliteCheckpointer`` (see ``sqlite``)."""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, TypeVar

from checkpoints import _wal, serde
from checkpoints._decode import load_value as _load
from checkpoints._decode import missing_channel as _missing
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
    CheckpointRecord,
    CommitBatch,
    PauseId,
    PauseRecord,
    TaskId,
    TaskSpec,
    ThreadId,
    ThreadRecord,
    now,
)

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
    "SELECT thread_id, status, updated_at, pending_count, graph_name, created_at FROM gf_threads"
)
_INFO_OF_STATUS = (  # every column from the threads_by_status index: no row is looked up
    "SELECT thread_id, updated_at, pending_count, graph_name, created_at FROM gf_threads"
    " WHERE status = ? ORDER BY updated_at DESC, thread_id DESC"
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
        # With a status change, whether the lease is given up is a parameter (the first and
        # the last commit of a run share one statement: one fewer to prepare per process).
        sets.append(
            "updated_at = ?, status = ?, pending_pause_ids = ?, pending_count = ?,"
            " graph_name = coalesce(?, graph_name),"
            " lease_owner = CASE WHEN ? THEN NULL ELSE lease_owner END,"
            " lease_expires_at = CASE WHEN ? THEN NULL ELSE lease_expires_at END"
        )
    elif release:
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
    return _lease_existing(conn, thread_id, owner, ttl, row)


def _lease_existing(
    conn: sqlite3.Connection, thread_id: str, owner: str, ttl: float, row: Any
) -> ThreadRecord:
    """``_take_lease`` for a thread whose row (``_THREAD``'s columns) was just read."""
    t = now()
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


class _RoomTxn(_Txn):
    """``_Txn`` for a durable commit: once it holds the write lock, it keeps room in the WAL
    (``_wal.make_room``: the commit then overwrites the file rather than grows it)."""

    __slots__ = ("_wal",)

    def __init__(self, conn: sqlite3.Connection, wal_fd: int | None) -> None:
        super().__init__(conn)
        self._wal = wal_fd

    def __enter__(self) -> None:
        self._conn.execute(self._begin)
        try:
            _wal.make_room(self._wal)
        except BaseException:  # (make_room reports no OSError; anything else ends the txn)
            self._rollback()
            raise


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    """Whether a sqlite3 error means the file is damaged (not busy, locked or misused).

    Damaged pages or header (SQLITE_CORRUPT, SQLITE_NOTADB), tables missing although the file
    says its schema is complete, or text that is not UTF-8 (Python's sqlite3 cannot read it).
    """
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return type(exc) is sqlite3.DatabaseError or str(exc).startswith(
            "Could not decode to UTF-8"
        )
    return code & 0xFF in (11, 26) or str(exc).startswith(("no such table", "no such column"))


def _bad_shape(
    thread_id: str, checkpoint_id: str | None, what: str, e: Exception
) -> CorruptCheckpointError:
    """A blob that decodes, but not to what was stored there (damage or a foreign writer)."""
    return CorruptCheckpointError(
        f"{what} of thread {thread_id!r} checkpoint {checkpoint_id!r} has an invalid shape: {e}",
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
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
    txn: Callable[[sqlite3.Connection, bool, Callable[[], int]], AbstractContextManager[None]],
) -> None:
    """The body of ``commit``: serialize everything, then one write transaction, made by
    ``txn(conn, batch.durable, size)`` (fsync'd, or relaxed for a commit nothing depends on
    yet; ``size()``: the bytes of the values it writes)."""
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
        ] if batch.tasks else []  # fmt: skip
        memos = [
            (thread_id, ns, m.checkpoint_id, m.task_id, m.key,
             _dumps(m.value, key=f"step {m.key!r}"), m.created_at)
            for m in batch.memos
        ] if batch.memos else []  # fmt: skip
        # Rows as stored (the last column, blob_id, is set for a large value, spilled to
        # gf_blobs inside the transaction); ``large`` lists their indexes.
        chans = [
            (thread_id, ns, c.channel, c.version, c.kind,
             c.version if c.kind == "set" else c.base, _dumps(c.value, key=c.channel), None)
            for c in batch.channels
        ]  # fmt: skip
        large = [i for i, row in enumerate(chans) if len(row[6]) > _INLINE_MAX] if chans else []
        pauses = [
            (thread_id, p.id, p.ns, p.checkpoint_id, p.task_id, p.node, p.kind,
             _dumps(p.value, key=f"pause {p.id!r}"), p.created_at)
            for p in batch.pauses
        ] if batch.pauses else []  # fmt: skip
        answers = [
            (thread_id, a.pause_id, _dumps(a.value, key=f"answer to {a.pause_id!r}"), a.by,
             a.reason, a.created_at)
            for a in batch.answers
        ] if batch.answers else []  # fmt: skip
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
    release = batch.release
    sql = _fenced_update(set_head, upd is not None, batch.check_head, upd is None and release)
    params: list[Any] = []
    if set_head:
        params.append(ck.id)  # type: ignore[union-attr]
    if upd is not None:
        params += (now(), upd.status, pending, len(ids), upd.graph_name, release, release)
    params += (thread_id, owner)
    if batch.check_head:
        params.append(batch.expected_head)
    size = lambda: _blob_bytes(tasks, memos, chans, pauses, answers, [ck_row])  # noqa: E731
    _write(conn, txn(conn, batch.durable, size), thread_id, owner, batch, sql, params, tasks,
           memos, ck_row, chans, large, pauses, answers)  # fmt: skip


def _blob_bytes(*groups: Sequence[Any]) -> int:
    """The bytes of the serialized values in rows about to be written."""
    return sum(
        len(v) for rows in groups for row in rows if row is not None for v in row
        if type(v) is bytes
    )  # fmt: skip


def _write(
    conn: sqlite3.Connection,
    txn: AbstractContextManager[None],
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
    """The write transaction ``txn`` of ``_commit`` (everything already serialized)."""
    ck = batch.checkpoint
    with txn:
        ttl = batch.acquire_ttl
        # A commit that takes the lease of a thread expected new creates its row whole, or
        # finds it exists (then the lease is tested and the row fenced like any other).
        created = ttl is not None and _create_thread(conn, thread_id, owner, batch, ttl)
        if not created:
            if ttl is not None:
                row = conn.execute(_THREAD, (thread_id,)).fetchone()
                if row is None:  # (a head was expected: the thread should exist)
                    raise HeadConflictError(thread_id, batch.expected_head, None)
                _lease_existing(conn, thread_id, owner, ttl, row)
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
            for i in large:
                cur = conn.execute("INSERT INTO gf_blobs (data) VALUES (?)", (chans[i][6],))
                chans[i] = (*chans[i][:6], None, cur.lastrowid)
            conn.executemany("INSERT OR REPLACE INTO gf_channels VALUES (?,?,?,?,?,?,?,?)", chans)
        if pauses:
            conn.executemany(_UPSERT_PAUSE, pauses)
        if answers:
            conn.executemany(_INSERT_ANSWER, answers)


def _create_thread(
    conn: sqlite3.Connection, thread_id: str, owner: str, batch: CommitBatch, ttl: float
) -> bool:
    """Create the row of a thread a commit takes the lease of, written whole at once (its
    head, status and pauses, which the fenced update writes for an existing thread); False
    when the thread exists or a head is expected (it should exist), with nothing written."""
    if batch.check_head and batch.expected_head is not None:
        return False
    upd = batch.thread
    ids = upd.pending_pause_ids if upd is not None else ()
    t = now()
    cur = conn.execute(
        "INSERT INTO gf_threads (thread_id, status, head, graph_name, lease_owner,"
        " lease_expires_at, pending_pause_ids, pending_count, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (thread_id) DO NOTHING",
        (
            thread_id,
            upd.status if upd is not None else "running",
            batch.checkpoint.id if batch.checkpoint is not None and batch.ns == "" else None,
            upd.graph_name if upd is not None else None,
            None if batch.release else owner,
            None if batch.release else t + ttl,
            _dumps(list(ids), key="pending_pause_ids") if ids else None,
            len(ids),
            t,
            t,
        ),
    )
    return cur.rowcount == 1
