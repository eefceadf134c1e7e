"""Migration 0004: pages of threads in thread-id order, and counts that vouch for themselves."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # sqlite_utils (and numpy, which it imports) load only to migrate
    from sqlite_utils import Database

NAME = "0004_paging"

# A count row's tally is its status and count as text (``paused:41``): kept by the same
# statements as the count, and only while it agrees with it, so that damage stays visible.
_COUNT_UP = (
    "INSERT INTO gf_thread_counts (status, n, tally) VALUES (NEW.status, 1, NEW.status || ':1')"
    " ON CONFLICT (status) DO UPDATE SET n = n + 1, tally = status || ':' || (n + 1)"
    " WHERE tally = status || ':' || n;"
)


def migrate(db: Database) -> None:
    """An index of each status's threads by id, and a tally on every count of threads.

    - ``list_threads(status, limit=, after=)`` pages through a status in thread-id order:
      ``threads_by_id (status, thread_id)`` is that order, so a page is one range of it
      from the cursor (a page of every status is a range of the table's own key). Like
      ``threads_by_status`` (most recently updated first, what a listing without paging
      keeps), its columns change only with the status: a step's commit touches neither.
      It holds no more columns: a page reads its ``limit`` rows from the table, and the
      index stays small (a status change writes both).
    - ``count_threads`` reads ``gf_thread_counts`` alone, without rows to compare the count
      with, so each row gains ``tally`` (``status || ':' || n``), kept by the triggers of
      ``0002_checksums`` in the same statements, and only while it agrees: a changed,
      erased or swapped count or status is seen, and not mended by the next change. The
      counts of an existing file are taken as they are (a listing still compares them
      with the rows).
    """
    x = db.execute
    x("CREATE INDEX threads_by_id ON gf_threads (status, thread_id)")
    x("ALTER TABLE gf_thread_counts ADD COLUMN tally TEXT NOT NULL DEFAULT ''")
    x("UPDATE gf_thread_counts SET tally = status || ':' || n")
    x("DROP TRIGGER gf_count_thread")
    x(f"CREATE TRIGGER gf_count_thread AFTER INSERT ON gf_threads BEGIN {_COUNT_UP} END")
    x("DROP TRIGGER gf_count_status")
    x(
        "CREATE TRIGGER gf_count_status AFTER UPDATE OF status ON gf_threads"
        " WHEN NEW.status IS NOT OLD.status AND NEW.info_crc IS NOT OLD.info_crc BEGIN"
        " UPDATE gf_thread_counts SET n = n - 1, tally = status || ':' || (n - 1)"
        " WHERE status = OLD.status AND tally = status || ':' || n;"
        f" {_COUNT_UP} END"
    )
