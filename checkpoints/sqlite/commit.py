"""The commit of ``SqliteCheckpointer``: a ``CommitBatch`` in one write transaction.

Everything is serialized first (``checkpoints.encoding``): a ``SerializationError`` writes
nothing, and the write lock is held only for SQL. The transaction opens with one fenced
statement (``fenced_update``) that moves the thread head, and the status when it changes,
only if ``owner`` holds the lease (and the head is the expected one); when it matches
nothing, the reason is looked up (``fenced_off``: damage, the lease, then the head, the
order of ``checkpoints.base``). Checksums of the rows written are computed from the values
the commit has (no SQL callback on a step's commit), and a write never gives a damaged row
a new checksum.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from contextlib import AbstractContextManager
from typing import Any, Literal

from checkpoints.batch import CommitBatch
from checkpoints.encoding import EncodedBatch, encode_batch
from checkpoints.errors import CheckpointError, HeadConflictError, SerializationError
from checkpoints.fencing import commit_fence, frozen_conflict, status_conflict
from checkpoints.models import ChannelWrite, now
from checkpoints.sqlite import marks, reads
from checkpoints.sqlite.group import WriteTxn
from checkpoints.sqlite.rows import checks, records, steps, threads
from checkpoints.sqlite.txn import read_txn
from checkpoints.sqlite.writes import INSERT_THREAD, insert_answers, lease_existing, thread_values


def _upsert_checkpoint(bases: bool) -> str:
    """The checkpoint's upsert; its counts of tasks and memos are of those written before it
    (none, from the engine). ``bases``: channel bases given (else NULL, see "No adapting")."""
    b, n = ("?8, ", 8) if bases else ("NULL, ", 7)
    return (
        "INSERT INTO gf_checkpoints (thread_id, ns, id, parent_id, step, source,"
        " channel_versions, channel_bases, body, created_at, crc, n_tasks, n_memos)"
        f" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, {b}?{n + 1}, ?{n + 2}, ?{n + 3},"
        " (SELECT count(*) FROM gf_tasks WHERE thread_id = ?1 AND ns = ?2 AND checkpoint_id = ?3),"
        " (SELECT count(*) FROM gf_memos WHERE thread_id = ?1 AND ns = ?2 AND checkpoint_id = ?3))"
        " ON CONFLICT (thread_id, ns, id) DO UPDATE SET parent_id = excluded.parent_id,"
        " step = excluded.step, source = excluded.source,"
        " channel_versions = excluded.channel_versions, channel_bases = excluded.channel_bases,"
        " body = excluded.body, created_at = excluded.created_at, crc = excluded.crc"
    )


# No adapting: Python's sqlite3 adapts every parameter that is not an int, float, str or
# bytearray, and for a bytes or a None it looks for an adapter and fails (formatting an
# AttributeError message that it drops), ~3,000 instructions a parameter, five in a W1 step
# (measured with benchmarks/store_step.py). So the commit passes its hot blobs (a
# checkpoint's, a channel value) as bytearray, stored as the same BLOB, and writes NULL in
# the SQL where it knows one: the bases of a checkpoint without list chains, the blob_id of
# a channel value stored inline.
UPSERT_CHECKPOINT = _upsert_checkpoint(True)
UPSERT_CHECKPOINT_NO_BASES = _upsert_checkpoint(False)
UPSERT_TASK = (  # ord: the checkpoint's tasks stored before (m0005_compact); kept on update
    "INSERT INTO gf_tasks VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,"
    " (SELECT count(*) FROM gf_tasks WHERE thread_id = ?1 AND ns = ?2 AND checkpoint_id = ?3))"
    " ON CONFLICT (thread_id, ns, checkpoint_id, task_id) DO UPDATE SET node = excluded.node,"
    " status = excluded.status, attempts = excluded.attempts, started_at = excluded.started_at,"
    " ended_at = excluded.ended_at, error = excluded.error, body = excluded.body,"
    " crc = excluded.crc"
)
UPSERT_MEMO = (
    "INSERT INTO gf_memos VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT"
    " (thread_id, ns, checkpoint_id, task_id, key) DO UPDATE SET value = excluded.value,"
    " created_at = excluded.created_at, crc = excluded.crc"
)
UPSERT_PAUSE = (
    "INSERT INTO gf_pauses VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (thread_id, id)"
    " DO UPDATE SET ns = excluded.ns, checkpoint_id = excluded.checkpoint_id,"
    " task_id = excluded.task_id, node = excluded.node, kind = excluded.kind,"
    " value = excluded.value, created_at = excluded.created_at, crc = excluded.crc"
)
INSERT_CHANNEL = "INSERT OR REPLACE INTO gf_channels VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?)"
"""A channel row whose value is inline (its ``blob_id`` NULL)."""
INSERT_LARGE_CHANNEL = "INSERT OR REPLACE INTO gf_channels VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?)"
"""A channel row whose value is in ``gf_blobs`` (its ``blob`` NULL)."""
_CHAIN = (
    " WHERE thread_id = ?1 AND ns = ?2 AND channel = ?3 AND base = ?4 AND version > ?4"
    " AND version < ?5 AND kind = 'append'"
)
FOLD_CHAIN = (  # (checkpoints.chunks) the closed chain's appends, in the chunk now
    f"DELETE FROM gf_blobs WHERE id IN (SELECT blob_id FROM gf_channels{_CHAIN})",
    f"DELETE FROM gf_channels{_CHAIN}",
)
CLOSED = "closed"
"""The kind of the row a folded chain keeps at its chunk's version (value empty)."""


