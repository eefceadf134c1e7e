"""Thread rows: their three checksums, the row and the status-index view (see ``checks``)."""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Sequence
from typing import Any, cast

from checkpoints.encoding import load_value
from checkpoints.models import (
    THREAD_STATUSES,
    PauseId,
    ThreadId,
    ThreadInfo,
    ThreadRecord,
    ThreadStatus,
)
from checkpoints.serde.encode import checksum_packer
from checkpoints.sqlite.rows.checks import (
    INT64,
    bad_shape,
    crc,
    damaged,
    is_count,
    is_opt_str,
    is_opt_time,
    is_time,
)

# -- threads --------------------------------------------------------------------------------

THREAD_COLS = (
    "status, head, graph_name, lease_owner, lease_expires_at, pending_pause_ids, created_at,"
    " updated_at, pending_count, crc, head_crc, lease_crc, n_checkpoints, newest, n_pauses,"
    " n_answers, n_decisions, n_dispatches"
)
"""What ``thread`` decodes (the row ``reads.THREAD`` reads); the counts follow it."""
N_CHECKPOINTS, NEWEST, N_PAUSES, N_ANSWERS, N_DECISIONS, N_DISPATCHES = range(12, 18)

# A thread row has three checksums, so that the writes of a run recompute only what they
# change from values they know (no SQL callback on a step's commit): the head (every step),
# the lease (taken, renewed, given up), and the rest (status changes).


def thread_crc(
    thread_id: str,
    status: str,
    graph_name: str | None,
    pending: bytes | None,
    pending_count: int,
    created_at: float,
    updated_at: float,
) -> int:
    """The checksum of a thread row's status columns."""
    return crc((thread_id, status, graph_name, pending, pending_count, created_at, updated_at))


def head_crc(thread_id: str, head: str | None) -> int:
    """The checksum of a thread row's head."""
    return crc((thread_id, head))


def lease_crc(thread_id: str, owner: str | None, expires_at: float | None) -> int:
    """The checksum of a thread row's lease."""
    return crc((thread_id, owner, expires_at))


def info_crc(
    thread_id: str,
    status: str,
    updated_at: float,
    pending_count: int,
    graph_name: str | None,
    created_at: float,
) -> int:
    """The checksum of the columns ``list_threads`` reads from the status index."""
    return crc((thread_id, status, updated_at, pending_count, graph_name, created_at))


def thread(thread_id: str, row: Sequence[Any]) -> ThreadRecord:
    """Decode a thread row (``THREAD_COLS``)."""
    status, head, graph, owner, expires, pending, created, updated, n = row[:9]
    stored, stored_head, stored_lease = row[9:12]
    what = "thread row"
    try:
        ok = (
            stored == thread_crc(thread_id, status, graph, pending, n, created, updated)
            and stored_head == head_crc(thread_id, head)
            and stored_lease == lease_crc(thread_id, owner, expires)
        )
    except TypeError:  # a column of a type no row holds
        ok = False
    if not ok or not (type(stored) is type(stored_head) is type(stored_lease) is int):
        raise damaged(thread_id, None, what, "checksum mismatch")
    if not (
        type(status) is str and status in THREAD_STATUSES and is_opt_str(head)
        and is_opt_str(graph) and is_opt_str(owner) and is_opt_time(expires)
        and is_time(created) and is_time(updated) and is_count(n)
        and (pending is None or type(pending) is bytes)
    ):  # fmt: skip
        raise bad_shape(thread_id, head, what, "a column of the wrong type or value")
    ids: tuple[PauseId, ...] = ()
    if pending is not None:
        found = load_value(pending, thread_id, head, "pending pauses")
        if type(found) is not list or not found or any(type(p) is not str for p in found):
            raise bad_shape(thread_id, head, "pending pauses", f"{found!r:.80}")
        ids = tuple(found)
    if len(ids) != n:
        raise bad_shape(thread_id, head, what, f"{len(ids)} pending pauses, count {n}")
    return ThreadRecord(
        ThreadId(thread_id), cast(ThreadStatus, status), head, graph, owner, expires, ids,
        created, updated,
    )  # fmt: skip


INFO_COLS = "thread_id, status, updated_at, pending_count, graph_name, created_at, info_crc"
INFO_OF_STATUS_COLS = "thread_id, updated_at, pending_count, graph_name, created_at, info_crc"
"""``INFO_COLS`` without the status, for rows read by status (``infos_of``)."""


def info(row: Sequence[Any]) -> ThreadInfo:
    """Decode a row of ``list_threads`` (``INFO_COLS``)."""
    tid, status, updated, n, graph, created, stored = row
    try:
        ok = stored == info_crc(tid, status, updated, n, graph, created)
    except TypeError:
        ok = False
    who = tid if type(tid) is str else repr(tid)
    if not ok or type(stored) is not int or type(tid) is not str:
        raise damaged(who, None, "thread row (in the status index)", "checksum mismatch")
    if not (
        type(status) is str and status in THREAD_STATUSES and is_time(updated)
        and is_count(n) and is_opt_str(graph) and is_time(created)
    ):  # fmt: skip
        raise bad_shape(tid, None, "thread row", "a column of the wrong type or value")
    return ThreadInfo(tid, cast(ThreadStatus, status), updated, n, graph, created)


def infos_of(status: str, rows: Iterable[Sequence[Any]]) -> list[ThreadInfo]:
    """Decode rows of threads of ``status`` (``INFO_OF_STATUS_COLS``): ``info``'s checks,
    inline (a listing decodes a row per thread: 100,000 in ``benchmarks/paused_threads.py``);
    a row that fails any is decoded by ``info``, which names what is wrong."""
    out: list[ThreadInfo] = []
    append, of = out.append, cast(ThreadStatus, status)
    pack, crc32, finite, limit = checksum_packer(), zlib.crc32, math.isfinite, INT64
    for row in rows:
        tid, updated, n, graph, created, stored = row
        if (
            type(tid) is str and type(updated) is float and type(created) is float
            and type(n) is int and (graph is None or type(graph) is str)
            and type(stored) is int and 0 <= n < limit and finite(updated) and finite(created)
            and crc32(pack((tid, status, updated, n, graph, created))) == stored
        ):  # fmt: skip
            append(ThreadInfo(tid, of, updated, n, graph, created))
        else:
            append(info((tid, status, *row[1:])))
    return out
