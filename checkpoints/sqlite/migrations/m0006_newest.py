"""Migration 0006: a thread row stores its newest root checkpoint only when it is not the head.

``gf_threads.newest`` (the greatest root checkpoint id, checked when history is listed) is
the head in nearly every thread: from this version it is NULL then and read as
``coalesce(newest, head)`` (22 bytes fewer a paused thread, ``benchmarks/paused_threads.py``).
The migration clears it where it repeats the head, and marks the file as one that older
versions, which would take the NULL for damage, refuse to open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # sqlite_utils (and numpy, which it imports) load only to migrate
    from sqlite_utils import Database

NAME = "0006_newest"


def migrate(db: Database) -> None:
    db.execute("UPDATE gf_threads SET newest = NULL WHERE newest = head")
