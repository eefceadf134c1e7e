"""Reads of ``SqliteCheckpointer``: every SELECT of threads, checkpoints and channels (the
records of a step are read by ``reads_records``), shared by its methods and by
``resume_thread``, which makes several of them in one transaction.

Each function runs inside its caller's transaction (or is one statement) and decodes what
it read through ``rows`` (checksums, types, shapes). Reads of a collection (a namespace's
checkpoints, the threads of a status) compare the rows found with the count stored for it:
a row whose key was damaged moves out of every read, and only the count shows it is gone.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from checkpoints import chunks
from checkpoints.encoding import load_value, missing_channel
from checkpoints.errors import CorruptCheckpointError, head_missing
from checkpoints.models import (
    ChannelWrite,
    CheckpointRecord,
    ThreadRecord,
)
from checkpoints.serde import dumps
from checkpoints.sqlite.rows import checks, steps, threads

THREAD = f"SELECT {threads.THREAD_COLS} FROM gf_threads WHERE thread_id = ?"
THREAD_PROBE = (
    "SELECT EXISTS (SELECT 1 FROM gf_threads WHERE thread_id = ?1),"
    " EXISTS (SELECT 1 FROM gf_checkpoints WHERE thread_id = ?1)"
)
"""Whether a thread's row and any of its checkpoints exist, on one snapshot."""
CKPT = f"SELECT {steps.CKPT_COLS} FROM gf_checkpoints"

THREAD_AND_HEAD = (
    f"SELECT {', '.join('t.' + c.strip() for c in threads.THREAD_COLS.split(','))},"
    f" {', '.join('c.' + c.strip() for c in steps.CKPT_COLS.split(','))}"
    " FROM gf_threads t LEFT JOIN gf_checkpoints c"
    " ON c.thread_id = t.thread_id AND c.ns = '' AND c.id = t.head WHERE t.thread_id = ?"
)
_NT = len(threads.THREAD_COLS.split(","))  # the columns of the thread row in THREAD_AND_HEAD


def thread_is_missing(conn: sqlite3.Connection, thread_id: str) -> CorruptCheckpointError | None:
    """For a thread row not found: damage if the thread has checkpoints (its row moved)."""
    if conn.execute(
        "SELECT 1 FROM gf_checkpoints WHERE thread_id = ? LIMIT 1", (thread_id,)
    ).fetchone():
        return checks.damaged(thread_id, None, "thread row", "missing, its checkpoints are not")
    return None


MISSED = object()
"""What a lookup returns, asked not to check a miss (``check_miss=False``): the caller looks
again in a read transaction, where the miss is checked on one snapshot."""


def read_thread_and_head(
    conn: sqlite3.Connection, thread_id: str, *, check_miss: bool = True
) -> tuple[ThreadRecord, Sequence[Any], CheckpointRecord | None, Sequence[Any]] | None:
    """The thread (decoded; its raw row for the counts) and its head checkpoint (decoded;
    its raw row), or None when the thread does not exist. A missing head row is damage."""
    row = conn.execute(THREAD_AND_HEAD, (thread_id,)).fetchone()
    if row is None:
        if not check_miss:
            return MISSED  # type: ignore[return-value]
        missing = thread_is_missing(conn, thread_id)
        if missing is not None:
            raise missing
        return None
    thread_row, ck_row = row[:_NT], row[_NT:]
    thread = threads.thread(thread_id, thread_row)
    if thread.head is None:
        return thread, thread_row, None, ck_row
    if ck_row[0] is None:  # a head without its checkpoint: never guess
        raise head_missing(thread_id, thread.head)
    return thread, thread_row, steps.checkpoint(thread_id, "", ck_row), ck_row


def _check_checkpoints(conn: sqlite3.Connection, thread_id: str, ns: str) -> None:
    """After a checkpoint was not found by id: damage if the namespace lost a row (its
    count), or holds one whose key changed (its checksum, so every row is decoded)."""
    found = conn.execute(CKPT + " WHERE thread_id = ? AND ns = ?", (thread_id, ns)).fetchall()
    for row in found:
        steps.checkpoint(thread_id, ns, row)
    if ns == "":
        anchor = conn.execute(
            "SELECT n_checkpoints FROM gf_threads WHERE thread_id = ?", (thread_id,)
        ).fetchone()
    else:
        anchor = conn.execute(
            "SELECT n_checkpoints FROM gf_namespaces WHERE thread_id = ? AND ns = ?",
            (thread_id, ns),
        ).fetchone()
    if anchor is None:
        if found and ns != "":
            raise checks.damaged(thread_id, None, f"namespace {ns!r}", "its count is missing")
        return
    checks.count(thread_id, f"checkpoints of namespace {ns!r}", anchor[0], len(found))


