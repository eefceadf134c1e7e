"""SQL, the channel read and the commit transaction of ``SqliteCheckpointer`` (see
``sqlite``); rows are encoded and decoded by ``_sqlite_rows``."""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, TypeVar

from checkpoints import _sqlite_marks, _wal, serde
from checkpoints import _sqlite_rows as rows
from checkpoints._decode import load_value as _load
from checkpoints._decode import missing_channel as _missing
from checkpoints.errors import (
    CheckpointError,
    HeadConflictError,
    LeaseHeldError,
    LeaseLostError,
    SerializationError,
)
from checkpoints.lease import lease_free
from checkpoints.models import (
    AnswerRecord,
    CommitBatch,
    ThreadId,
    ThreadRecord,
    now,
)

T = TypeVar("T")
_dumps = serde.dumps

_THREAD = f"SELECT {rows.THREAD_COLS} FROM gf_threads WHERE thread_id = ?"
_INSERT_THREAD = (  # ?1-?14: the row's values and checksums; its counts from what exists
    "INSERT INTO gf_threads (thread_id, status, head, graph_name, lease_owner,"
    " lease_expires_at, pending_pause_ids, pending_count, created_at, updated_at, crc, head_crc,"
    " lease_crc, info_crc, n_checkpoints, newest, n_pauses, n_answers, n_decisions,"
    " n_dispatches) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
    " (SELECT count(*) FROM gf_checkpoints WHERE thread_id = ?1 AND ns = '')"
    " + (?3 IS NOT NULL AND NOT EXISTS (SELECT 1 FROM gf_checkpoints WHERE thread_id = ?1"
    " AND ns = '' AND id = ?3)),"  # (the head, when given, is inserted next)
    " (SELECT max(id) FROM (SELECT id FROM gf_checkpoints WHERE thread_id = ?1 AND ns = ''"
    " UNION ALL SELECT ?3)),"
    " (SELECT count(*) FROM gf_pauses WHERE thread_id = ?1),"
    " (SELECT count(*) FROM gf_answers WHERE thread_id = ?1),"
    " (SELECT count(*) FROM gf_decisions WHERE thread_id = ?1),"
    " (SELECT count(*) FROM gf_dispatches WHERE thread_id = ?1))"
    " ON CONFLICT (thread_id) DO NOTHING"
)
_INFO = f"SELECT {rows.INFO_COLS} FROM gf_threads"
_INFO_OF_STATUS = (  # every column from the threads_by_status index: no row is looked up
    f"SELECT {rows.INFO_COLS} FROM gf_threads WHERE status = ?"
    " ORDER BY updated_at DESC, thread_id DESC"
)
_CKPT = f"SELECT {rows.CKPT_COLS} FROM gf_checkpoints"
_UPSERT_CHECKPOINT = (  # counts of tasks and memos written before it (none, from the engine)
    "INSERT INTO gf_checkpoints (thread_id, ns, id, parent_id, step, source, channel_versions,"
    " channel_bases, body, created_at, crc, n_tasks, n_memos)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11,"
    " (SELECT count(*) FROM gf_tasks WHERE thread_id = ?1 AND ns = ?2 AND checkpoint_id = ?3),"
    " (SELECT count(*) FROM gf_memos WHERE thread_id = ?1 AND ns = ?2 AND checkpoint_id = ?3))"
    " ON CONFLICT (thread_id, ns, id) DO UPDATE SET parent_id = excluded.parent_id,"
    " step = excluded.step, source = excluded.source,"
    " channel_versions = excluded.channel_versions, channel_bases = excluded.channel_bases,"
    " body = excluded.body, created_at = excluded.created_at, crc = excluded.crc"
)
_UPSERT_TASK = (
    "INSERT INTO gf_tasks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (thread_id, ns, checkpoint_id, task_id) DO UPDATE SET node = excluded.node,"
    " status = excluded.status, attempts = excluded.attempts, started_at = excluded.started_at,"
    " ended_at = excluded.ended_at, error = excluded.error, body = excluded.body,"
    " crc = excluded.crc"
)
_UPSERT_MEMO = (
    "INSERT INTO gf_memos VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT"
    " (thread_id, ns, checkpoint_id, task_id, key) DO UPDATE SET value = excluded.value,"
    " created_at = excluded.created_at, crc = excluded.crc"
)
_UPSERT_PAUSE = (
    "INSERT INTO gf_pauses VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (thread_id, id)"
    " DO UPDATE SET ns = excluded.ns, checkpoint_id = excluded.checkpoint_id,"
    " task_id = excluded.task_id, node = excluded.node, kind = excluded.kind,"
    " value = excluded.value, created_at = excluded.created_at, crc = excluded.crc"
)
_INSERT_CHANNEL = "INSERT OR REPLACE INTO gf_channels VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
_PAUSE = f"SELECT {rows.PAUSE_COLS} FROM gf_pauses"
_INSERT_ANSWER = (
    "INSERT INTO gf_answers (seq, thread_id, pause_id, value, by, reason, created_at, crc)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_DECISION = (
    "INSERT INTO gf_decisions (seq, thread_id, call_id, verdict, fingerprint, by, reason,"
    " applied, note, created_at, pause_id, extra, crc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
    " ?, ?)"
)
_DISPATCH = f"SELECT {rows.DISPATCH_COLS} FROM gf_dispatches WHERE thread_id = ? AND call_id = ?"

