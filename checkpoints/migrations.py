"""Named schema migrations of the SQLite checkpoint store.

The schema of a store file changes only through the migrations listed in ``MIGRATIONS``,
applied in order. Each one is a ``(name, function)`` pair; a function gets a
``sqlite_utils.Database`` on the open connection and must not commit: ``apply`` runs inside
the caller's write transaction, so a file is either fully migrated or left as it was.

The file records what was applied in two tables of its own:

- ``_graphflow_meta`` (``key``, ``value``): ``schema_version`` is the number of migrations
  the file has (``SCHEMA_VERSION`` of the code that last migrated it);
- ``_graphflow_migrations`` (``name``, ``applied_at``): one row per applied migration.

Rules: never edit or reorder a released migration, only append new ones; a file whose
``schema_version`` is larger than this code's ``SCHEMA_VERSION``, or that lists a migration
this code does not know, was written by a newer graphflow and raises ``SchemaVersionError``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from checkpoints._sqlite_path import not_a_store
from checkpoints.errors import CorruptCheckpointError, SchemaVersionError

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "apply", "pending"]

if TYPE_CHECKING:  # sqlite_utils (and numpy, which it imports) load only to migrate
    from sqlite_utils import Database

Migration = tuple[str, Callable[["Database"], None]]


def _table(
    db: Database,
    name: str,
    columns: dict[str, type],
    pk: str | tuple[str, ...],
    *,
    nullable: tuple[str, ...] = (),
    without_rowid: bool = False,
) -> None:
    """Create a table whose columns are NOT NULL except ``nullable``.

    ``without_rowid`` stores rows in the primary-key b-tree itself: one b-tree (one page
    written per insert) instead of a table plus its key index. Used where rows are read in
    key order anyway; tables read in insertion order keep their rowid.
    """
    not_null = set(columns) - set(nullable)
    if not without_rowid:
        db.table(name).create(columns, pk=pk, not_null=not_null)
        return
    sql = db.create_table_sql(name, columns, pk=pk, not_null=not_null)
    db.execute(sql.rstrip().rstrip(";") + " WITHOUT ROWID")


def _initial(db: Database) -> None:
    """Tables of DESIGN.md "Stored records".

    Blobs are ``checkpoints.serde`` bytes; NULL stands for an empty or ``None`` value where
    noted, so small records stay small. Tasks, memos and pauses are upserted and read in
    first-insertion order (their rowid); append-only tables (answers, decisions) have an
    explicit ``seq``, so "oldest first" and "latest wins" follow insertion order.
    """
    _table(
        db,
        "gf_threads",
        {
            "thread_id": str,
            "status": str,
            "head": str,
            "graph_name": str,
            "lease_owner": str,
            "lease_expires_at": float,
            "pending_pause_ids": bytes,  # NULL when there are none
            "pending_count": int,  # len(pending_pause_ids): listing decodes nothing
            "created_at": float,
            "updated_at": float,
        },
        "thread_id",
        nullable=("head", "graph_name", "lease_owner", "lease_expires_at", "pending_pause_ids"),
    )
    # list_threads(status), newest first: a backwards range of this index. Its columns change
    # only with the status (updated_at moves with it), so a step's commit, which rewrites the
    # row's head, touches no index page.
    db.table("gf_threads").create_index(
        ["status", "updated_at", "thread_id", "pending_count", "graph_name", "created_at"],
        "threads_by_status",
    )
    _table(
        db,
        "gf_checkpoints",
        {
            "thread_id": str,
            "ns": str,
            "id": str,
            "parent_id": str,
            "step": int,
            "source": str,
            "channel_versions": bytes,
            "channel_bases": bytes,  # NULL when empty
            "body": bytes,  # [frontier as [id, node, has_arg, arg] lists, metadata]
            "created_at": float,
        },
        ("thread_id", "ns", "id"),
        nullable=("parent_id", "channel_bases"),
        without_rowid=True,
    )
    _table(
        db,
        "gf_channels",
        {
            "thread_id": str,
            "ns": str,
            "channel": str,
            "version": int,
            "kind": str,  # "set" or "append"
            "base": int,  # an append's base; a set row's own version (its chain starts there)
            "blob": bytes,  # NULL when the value is in gf_blobs
            "blob_id": int,  # the gf_blobs row of a large value
        },
        # A set row's base is its own version, so one key serves both reads: a set row is
        # (..., base=v, version=v), and a list channel is the set row at its base plus the
        # append rows of that base up to the version: one range of this key.
        ("thread_id", "ns", "channel", "base", "version"),
        nullable=("blob", "blob_id"),
        without_rowid=True,
    )
    # Values too large for a row of the WITHOUT ROWID channel table (whose rows over ~1 KB
    # would spill into a whole overflow page each) live in this rowid table, packed densely.
    _table(db, "gf_blobs", {"id": int, "data": bytes}, "id")
    _table(
        db,
        "gf_tasks",
        {
            "thread_id": str,
            "ns": str,
            "checkpoint_id": str,
            "task_id": str,
            "node": str,
            "status": str,
            "attempts": int,
            "started_at": float,
            "ended_at": float,
            "error": str,
            "body": bytes,  # [writes, routes]; NULL when both are None
        },
        ("thread_id", "ns", "checkpoint_id", "task_id"),
        nullable=("started_at", "ended_at", "error", "body"),
    )
    _table(
        db,
        "gf_memos",
        {
            "thread_id": str,
            "ns": str,
            "checkpoint_id": str,
            "task_id": str,
            "key": str,
            "value": bytes,
            "created_at": float,
        },
        ("thread_id", "ns", "checkpoint_id", "task_id", "key"),
    )
    _table(
        db,
        "gf_pauses",
        {
            "thread_id": str,
            "id": str,
            "ns": str,
            "checkpoint_id": str,
            "task_id": str,
            "node": str,
            "kind": str,
            "value": bytes,
            "created_at": float,
        },
        ("thread_id", "id"),
    )
    _table(
        db,
        "gf_answers",
        {
            "seq": int,
            "thread_id": str,
            "pause_id": str,
            "value": bytes,
            "by": str,
            "reason": str,
            "created_at": float,
        },
        "seq",
        nullable=("by", "reason"),
    )
    db.table("gf_answers").create_index(["thread_id"], "answers_by_thread")
    _table(
        db,
        "gf_decisions",
        {
            "seq": int,
            "thread_id": str,
            "call_id": str,
            "verdict": str,
            "fingerprint": str,
            "by": str,
            "reason": str,
            "applied": int,
            "note": str,
            "created_at": float,
        },
        "seq",
        nullable=("fingerprint", "by", "reason", "note"),
    )
    db.table("gf_decisions").create_index(["thread_id", "call_id"], "decisions_by_call")
    # The primary key is the at-most-once guard of promise 4: a second claim cannot insert.
    _table(
        db,
        "gf_dispatches",
        {
            "thread_id": str,
            "call_id": str,
            "tool": str,
            "fingerprint": str,
            "owner": str,
            "status": str,
            "result": bytes,  # NULL when None
            "error": str,
            "claimed_at": float,
            "completed_at": float,
        },
        ("thread_id", "call_id"),
        nullable=("fingerprint", "result", "error", "completed_at"),
    )


MIGRATIONS: tuple[Migration, ...] = (("0001_initial", _initial),)
"""Every migration, oldest first. Append only."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this code writes and understands."""