def fold_chain(conn: sqlite3.Connection, thread_id: str, ns: str, chunk: ChannelWrite) -> None:
    """Fold the chain that ``chunk`` (just stored) closed: its appends are deleted, and a
    ``closed`` row in the chain points at the chunk (``reads.read_channel``)."""
    assert chunk.base is not None
    args = (thread_id, ns, chunk.channel, chunk.base, chunk.version)
    for sql in FOLD_CHAIN:
        conn.execute(sql, args)
    crc = checks.channel_crc(thread_id, ns, chunk.channel, chunk.version, CLOSED, chunk.base, b"")
    conn.execute(INSERT_CHANNEL, (*args[:3], chunk.version, CLOSED, chunk.base, b"", crc))


THREAD_CRC_NOW = (
    "gf_crc(thread_id, status, graph_name, pending_pause_ids, pending_count, created_at,"
    " updated_at)"
)
"""The status checksum of a thread row as it stands: a status change, which recomputes it in
SQL (``graph_name`` may be kept), first checks it, so that it never blesses damage."""


Fence = Literal["lease", "unfrozen", "unleased"]
"""What a commit's fenced update tests besides the head: ``owner``'s lease (a commit that
took it in its transaction, having tested the status), the lease and a status other than
``frozen`` (any other commit of a run), or the row's ``updated_at`` and no lease at all
(``CommitBatch.unleased``: the head is then always tested)."""


def fence_of(batch: CommitBatch) -> Fence:
    """The fence of ``batch``'s fenced update (see ``Fence``)."""
    if batch.unleased:
        return "unleased"
    return "lease" if batch.acquire_ttl is not None else "unfrozen"