_THREAD_CRC_NOW = (
    "gf_crc(thread_id, status, graph_name, pending_pause_ids, pending_count, created_at,"
    " updated_at)"
)
"""The status checksum of a thread row as it stands: a status change, which recomputes it in
SQL (``graph_name`` may be kept), first checks it, so that it never blesses damage."""

RENEW = (
    "UPDATE gf_threads SET lease_expires_at = ?, lease_crc = ? WHERE thread_id = ?"
    " AND lease_owner = ?"
)
RELEASE = (
    "UPDATE gf_threads SET lease_owner = NULL, lease_expires_at = NULL, lease_crc = ?"
    " WHERE thread_id = ? AND lease_owner = ?"
)


def thread_values(
    thread_id: str,
    status: str,
    head: str | None,
    graph_name: str | None,
    owner: str | None,
    expires: float | None,
    pending: bytes | None,
    pending_count: int,
    t: float,
) -> tuple[Any, ...]:
    """The first 14 values of ``_INSERT_THREAD``: a new thread row and its checksums."""
    return (
        thread_id, status, head, graph_name, owner, expires, pending, pending_count, t, t,
        rows.thread_crc(thread_id, status, graph_name, pending, pending_count, t, t),
        rows.head_crc(thread_id, head), rows.lease_crc(thread_id, owner, expires),
        rows.info_crc(thread_id, status, t, pending_count, graph_name, t),
    )  # fmt: skip


@functools.cache
def _fenced_update(set_head: bool, update: bool, check_head: bool, release: bool) -> str:
    """The statement that opens a commit's writes (cached: a few shapes, on the hot path).

    It returns a row only if ``owner`` holds the lease and, with ``check_head``, the head is
    the expected one. It rewrites the thread row only for what changes: the head, the
    status (``updated_at`` moves with it), the lease on release, and their checksums: the
    head's and the lease's from parameters; the status's, which may keep ``graph_name``,
    in SQL, and then only if the row's stands (``_THREAD_CRC_NOW``). Nothing to change: a
    read. Parameters are named.
    """
    sets = []
    if set_head:
        # The new head is a root checkpoint inserted next: the thread counts it here (a
        # trigger would cost a second update of this row), unless it was stored before.
        sets.append(
            "head = :head, head_crc = :head_crc, n_checkpoints = n_checkpoints + NOT EXISTS"
            " (SELECT 1 FROM gf_checkpoints WHERE thread_id = :tid AND ns = '' AND id = :head),"
            " newest = max(coalesce(newest, ''), :head)"
        )
    if update:
        # With a status change, whether the lease is given up is a parameter (the first and
        # the last commit of a run share one statement: one fewer to prepare per process).
        sets.append(
            "updated_at = :updated, status = :status, pending_pause_ids = :pending,"
            " pending_count = :count, graph_name = coalesce(:graph, graph_name),"
            " lease_owner = CASE WHEN :release THEN NULL ELSE lease_owner END,"
            " lease_expires_at = CASE WHEN :release THEN NULL ELSE lease_expires_at END,"
            " lease_crc = CASE WHEN :release THEN :lease_crc ELSE lease_crc END,"
            " crc = gf_crc(thread_id, :status, coalesce(:graph, graph_name), :pending, :count,"
            " created_at, :updated),"
            " info_crc = gf_crc(thread_id, :status, :updated, :count,"
            " coalesce(:graph, graph_name), created_at)"
        )
    elif release:
        sets.append("lease_owner = NULL, lease_expires_at = NULL, lease_crc = :lease_crc")
    where = "thread_id = :tid AND lease_owner = :owner"
    where += f" AND crc IS {_THREAD_CRC_NOW}" if update else ""
    where += " AND head IS :expected" if check_head else ""
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
        if conn.execute(_INSERT_THREAD, thread_values(
            thread_id, "running", None, graph_name, owner, t + ttl, None, 0, t
        )).rowcount != 1:  # fmt: skip
            raise AssertionError("a thread row appeared inside a write transaction")
        tid = ThreadId(thread_id)
        return ThreadRecord(tid, "running", None, graph_name, owner, t + ttl, (), t, t)
    return _lease_existing(conn, thread_id, owner, ttl, row)