def read_checkpoint(
    conn: sqlite3.Connection,
    thread_id: str,
    ns: str,
    checkpoint_id: str | None,
    *,
    check_miss: bool = True,
) -> CheckpointRecord | None:
    """A checkpoint by id, or the newest of ``ns`` (the thread head for the root); call in a
    read transaction (or with ``check_miss=False``: a lookup of one statement, ``MISSED``
    when it found nothing or needs more statements).

    A head whose checkpoint row is missing raises ``CorruptCheckpointError``: the thread is
    not mistaken for a new one.
    """
    if checkpoint_id is not None:
        sql = CKPT + " WHERE thread_id = ? AND ns = ? AND id = ?"
        row = conn.execute(sql, (thread_id, ns, checkpoint_id)).fetchone()
        if row is not None:
            return steps.checkpoint(thread_id, ns, row)
        if not check_miss:
            return MISSED  # type: ignore[return-value]
        _check_checkpoints(conn, thread_id, ns)
        return None
    if ns == "":  # the root's newest is the thread head
        found = read_thread_and_head(conn, thread_id, check_miss=check_miss)
        if found is MISSED:
            return MISSED  # type: ignore[return-value]
        return found[2] if found is not None else None
    if not check_miss:
        return MISSED  # type: ignore[return-value]
    newest = conn.execute(
        "SELECT newest, n_checkpoints FROM gf_namespaces WHERE thread_id = ? AND ns = ?",
        (thread_id, ns),
    ).fetchone()
    row = conn.execute(
        CKPT + " WHERE thread_id = ? AND ns = ? ORDER BY id DESC LIMIT 1", (thread_id, ns)
    ).fetchone()
    if row is None and newest is None:
        return None
    if row is None or newest is None or row[0] != newest[0]:
        raise checks.damaged(
            thread_id, None, f"checkpoints of namespace {ns!r}",
            f"the newest is {row[0] if row else None!r}, its record says "
            f"{newest[0] if newest else None!r}",
        )  # fmt: skip
    return steps.checkpoint(thread_id, ns, row)


def list_checkpoints(
    conn: sqlite3.Connection, thread_id: str, ns: str, limit: int | None
) -> list[CheckpointRecord]:
    """Checkpoints of one namespace, newest first; call in a read transaction.

    Without a limit every row is counted against the namespace's count; with one, the first
    row read must be the newest.
    """
    sql = CKPT + " WHERE thread_id = ? AND ns = ? ORDER BY id DESC LIMIT ?"
    sql_limit = limit if limit is not None and limit >= 0 else -1
    found = conn.execute(sql, (thread_id, ns, sql_limit)).fetchall()
    if ns == "":
        anchor = conn.execute(
            "SELECT n_checkpoints, coalesce(newest, head) FROM gf_threads WHERE thread_id = ?",
            (thread_id,),
        ).fetchone()
    else:
        anchor = conn.execute(
            "SELECT n_checkpoints, newest FROM gf_namespaces WHERE thread_id = ? AND ns = ?",
            (thread_id, ns),
        ).fetchone()
    what = f"checkpoints of namespace {ns!r}"
    if anchor is None:
        if found and ns != "":
            raise checks.damaged(thread_id, None, what, "their count is missing")
        if found and thread_is_missing(conn, thread_id) is not None:
            raise checks.damaged(thread_id, None, "thread row", "missing, its checkpoints are not")
    elif sql_limit < 0:
        checks.count(thread_id, what, anchor[0], len(found))
    elif found and found[0][0] != anchor[1]:
        raise checks.damaged(thread_id, None, what, "the newest is not the one recorded")
    if limit is not None and limit < 0:
        found = found[:limit]  # Python slicing, as MemoryCheckpointer does
    return [steps.checkpoint(thread_id, ns, r) for r in found]