@functools.cache
def fenced_update(
    set_head: bool, update: bool, check_head: bool, release: bool, fence: Fence = "unfrozen"
) -> str:
    """The statement that opens a commit's writes (cached: a few shapes, on the hot path).

    It returns a row only if the ``fence`` holds (``owner`` holds the lease, the thread is
    not frozen...) and, with ``check_head``, the head is the expected one. It rewrites the
    thread row only for what changes: the head, the status (``updated_at`` moves with it),
    the lease on release, and their checksums: the head's and the lease's from parameters;
    the status's, which may keep ``graph_name``, in SQL, and then only if the row's stands
    (``THREAD_CRC_NOW``). Nothing to change: a read. Parameters are named.
    """
    sets = []
    if set_head:
        # The new head is a root checkpoint inserted next: the thread counts it here (a
        # trigger would cost a second update of this row), unless it was stored before.
        sets.append(
            "head = :head, head_crc = :head_crc, n_checkpoints = n_checkpoints + NOT EXISTS"
            " (SELECT 1 FROM gf_checkpoints WHERE thread_id = :tid AND ns = '' AND id = :head),"
            # (``newest`` is stored only where it is not the head: migration 0006_newest)
            " newest = nullif(max(coalesce(newest, head, ''), :head), :head)"
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
    where = "thread_id = :tid"
    if fence == "unleased":
        where += " AND (:updated_was IS NULL OR updated_at = :updated_was)"
    else:
        where += " AND lease_owner = :owner"
        where += " AND status IS NOT 'frozen'" if fence == "unfrozen" else ""
    where += f" AND crc IS {THREAD_CRC_NOW}" if update else ""
    where += " AND head IS :expected" if check_head else ""
    if not sets:
        return f"SELECT 1 FROM gf_threads WHERE {where}"
    return f"UPDATE gf_threads SET {', '.join(sets)} WHERE {where} RETURNING 1"


def fenced_off(
    conn: sqlite3.Connection, thread_id: str, owner: str, batch: CommitBatch
) -> CheckpointError | None:
    """The error a fenced commit hits (damage, the lease, the status, then the head), if
    any (``checkpoints.fencing``)."""
    row = reads.thread_row(conn, thread_id)
    rec = threads.thread(thread_id, row) if row is not None else None  # (damage raises)
    return commit_fence(thread_id, owner, batch, rec, now())


INLINE_MAX = 900
"""Serialized channel values larger than this go to gf_blobs (see ``m0001_initial``)."""


def commit(
    conn: sqlite3.Connection, thread_id: str, owner: str, batch: CommitBatch, txn: WriteTxn
) -> None:
    """Serialize everything, then write ``batch`` in one transaction made by
    ``txn(conn, batch.durable, size)`` (fsync'd, or relaxed for a commit nothing depends on
    yet; ``size()``: the bytes of the values it writes)."""
    try:
        enc = encode_batch(batch)
    except SerializationError:
        fenced = _fenced_before_values(conn, thread_id, owner, batch)
        if fenced is not None:  # fencing errors come first (checkpoints.base)
            raise fenced from None
        raise
    ns = batch.ns
    ck = batch.checkpoint
    upd = batch.thread
    # (Comprehensions only where there are records: each costs a call, on every step.)
    tasks = [steps.task_row(thread_id, ns, t, blob) for t, blob in enc.tasks] if enc.tasks else []
    memos = [steps.memo_row(thread_id, ns, m.checkpoint_id, m.task_id, m.key, blob, m.created_at)
             for m, blob in enc.memos] if enc.memos else []  # fmt: skip
    # Rows as stored (blob_id, the next to last column, is set for a large value, spilled to
    # gf_blobs inside the transaction); ``large`` lists their indexes.
    chans = []
    folds = []  # chunk writes: their chains are folded in the transaction
    chunked = 0  # (the bytes of their chunks, which ``enc`` does not count)
    for c, blob in enc.channels:
        if c.kind == "chunk":  # (the rows it copies are immutable: read before the lock)
            blob = reads.chunk_blob(conn, thread_id, ns, c)
            folds.append(c)
            chunked += len(blob)
        base = c.version if c.kind != "append" or c.base is None else c.base
        chans.append((thread_id, ns, c.channel, c.version, c.kind, base, bytearray(blob),
                      checks.channel_crc(thread_id, ns, c.channel, c.version, c.kind, base,
                                         blob)))  # fmt: skip
    large = [i for i, row in enumerate(chans) if len(row[6]) > INLINE_MAX] if chans else []
    pauses = [records.pause_row(thread_id, p, blob) for p, blob in enc.pauses] if enc.pauses else []
    ck_row = None
    if ck is not None:
        assert enc.body is not None and enc.versions is not None
        ck_row = steps.checkpoint_row(thread_id, ns, ck, enc.versions, enc.bases, enc.body)
        # (blobs as bytearray, no NULL bases: see "No adapting")
        ck_row = (*ck_row[:6], bytearray(enc.versions),
                  *(() if enc.bases is None else (bytearray(enc.bases),)),
                  bytearray(enc.body), *ck_row[9:])  # fmt: skip
    set_head = ck is not None and ns == ""
    release = batch.release
    fence = fence_of(batch)
    check_head = batch.check_head or fence == "unleased"
    sql = fenced_update(set_head, upd is not None, check_head, upd is None and release, fence)
    params: dict[str, Any] = {"tid": thread_id, "owner": owner}
    if fence == "unleased":
        params["updated_was"] = batch.expected_updated_at
    if ck is not None and set_head:
        params["head"] = ck.id
        params["head_crc"] = threads.head_crc(thread_id, ck.id)
    if upd is not None:
        params.update(updated=now(), status=upd.status, pending=enc.pending,
                      count=len(upd.pending_pause_ids), graph=upd.graph_name,
                      release=release)  # fmt: skip
    if release:
        params["lease_crc"] = threads.lease_crc(thread_id, None, None)
    elif upd is not None:
        params["lease_crc"] = None  # (the CASE keeps the row's)
    if check_head:
        params["expected"] = batch.expected_head
    size = enc.nbytes if not chunked else lambda: enc.nbytes() + chunked
    _write(conn, txn(conn, batch.durable, size), thread_id, owner, batch, sql, params, tasks,
           memos, ck_row, chans, large, folds, pauses, enc)  # fmt: skip


def _fenced_before_values(
    conn: sqlite3.Connection, thread_id: str, owner: str, batch: CommitBatch
) -> CheckpointError | None:
    """For a batch with a value that cannot be stored: the fencing error it would hit first
    (read on one snapshot: its own, or the group commit's transaction it is part of)."""
    with read_txn(conn) if not conn.in_transaction else contextlib.nullcontext():
        return fenced_off(conn, thread_id, owner, batch)


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
    folds: list[ChannelWrite],
    pauses: list[Any],
    enc: EncodedBatch,
) -> None:
    """The write transaction ``txn`` of ``commit`` (everything already serialized)."""
    ck = batch.checkpoint
    with txn:
        ttl = batch.acquire_ttl
        # A commit that takes the lease of a thread expected new creates its row whole, or
        # finds it exists (then the lease is tested and the row fenced like any other).
        created = ttl is not None and _create_thread(conn, thread_id, owner, batch, enc, ttl)
        if not created:
            if ttl is not None:
                row = reads.thread_row(conn, thread_id)
                if row is None:  # (a head was expected: the thread should exist)
                    raise HeadConflictError(thread_id, batch.expected_head, None)
                rec = lease_existing(conn, thread_id, owner, ttl, row)
                conflict: CheckpointError | None = frozen_conflict(thread_id, batch, rec)
                if (conflict := conflict or status_conflict(thread_id, batch, rec)) is not None:
                    raise conflict
            if not conn.execute(sql, params).fetchall():
                raise fenced_off(conn, thread_id, owner, batch) or _unfenced(conn, thread_id)
        if tasks:
            conn.executemany(UPSERT_TASK, tasks)
        if memos:
            conn.executemany(UPSERT_MEMO, memos)
        if ck is not None:
            has_bases = len(ck_row) == 11
            conn.execute(UPSERT_CHECKPOINT if has_bases else UPSERT_CHECKPOINT_NO_BASES, ck_row)
        if chans:
            for i in large:
                cur = conn.execute("INSERT INTO gf_blobs (data) VALUES (?)", (chans[i][6],))
                conn.execute(INSERT_LARGE_CHANNEL, (*chans[i][:6], cur.lastrowid, chans[i][7]))
            if large:
                chans = [row for i, row in enumerate(chans) if i not in large]
            if len(chans) == 1:
                conn.execute(INSERT_CHANNEL, chans[0])
            elif chans:
                conn.executemany(INSERT_CHANNEL, chans)
            for c in folds:
                fold_chain(conn, thread_id, batch.ns, c)
        if pauses:
            conn.executemany(UPSERT_PAUSE, pauses)
        if enc.answers:
            insert_answers(conn, enc.answers)
        # The runnable index (marks); a thread this transaction made has no mark to remove.
        if batch.thread is not None and not (created and batch.runnable_at is None):
            marks.after_commit(conn, thread_id, batch)


def _unfenced(conn: sqlite3.Connection, thread_id: str) -> CheckpointError:
    """The fenced update matched no row, yet lease and head are right: the row's checksum."""
    return checks.damaged(thread_id, None, "thread row", "checksum mismatch")


def _create_thread(
    conn: sqlite3.Connection,
    thread_id: str,
    owner: str,
    batch: CommitBatch,
    enc: EncodedBatch,
    ttl: float,
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
        enc.pending,
        len(ids),
        t,
    )
    return conn.execute(INSERT_THREAD, values).rowcount == 1