def _lease_existing(
    conn: sqlite3.Connection, thread_id: str, owner: str, ttl: float, row: Any
) -> ThreadRecord:
    """``_take_lease`` for a thread whose row (``_THREAD``'s columns) was just read."""
    t = now()
    rec = rows.thread(thread_id, row)
    if not lease_free(rec.lease_owner, rec.lease_expires_at, owner, t):
        raise LeaseHeldError(thread_id, rec.lease_owner)
    expires = t + ttl
    conn.execute(
        "UPDATE gf_threads SET lease_owner = ?, lease_expires_at = ?, lease_crc = ?"
        " WHERE thread_id = ?",
        (owner, expires, rows.lease_crc(thread_id, owner, expires), thread_id),
    )
    rec.lease_owner, rec.lease_expires_at = owner, expires
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
            f"SELECT {rows.CHANNEL_COLS} FROM gf_channels c LEFT JOIN gf_blobs b"
            " ON b.id = c.blob_id WHERE thread_id=? AND ns=? AND channel=? AND base=?"
            " AND version=?"
        )
        row = conn.execute(sql, (thread_id, ns, channel, version, version)).fetchone()
        if row is None:
            raise _missing(thread_id, channel, version)
        [blob] = rows.channel_blobs(thread_id, ns, channel, [row], version)
        return _load(blob, thread_id, None, what)
    sql = (
        f"SELECT {rows.CHANNEL_COLS} FROM gf_channels c LEFT JOIN gf_blobs b"
        " ON b.id = c.blob_id WHERE thread_id = ? AND ns = ? AND channel = ?"
        " AND base = ? AND version <= ? ORDER BY version"
    )
    found = conn.execute(sql, (thread_id, ns, channel, base[0], version)).fetchall()
    if not found or found[0][1] != base[0]:  # the set row the chain starts from
        raise _missing(thread_id, channel, base[0])
    blobs = rows.channel_blobs(thread_id, ns, channel, found, base[0])
    value = _load(blobs[0], thread_id, None, what)
    if type(value) is not list:
        raise rows.bad_shape(thread_id, None, what, "a list channel's value is not a list")
    for blob in blobs[1:]:
        part = _load(blob, thread_id, None, what)
        if type(part) is not list:
            raise rows.bad_shape(thread_id, None, what, "appended items are not a list")
        value.extend(part)
    if len(found) - 1 != base[1]:
        raise _missing(thread_id, channel, version)
    return value