_META = "_graphflow_meta"
_APPLIED = "_graphflow_migrations"


def _stored(conn: sqlite3.Connection, path: str) -> tuple[int, set[str]]:
    """The file's schema version and applied migration names ((0, set()) for a new file)."""
    try:  # one statement: every process that opens the file runs it
        rows = conn.execute(
            f"SELECT 0, value FROM {_META} WHERE key = 'schema_version'"
            f" UNION ALL SELECT 1, name FROM {_APPLIED}"
        ).fetchall()
    except sqlite3.OperationalError as e:
        if not str(e).startswith("no such table"):
            raise
        rows = None
    if rows is not None:
        version = next((int(v) for kind, v in rows if kind == 0), 0)
        return version, {name for kind, name in rows if kind == 1}
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " ORDER BY name"
        )
    ]
    if _META not in tables:
        if not tables:
            return 0, set()  # a new (empty) file
        ours = [t for t in tables if t.startswith("gf_") or t == _APPLIED]
        if ours:
            raise CorruptCheckpointError(
                f"checkpoint store {path!r} is damaged (its schema records are missing, its "
                f"tables {ours} are not); restore it from a backup"
            )
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise not_a_store(path, f"it is an SQLite database with other tables ({shown})")
    row = conn.execute(f"SELECT value FROM {_META} WHERE key = 'schema_version'").fetchone()
    version = int(row[0]) if row is not None else 0
    applied = {r[0] for r in conn.execute(f"SELECT name FROM {_APPLIED}")}
    return version, applied


def _check(version: int, applied: set[str], path: str) -> None:
    unknown = applied - {name for name, _ in MIGRATIONS}
    if version > SCHEMA_VERSION or unknown:
        raise SchemaVersionError(
            f"checkpoint store {path!r} has schema version {version} (migrations "
            f"{sorted(unknown) or 'all known'} unknown here) but this graphflow understands "
            f"version {SCHEMA_VERSION} at most: upgrade graphflow to open it"
        )


def pending(conn: sqlite3.Connection, path: str = "") -> bool:
    """Whether the file needs migrations; reads only (plain sqlite3, nothing else loaded).

    Raises:
        SchemaVersionError: the file was written by a newer graphflow.
    """
    version, applied = _stored(conn, path)
    _check(version, applied, path)
    return version != SCHEMA_VERSION or len(applied) != SCHEMA_VERSION


def apply(conn: sqlite3.Connection, path: str = "") -> list[str]:
    """Apply the missing migrations, in order; call inside a write transaction.

    Reads the stored version again (another process may have migrated the file since
    ``pending`` looked), so concurrent openers apply each migration once.

    Returns:
        The names of the migrations applied.

    Raises:
        SchemaVersionError: the file was written by a newer graphflow.
    """
    from sqlite_utils import Database

    db = Database(conn, recursive_triggers=False, execute_plugins=False)
    db.execute(f"CREATE TABLE IF NOT EXISTS {_META} (key TEXT PRIMARY KEY, value)")
    db.execute(f"CREATE TABLE IF NOT EXISTS {_APPLIED} (name TEXT PRIMARY KEY, applied_at REAL)")
    version, applied = _stored(conn, path)
    _check(version, applied, path)
    done: list[str] = []
    for name, migrate in MIGRATIONS:
        if name not in applied:
            migrate(db)
            db.execute(f"INSERT INTO {_APPLIED} VALUES (?, ?)", (name, time.time()))
            done.append(name)
    db.execute(f"INSERT OR REPLACE INTO {_META} VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
    return done