def read_channels(
    conn: sqlite3.Connection,
    thread_id: str,
    ns: str,
    versions: Mapping[str, int],
    bases: Mapping[str, tuple[int, int]],
) -> dict[str, Any]:
    """Channel values at ``versions``: one indexed query per channel."""
    return {
        channel: read_channel(conn, thread_id, ns, channel, version, bases.get(channel))
        for channel, version in versions.items()
    }


def read_channel(
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
            f"SELECT {steps.CHANNEL_COLS} FROM gf_channels c LEFT JOIN gf_blobs b"
            " ON b.id = c.blob_id WHERE thread_id=? AND ns=? AND channel=? AND base=?"
            " AND version=?"
        )
        row = conn.execute(sql, (thread_id, ns, channel, version, version)).fetchone()
        if row is None:
            raise missing_channel(thread_id, channel, version)
        [blob] = steps.channel_blobs(thread_id, ns, channel, [row], version)
        return load_value(blob, thread_id, None, what)
    sql = (
        f"SELECT {steps.CHANNEL_COLS} FROM gf_channels c LEFT JOIN gf_blobs b"
        " ON b.id = c.blob_id WHERE thread_id = ? AND ns = ? AND channel = ?"
        " AND base = ? AND version <= ? ORDER BY version"
    )
    found = conn.execute(sql, (thread_id, ns, channel, base[0], version)).fetchall()
    if not found or found[0][1] != base[0]:  # the row the chain starts from
        raise missing_channel(thread_id, channel, base[0])
    folded = None
    if len(found) - 1 != base[1]:  # a chain folded into the chunk that closed it?
        folded = folded_chain(conn, thread_id, ns, channel, base)
        found = found[:1]
    blobs = steps.channel_blobs(thread_id, ns, channel, found, base[0])
    value = load_value(blobs[0], thread_id, None, what)
    if found[0][0] == "chunk":  # the items before it are in the rows it links back to

        def row_at(v: int) -> tuple[str, Any]:
            row = conn.execute(START_ROW, (thread_id, ns, channel, v, v)).fetchone()
            if row is None:
                raise missing_channel(thread_id, channel, v)
            [blob] = steps.channel_blobs(thread_id, ns, channel, [row], v)
            return row[0], load_value(blob, thread_id, None, what)

        value = chunks.start_value(thread_id, channel, base[0], "chunk", value, row_at)
    if type(value) is not list:
        raise checks.bad_shape(thread_id, None, what, "a list channel's value is not a list")
    for blob in blobs[1:]:
        part = load_value(blob, thread_id, None, what)
        if type(part) is not list:
            raise checks.bad_shape(thread_id, None, what, "appended items are not a list")
        value.extend(part)
    if folded is not None:
        value.extend(folded)
    elif len(found) - 1 != base[1]:
        raise missing_channel(thread_id, channel, version)
    return value


CLOSED_BY = (
    "SELECT version, crc FROM gf_channels WHERE thread_id = ? AND ns = ? AND channel = ?"
    " AND base = ? AND kind = 'closed'"
)
"""The ``closed`` row of a folded chain (``commit.fold_chain``): at its chunk's version."""


def closed_at(
    conn: sqlite3.Connection, thread_id: str, ns: str, channel: str, base: int
) -> int | None:
    """The version of the chunk that the chain from ``base`` was folded into (its
    ``closed`` row, checked), or None if the chain was not folded."""
    rows = conn.execute(CLOSED_BY, (thread_id, ns, channel, base)).fetchall()
    if not rows:
        return None
    if len(rows) != 1:  # (one per chain: its chunk's version)
        raise checks.damaged(thread_id, None, f"channel {channel!r}", "two chunks closed it")
    [(at, stored)] = rows
    try:
        ok = stored == checks.channel_crc(thread_id, ns, channel, at, "closed", base, b"")
    except (TypeError, AttributeError, OverflowError):
        ok = False
    if not ok or type(at) is not int:
        raise checks.damaged(thread_id, None, f"channel {channel!r}", "checksum mismatch")
    return at