def _fenced_off(
    conn: sqlite3.Connection, thread_id: str, owner: str, batch: CommitBatch
) -> CheckpointError | None:
    """The error a fenced commit hits (damage, the lease, then the head), if any."""
    row = conn.execute(_THREAD, (thread_id,)).fetchone()
    if row is None:
        return LeaseLostError(thread_id, owner)
    rec = rows.thread(thread_id, row)  # (a damaged row raises here)
    if rec.lease_owner != owner:
        return LeaseLostError(thread_id, owner)
    if batch.check_head and rec.head != batch.expected_head:
        return HeadConflictError(thread_id, batch.expected_head, rec.head)
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
            rows.task_row(thread_id, ns, t, None if t.writes is None and t.routes is None
                          else _dumps([t.writes, t.routes], key=f"writes of task {t.node!r}"))
            for t in batch.tasks
        ] if batch.tasks else []  # fmt: skip
        memos = [
            rows.memo_row(thread_id, ns, m.checkpoint_id, m.task_id, m.key,
                          _dumps(m.value, key=f"step {m.key!r}"), m.created_at)
            for m in batch.memos
        ] if batch.memos else []  # fmt: skip
        # Rows as stored (blob_id, the next to last column, is set for a large value, spilled
        # to gf_blobs inside the transaction); ``large`` lists their indexes.
        chans = []
        for c in batch.channels:
            blob = _dumps(c.value, key=c.channel)
            base = c.version if c.kind == "set" or c.base is None else c.base
            chans.append((thread_id, ns, c.channel, c.version, c.kind, base, blob, None,
                          rows.channel_crc(thread_id, ns, c.channel, c.version, c.kind, base,
                                           blob)))  # fmt: skip
        large = [i for i, row in enumerate(chans) if len(row[6]) > _INLINE_MAX] if chans else []
        pauses = [
            rows.pause_row(thread_id, p, _dumps(p.value, key=f"pause {p.id!r}"))
            for p in batch.pauses
        ] if batch.pauses else []  # fmt: skip
        answers = [
            (a, _dumps(a.value, key=f"answer to {a.pause_id!r}")) for a in batch.answers
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
            ck_row = rows.checkpoint_row(
                thread_id, ns, ck, _dumps(ck.channel_versions, key="channel_versions"),
                _dumps({k: list(v) for k, v in ck.channel_bases.items()}, key="channel_bases")
                if ck.channel_bases else None,
                body,
            )  # fmt: skip
        ids = upd.pending_pause_ids if upd is not None else ()
        pending = _dumps(list(ids), key="pending_pause_ids") if ids else None
    except SerializationError:
        fenced: CheckpointError | None
        with _Txn(conn, "BEGIN"):
            if batch.acquire_ttl is not None:  # the commit would take the lease: is it free?
                row = conn.execute(_THREAD, (thread_id,)).fetchone()
                rec = rows.thread(thread_id, row) if row is not None else None
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
    params: dict[str, Any] = {"tid": thread_id, "owner": owner}
    if set_head:
        params["head"] = ck.id  # type: ignore[union-attr]
        params["head_crc"] = rows.head_crc(thread_id, ck.id)  # type: ignore[union-attr]
    if upd is not None:
        params.update(updated=now(), status=upd.status, pending=pending, count=len(ids),
                      graph=upd.graph_name, release=release)  # fmt: skip
    if release:
        params["lease_crc"] = rows.lease_crc(thread_id, None, None)
    elif upd is not None:
        params["lease_crc"] = None  # (the CASE keeps the row's)
    if batch.check_head:
        params["expected"] = batch.expected_head
    size = lambda: _blob_bytes(tasks, memos, chans, pauses, answers, [ck_row])  # noqa: E731
    _write(conn, txn(conn, batch.durable, size), thread_id, owner, batch, sql, params, tasks,
           memos, ck_row, chans, large, pauses, answers)  # fmt: skip


def _blob_bytes(*groups: Sequence[Any]) -> int:
    """The bytes of the serialized values in rows about to be written."""
    return sum(
        len(v) for group in groups for row in group if row is not None for v in row
        if type(v) is bytes
    )  # fmt: skip


def next_seq(conn: sqlite3.Connection, table: str) -> int:
    """The next ``seq`` of an append-only table (its checksum covers it, so it is chosen
    before the row is written; the caller holds the write lock)."""
    row = conn.execute(f"SELECT coalesce(max(seq), 0) + 1 FROM {table}").fetchone()
    return int(row[0])


def insert_answers(conn: sqlite3.Connection, answers: Sequence[tuple[AnswerRecord, bytes]]) -> None:
    """Append answers (serialized values given) inside the caller's write transaction."""
    seq = next_seq(conn, "gf_answers")
    conn.executemany(
        _INSERT_ANSWER, [rows.answer_row(seq + i, a, blob) for i, (a, blob) in enumerate(answers)]
    )


def _write(
    conn: sqlite3.Connection,
    txn: AbstractContextManager[None],
    thread_id: str,
    owner: str,
    batch: CommitBatch,
    sql: str,
    params: dict[str, Any],
    tasks: list[Any],
    memos: list[Any],
    ck_row: Any,
    chans: list[Any],
    large: list[int],
    pauses: list[Any],
    answers: list[tuple[AnswerRecord, bytes]],
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
                raise _fenced_off(conn, thread_id, owner, batch) or _unfenced(conn, thread_id)
        if tasks:
            conn.executemany(_UPSERT_TASK, tasks)
        if memos:
            conn.executemany(_UPSERT_MEMO, memos)
        if ck is not None:
            conn.execute(_UPSERT_CHECKPOINT, ck_row)
        if chans:
            for i in large:
                cur = conn.execute("INSERT INTO gf_blobs (data) VALUES (?)", (chans[i][6],))
                chans[i] = (*chans[i][:6], None, cur.lastrowid, chans[i][8])
            conn.executemany(_INSERT_CHANNEL, chans)
        if pauses:
            conn.executemany(_UPSERT_PAUSE, pauses)
        if answers:
            insert_answers(conn, answers)
        if batch.thread is not None:  # the runnable index (_sqlite_marks)
            _sqlite_marks.after_commit(conn, thread_id, batch)


def _unfenced(conn: sqlite3.Connection, thread_id: str) -> CheckpointError:
    """The fenced update matched no row, yet lease and head are right: the row's checksum."""
    return rows.damaged(thread_id, None, "thread row", "checksum mismatch")


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
    values = thread_values(
        thread_id,
        upd.status if upd is not None else "running",
        batch.checkpoint.id if batch.checkpoint is not None and batch.ns == "" else None,
        upd.graph_name if upd is not None else None,
        None if batch.release else owner,
        None if batch.release else t + ttl,
        _dumps(list(ids), key="pending_pause_ids") if ids else None,
        len(ids),
        t,
    )
    return conn.execute(_INSERT_THREAD, values).rowcount == 1
