"""Migration 0003: the runnable index (``Checkpointer.mark_runnable``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # sqlite_utils (and numpy, which it imports) load only to migrate
    from sqlite_utils import Database

NAME = "0003_runnable"


def migrate(db: Database) -> None:
    """At most one row per thread, due times indexed so that a worker finds what is due
    without a scan of threads. An index, not a record: nothing is appended, and a lost row
    only delays a resume (so no checksums)."""
    db.execute(
        "CREATE TABLE gf_runnable (thread_id TEXT PRIMARY KEY, reason TEXT NOT NULL,"
        " due_at REAL NOT NULL, marked_at REAL NOT NULL) WITHOUT ROWID"
    )
    db.execute("CREATE INDEX gf_runnable_due ON gf_runnable (due_at, thread_id)")
