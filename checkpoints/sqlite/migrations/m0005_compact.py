"""Migration 0005: threads, tasks and pauses stored in their key's b-tree (WITHOUT ROWID)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # sqlite_utils (and numpy, which it imports) load only to migrate
    from sqlite_utils import Database

NAME = "0005_compact"

TABLES = ("gf_threads", "gf_tasks", "gf_pauses")

# Each table as rebuilt: its columns and key as before. ``gf_tasks`` gains ``ord``, the order
# a checkpoint's tasks were first written in (0, 1, ...), which its rowid gave before.
_NEW = {
    "gf_threads": (
        "thread_id TEXT NOT NULL, status TEXT NOT NULL, head TEXT, graph_name TEXT,"
        " lease_owner TEXT, lease_expires_at REAL, pending_pause_ids BLOB,"
        " pending_count INTEGER NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL,"
        " crc INTEGER, head_crc INTEGER, lease_crc INTEGER, info_crc INTEGER,"
        " n_checkpoints INTEGER NOT NULL DEFAULT 0, newest TEXT,"
        " n_pauses INTEGER NOT NULL DEFAULT 0, n_answers INTEGER NOT NULL DEFAULT 0,"
        " n_decisions INTEGER NOT NULL DEFAULT 0, n_dispatches INTEGER NOT NULL DEFAULT 0,"
        " PRIMARY KEY (thread_id)"
    ),
    "gf_tasks": (
        "thread_id TEXT NOT NULL, ns TEXT NOT NULL, checkpoint_id TEXT NOT NULL,"
        " task_id TEXT NOT NULL, node TEXT NOT NULL, status TEXT NOT NULL,"
        " attempts INTEGER NOT NULL, started_at REAL, ended_at REAL, error TEXT, body BLOB,"
        " crc INTEGER, ord INTEGER NOT NULL,"
        " PRIMARY KEY (thread_id, ns, checkpoint_id, task_id)"
    ),
    "gf_pauses": (
        "thread_id TEXT NOT NULL, id TEXT NOT NULL, ns TEXT NOT NULL,"
        " checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL, node TEXT NOT NULL,"
        " kind TEXT NOT NULL, value BLOB NOT NULL, created_at REAL NOT NULL, crc INTEGER,"
        " PRIMARY KEY (thread_id, id)"
    ),
}
_ORD = "row_number() OVER (PARTITION BY thread_id, ns, checkpoint_id ORDER BY rowid) - 1"


def migrate(db: Database) -> None:
    """Rebuild ``gf_threads``, ``gf_tasks`` and ``gf_pauses`` as WITHOUT ROWID tables.

    A rowid table keeps its rows in one b-tree and its primary key in another (the
    ``sqlite_autoindex_*``), and every row is written to both: the three tables a paused
    thread holds a row in paid about 140 bytes a thread for those key indexes
    (``benchmarks/paused_threads.py``), and each commit wrote their pages. Without a rowid
    the row lives in its key's b-tree alone. Reads in key order are unchanged; the one read
    in insertion order, a checkpoint's tasks (as first written), follows ``ord``, set on
    insert to the number of the checkpoint's tasks already stored (``commit.UPSERT_TASK``),
    here to their rowid order. Pauses listed oldest first are ordered by ``created_at``, ties
    by pause id (they were by rowid). Indexes and triggers on the three tables are made again
    as they were.
    """
    x = db.execute
    kept = [
        sql
        for (sql,) in x(
            "SELECT sql FROM sqlite_master WHERE type IN ('index', 'trigger') AND sql IS NOT"
            f" NULL AND tbl_name IN {TABLES!r}"
        ).fetchall()
    ]
    # (the old name, not the new table's, stays in the triggers of other tables)
    x("PRAGMA legacy_alter_table = ON")
    try:
        for table in TABLES:
            new = f"{table}_0005"
            x(f"CREATE TABLE {new} ({_NEW[table]}) WITHOUT ROWID")
            cols = [row[1] for row in x(f"PRAGMA table_info({table})").fetchall()]
            names = ", ".join(cols)
            extra = (", ord", f", {_ORD}") if table == "gf_tasks" else ("", "")
            x(
                f"INSERT INTO {new} ({names}{extra[0]}) SELECT {names}{extra[1]} FROM {table}"
                " ORDER BY rowid"
            )
            x(f"DROP TABLE {table}")
            x(f"ALTER TABLE {new} RENAME TO {table}")
    finally:
        x("PRAGMA legacy_alter_table = OFF")
    for sql in kept:
        x(sql)
