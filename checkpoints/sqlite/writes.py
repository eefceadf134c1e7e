"""Writes of ``SqliteCheckpointer`` other than the commit: leases, answers, decisions and
tool dispatches, each inside its caller's write transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from checkpoints.errors import LeaseHeldError
from checkpoints.fencing import claim_refused
from checkpoints.lease import lease_free
from checkpoints.models import (
    AnswerRecord,
    DecisionRecord,
    DispatchRecord,
    ThreadId,
    ThreadRecord,
    now,
)
from checkpoints.sqlite import reads
from checkpoints.sqlite.reads_records import next_seq
from checkpoints.sqlite.rows import checks, records, threads

INSERT_THREAD = (  # ?1-?14: the row's values and checksums; its counts from what exists
    "INSERT INTO gf_threads (thread_id, status, head, graph_name, lease_owner,"
    " lease_expires_at, pending_pause_ids, pending_count, created_at, updated_at, crc, head_crc,"
    " lease_crc, info_crc, n_checkpoints, newest, n_pauses, n_answers, n_decisions,"
    " n_dispatches) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
    " (SELECT count(*) FROM gf_checkpoints WHERE thread_id = ?1 AND ns = '')"
    " + (?3 IS NOT NULL AND NOT EXISTS (SELECT 1 FROM gf_checkpoints WHERE thread_id = ?1"
    " AND ns = '' AND id = ?3)),"  # (the head, when given, is inserted next)
    " nullif((SELECT max(id) FROM (SELECT id FROM gf_checkpoints WHERE thread_id = ?1"
    " AND ns = '' UNION ALL SELECT ?3)), ?3),"  # (NULL: the head is the newest)
    " (SELECT count(*) FROM gf_pauses WHERE thread_id = ?1),"
    " (SELECT count(*) FROM gf_answers WHERE thread_id = ?1),"
    " (SELECT count(*) FROM gf_decisions WHERE thread_id = ?1),"
    " (SELECT count(*) FROM gf_dispatches WHERE thread_id = ?1))"
    " ON CONFLICT (thread_id) DO NOTHING"
)
INSERT_ANSWER = (
    "INSERT INTO gf_answers (seq, thread_id, pause_id, value, by, reason, created_at, crc)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_DECISION = (
    "INSERT INTO gf_decisions (seq, thread_id, call_id, verdict, fingerprint, by, reason,"
    " applied, note, created_at, pause_id, extra, crc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
    " ?, ?)"
)
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
    """The first 14 values of ``INSERT_THREAD``: a new thread row and its checksums."""
    return (
        thread_id, status, head, graph_name, owner, expires, pending, pending_count, t, t,
        threads.thread_crc(thread_id, status, graph_name, pending, pending_count, t, t),
        threads.head_crc(thread_id, head), threads.lease_crc(thread_id, owner, expires),
        threads.info_crc(thread_id, status, t, pending_count, graph_name, t),
    )  # fmt: skip


def take_lease(
    conn: sqlite3.Connection, thread_id: str, owner: str, ttl: float, graph_name: str | None
) -> ThreadRecord:
    """Take the lease inside the caller's write transaction, creating the row if missing."""
    t = now()
    row = reads.thread_row(conn, thread_id)
    if row is None:
        if conn.execute(INSERT_THREAD, thread_values(
            thread_id, "running", None, graph_name, owner, t + ttl, None, 0, t
        )).rowcount != 1:  # fmt: skip
            raise AssertionError("a thread row appeared inside a write transaction")
        tid = ThreadId(thread_id)
        return ThreadRecord(tid, "running", None, graph_name, owner, t + ttl, (), t, t)
    return lease_existing(conn, thread_id, owner, ttl, row)


def lease_existing(
    conn: sqlite3.Connection, thread_id: str, owner: str, ttl: float, row: Any
) -> ThreadRecord:
    """``_take_lease`` for a thread whose row (``THREAD``'s columns) was just read."""
    t = now()
    rec = threads.thread(thread_id, row)
    if not lease_free(rec.lease_owner, rec.lease_expires_at, owner, t):
        raise LeaseHeldError(thread_id, rec.lease_owner)
    expires = t + ttl
    conn.execute(
        "UPDATE gf_threads SET lease_owner = ?, lease_expires_at = ?, lease_crc = ?"
        " WHERE thread_id = ?",
        (owner, expires, threads.lease_crc(thread_id, owner, expires), thread_id),
    )
    rec.lease_owner, rec.lease_expires_at = owner, expires
    return rec


