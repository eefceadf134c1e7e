"""Listing and counting threads of the SQLite store: every SELECT of ``list_threads`` and
``count_threads`` (the status index, ``threads_by_id``, the counts the triggers keep)."""

from __future__ import annotations

import contextlib
import gc
import sqlite3
from collections.abc import Iterator

from checkpoints.errors import CorruptCheckpointError
from checkpoints.models import THREAD_STATUSES, ThreadInfo
from checkpoints.sqlite.rows import checks, threads

INFO = f"SELECT {threads.INFO_COLS} FROM gf_threads"
INFO_OF_STATUS = (  # every column from the threads_by_status index: no row is looked up
    f"SELECT {threads.INFO_OF_STATUS_COLS} FROM gf_threads WHERE status = ?"
    " ORDER BY updated_at DESC, thread_id DESC"
)
_PAGE = f"SELECT {threads.INFO_COLS} FROM gf_threads"
_PAGE_OF = f"SELECT {threads.INFO_OF_STATUS_COLS} FROM gf_threads WHERE status = :status"
_BY_ID = " ORDER BY thread_id LIMIT :limit"
PAGES = {  # (of one status, after a cursor): a range of threads_by_id, or of the table's key
    (False, False): _PAGE + _BY_ID,
    (False, True): _PAGE + " WHERE thread_id > :after" + _BY_ID,
    (True, False): _PAGE_OF + _BY_ID,
    (True, True): _PAGE_OF + " AND thread_id > :after" + _BY_ID,
}


def thread_counts(conn: sqlite3.Connection) -> dict[str, int]:
    """The number of threads of each status that has had any (``gf_thread_counts``, a row
    per status), each row checked against its tally (migration ``0004_paging``)."""
    counts: dict[str, int] = {}
    for status, n, tally in conn.execute("SELECT status, n, tally FROM gf_thread_counts"):
        if not (
            type(status) is str and status in THREAD_STATUSES and checks.is_count(n)
            and tally == f"{status}:{n}"
        ):  # fmt: skip
            raise CorruptCheckpointError(
                f"the count of threads of status {status!r:.40} is damaged ({n!r:.40}, "
                f"tally {tally!r:.60}); restore the store from a backup"
            )
        counts[status] = n
    return counts


def count_threads(conn: sqlite3.Connection, status: str | None) -> int:
    """How many threads there are (of one status): the counts alone (one statement)."""
    counts = thread_counts(conn)
    return sum(counts.values()) if status is None else counts.get(status, 0)


def _check_count(status: str | None, found: int, total: int) -> None:
    if total != found:
        raise CorruptCheckpointError(
            f"the threads{' of status ' + repr(status) if status else ''} are damaged: "
            f"{found} found where their count says {total}; restore the store from a backup"
        )


LARGE_LISTING = 1000
"""A page of at least this many threads (or an unpaged listing) is read with the garbage
collector paused (``gc_paused``)."""


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a listing builds its objects (two per
    thread, none of them in a cycle): collections triggered by their number, which scan every
    object of the process, took over a third of a listing of 100,000 threads
    (``benchmarks/paused_threads.py``). Left as it was if something else had paused it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def list_threads(conn: sqlite3.Connection, status: str | None) -> list[ThreadInfo]:
    """Threads, most recently updated first (of one status: a range of the status index),
    counted against the number of threads of that status (or of all); call in a read
    transaction."""
    with gc_paused():
        if status is None:
            found = conn.execute(INFO + " ORDER BY updated_at DESC, thread_id DESC").fetchall()
            _check_count(status, len(found), count_threads(conn, status))
            return [threads.info(r) for r in found]
        found = conn.execute(INFO_OF_STATUS, (status,)).fetchall()
        _check_count(status, len(found), count_threads(conn, status))
        return threads.infos_of(status, found)


def page_threads(
    conn: sqlite3.Connection, status: str | None, limit: int | None, after: str | None
) -> list[ThreadInfo]:
    """A page of threads in thread-id order (``Checkpointer.list_threads``): one range of
    ``threads_by_id`` (of every status: of the table's key) from the cursor; call in a read
    transaction.

    A page can be compared with the count only when it holds the whole range (it starts
    at the first thread and ends before ``limit``); any other is checked row by row.
    """
    sql = PAGES[status is not None, after is not None]
    size = -1 if limit is None else min(limit, checks.INT64 - 1)
    with gc_paused() if limit is None or limit >= LARGE_LISTING else contextlib.nullcontext():
        found = conn.execute(sql, {"status": status, "after": after, "limit": size}).fetchall()
        if after is None and (limit is None or len(found) < limit):
            _check_count(status, len(found), count_threads(conn, status))
        if status is not None:
            return threads.infos_of(status, found)
        return [threads.info(r) for r in found]
