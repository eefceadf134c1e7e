"""Waiting for another process's write lock: short, jittered, bounded tries of our own.

SQLite's own busy handler sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50 and then 100 ms
between tries. Under contention a waiter often sleeps on long after the lock was freed, and
one that has waited longest sleeps longest, so newcomers overtake it: with several
processes committing to one file, the slowest thread's latency grows far beyond the
queue's (the scale benchmark's "many processes" curve). So the store's connection has no
busy handler (``timeout=0``: a locked file answers ``SQLITE_BUSY`` at once), and
``Connection.call`` tries a call again that met ``SQLITE_BUSY`` before it changed anything
(``may_retry``), after a pause drawn at random below a cap that doubles from ``FIRST`` to
``CAP`` (``pause``): waiters look again within a couple of milliseconds of the lock being
freed, and in random order, for at most ``busy_timeout`` in all (then ``StoreLockedError``,
nothing written, as before).
"""

from __future__ import annotations

import math
import random
import sqlite3

FIRST = 0.0001
"""The cap of the first pause (seconds)."""
CAP = 0.002
"""The longest pause between two tries (seconds): a waiter looks again at least this often."""


def is_busy(e: sqlite3.DatabaseError) -> bool:
    """Whether ``e`` says another connection holds a lock this one needs (``SQLITE_BUSY``,
    extended codes included)."""
    return getattr(e, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY


def may_retry(before: int | None, after: int | None) -> bool:
    """Whether a call that met ``SQLITE_BUSY`` can run again whole: it changed no row
    (``total_changes`` of its connection before and after it ran; ``before`` None: it never
    ran, the connection could not be opened; ``after`` None: the connection was dropped,
    so what it changed is unknown). Every write of the store takes the lock first (``BEGIN
    IMMEDIATE``), so a busy call has written nothing, but a call that committed a
    transaction before it met the lock must not run again."""
    return before is None or (after is not None and before == after)


_DOUBLINGS = math.ceil(math.log2(CAP / FIRST))
"""Tries after which the cap stays at ``CAP`` (``2.0 ** attempt`` itself overflows a float
at try 1024, a couple of seconds of waiting)."""


def pause(attempt: int) -> float:
    """Seconds to wait before try ``attempt + 2``: uniform below a cap doubling from
    ``FIRST`` to ``CAP`` (jitter spreads waiters that looked at the same moment)."""
    return random.uniform(0.0, min(CAP, FIRST * 2.0 ** min(attempt, _DOUBLINGS)))