def folded_chain(
    conn: sqlite3.Connection, thread_id: str, ns: str, channel: str, base: tuple[int, int]
) -> list[Any] | None:
    """The items of the first ``base[1]`` appends of the chain from ``base[0]``, read from
    the chunk it was folded into; None if the chain was not folded (rows are missing)."""
    at = closed_at(conn, thread_id, ns, channel, base[0])
    if at is None:
        return None
    row = conn.execute(START_ROW, (thread_id, ns, channel, at, at)).fetchone()
    if row is None or row[0] != "chunk":
        raise missing_channel(thread_id, channel, at)
    [blob] = steps.channel_blobs(thread_id, ns, channel, [row], at)
    chunk = load_value(blob, thread_id, None, f"channel {channel!r}")
    return chunks.folded_items(thread_id, channel, chunk, at, base[0], base[1])


START_ROW = (
    f"SELECT {steps.CHANNEL_COLS} FROM gf_channels c LEFT JOIN gf_blobs b ON b.id = c.blob_id"
    " WHERE thread_id = ? AND ns = ? AND channel = ? AND base = ? AND version = ?"
)
"""A chain's start row (a ``set`` or a ``chunk``: its base is its own version)."""
CHAIN_APPENDS = (
    f"SELECT {steps.CHANNEL_COLS} FROM gf_channels c LEFT JOIN gf_blobs b ON b.id = c.blob_id"
    " WHERE thread_id = ? AND ns = ? AND channel = ? AND base = ? AND version > ?"
    " AND version < ? ORDER BY version"
)
"""The appends of a chain, before a version."""


def chunk_blob(conn: sqlite3.Connection, thread_id: str, ns: str, c: ChannelWrite) -> bytes:
    """The stored bytes of a chunk write (``checkpoints.chunks``): the items of the chain
    it closes, checked to be the ``c.count`` appends made, and its own."""
    assert c.base is not None and c.count is not None
    args = (thread_id, ns, c.channel, c.base, c.base, c.version)
    found = conn.execute(CHAIN_APPENDS, args).fetchall()
    if not found and closed_at(conn, thread_id, ns, c.channel, c.base) == c.version:
        # Committed before (its chain folded into it): the same chunk again.
        row = conn.execute(START_ROW, (thread_id, ns, c.channel, c.version, c.version)).fetchone()
        if row is not None and row[0] == "chunk":
            return steps.channel_blobs(thread_id, ns, c.channel, [row], c.version)[0]
    chunks.check_chain(thread_id, c.channel, c.version, len(found), c.count)
    what = f"channel {c.channel!r}"
    appended = []
    for blob in steps.append_blobs(thread_id, ns, c.channel, found, c.base):
        part = load_value(blob, thread_id, None, what)
        if type(part) is not list:
            raise checks.bad_shape(thread_id, None, what, "appended items are not a list")
        appended.append(part)
    return dumps(chunks.chunk_value(c.base, appended, c.value), key=c.channel)


def thread_row(conn: sqlite3.Connection, thread_id: str) -> Any:
    """The thread's raw row (``threads.THREAD_COLS``), or None."""
    return conn.execute(THREAD, (thread_id,)).fetchone()


def get_thread(conn: sqlite3.Connection, thread_id: str) -> ThreadRecord | None:
    """The thread's row, or None when the thread does not exist (and has no checkpoints: a
    row missing from a thread that has some is damage)."""
    row = thread_row(conn, thread_id)
    if row is not None:
        return threads.thread(thread_id, row)
    # A miss is checked on one snapshot: one statement (no transaction to open and end, on
    # every new thread's first run: W5) looks for the row again and probes the checkpoints.
    exists, has_checkpoints = conn.execute(THREAD_PROBE, (thread_id,)).fetchone()
    if exists:  # made since the first look
        row = thread_row(conn, thread_id)
        return threads.thread(thread_id, row) if row is not None else None
    if has_checkpoints:
        raise checks.damaged(thread_id, None, "thread row", "missing, its checkpoints are not")
    return None


def check_thread_row(conn: sqlite3.Connection, thread_id: str) -> None:
    """Raise if the thread row is damaged (an update of the lease matched nothing: the lease
    was not this owner's, or the row is damaged)."""
    row = thread_row(conn, thread_id)
    if row is not None:
        threads.thread(thread_id, row)