def insert_answers(conn: sqlite3.Connection, answers: Sequence[tuple[AnswerRecord, bytes]]) -> None:
    """Append answers (serialized values given) inside the caller's write transaction."""
    seq = next_seq(conn, "gf_answers")
    conn.executemany(
        INSERT_ANSWER, [records.answer_row(seq + i, a, blob) for i, (a, blob) in enumerate(answers)]
    )


def renew_lease(conn: sqlite3.Connection, thread_id: str, owner: str, ttl: float) -> bool:
    """Extend ``owner``'s lease; False when the update matched nothing."""
    expires = now() + ttl
    crc = threads.lease_crc(thread_id, owner, expires)
    return bool(conn.execute(RENEW, (expires, crc, thread_id, owner)).rowcount == 1)


def release_lease(conn: sqlite3.Connection, thread_id: str, owner: str) -> bool:
    """Give ``owner``'s lease up; False when the update matched nothing."""
    crc = threads.lease_crc(thread_id, None, None)
    return bool(conn.execute(RELEASE, (crc, thread_id, owner)).rowcount == 1)


def insert_decisions(
    conn: sqlite3.Connection, decisions: Sequence[DecisionRecord], extras: Sequence[bytes | None]
) -> None:
    """Append decisions (their ``extra`` serialized) inside the caller's write transaction."""
    seq = next_seq(conn, "gf_decisions")
    conn.executemany(
        INSERT_DECISION,
        [records.decision_row(seq + i, d, x)
         for i, (d, x) in enumerate(zip(decisions, extras, strict=True))],
    )  # fmt: skip


def claim_row(r: DispatchRecord) -> tuple[Any, ...]:
    """A claim as stored (like MemoryCheckpointer, a claim stores no result: NULL)."""
    claimed, completed = checks.time_value(r.claimed_at), checks.time_value(r.completed_at)
    assert claimed is not None
    crc = records.dispatch_crc(r.thread_id, r.call_id, r.tool, r.fingerprint, r.owner,
                               r.status, None, r.error, claimed, completed)  # fmt: skip
    return (r.thread_id, r.call_id, r.tool, r.fingerprint, r.owner, r.status, None, r.error,
            claimed, completed, crc)  # fmt: skip


def insert_claim(conn: sqlite3.Connection, row: tuple[Any, ...]) -> bool:
    """Insert a claim; False when the primary key says the call was claimed already."""
    cur = conn.execute(
        "INSERT INTO gf_dispatches VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (thread_id, call_id) DO NOTHING",
        row,
    )
    return bool(cur.rowcount == 1)


def claim(conn: sqlite3.Connection, record: DispatchRecord, row: tuple[Any, ...]) -> bool:
    """Insert a claim (``claim_row``) unless the thread is frozen or its lease is not the
    claimer's (``checkpoints.fencing.claim_refused``; its row is checked: damage raises);
    False when the call was claimed already."""
    found = reads.thread_row(conn, record.thread_id)
    rec = threads.thread(record.thread_id, found) if found is not None else None
    if (refused := claim_refused(record.thread_id, rec, record.owner)) is not None:
        raise refused
    return insert_claim(conn, row)


def complete_claim(
    conn: sqlite3.Connection,
    claim: DispatchRecord,
    status: str,
    result: bytes | None,
    error: str | None,
    done: float,
) -> None:
    """Record the outcome of ``claim`` (read and checked in this transaction)."""
    tid, cid = claim.thread_id, claim.call_id
    crc = records.dispatch_crc(tid, cid, claim.tool, claim.fingerprint, claim.owner, status,
                               result, error, claim.claimed_at, done)  # fmt: skip
    conn.execute(
        "UPDATE gf_dispatches SET status = ?, result = ?, error = ?, completed_at = ?, crc = ?"
        " WHERE thread_id = ? AND call_id = ?",
        (status, result, error, done, crc, tid, cid),
    )
