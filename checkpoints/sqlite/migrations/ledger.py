"""The one table of applied migrations, ``_graphflow_migrations`` (``name``, ``applied_at``).

The schema version of a file is the number of migrations it lists. Files written before
this table was the only record also hold ``_graphflow_meta`` (its ``schema_version`` row
counted the migrations): such a file is checked against both, and the first write access
folds the old record into the ledger (the table is dropped once its count agreed); a
read-only file is read with both as they are.

Records that contradict each other (a known migration missing before a recorded one, an
old version that does not count the migrations, a ledger missing beside the tables) are
damage: ``CorruptCheckpointError`` naming the file, never a migration run again.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass

from checkpoints.errors import CorruptCheckpointError, SchemaVersionError
from checkpoints.sqlite.paths import not_a_store
from checkpoints.sqlite.txn import read_txn

TABLE = "_graphflow_migrations"
LEGACY = "_graphflow_meta"
"""The record of versions before this ledger (schema_version), folded into it."""


@dataclass(frozen=True, slots=True)
class Ledger:
    """What a file records of its migrations."""

    applied: frozenset[str]
    legacy: bool = False
    """The file still has ``_graphflow_meta`` (written by an older graphflow)."""


def damaged(path: str, detail: str) -> CorruptCheckpointError:
    """The error for migration records that contradict each other."""
    return CorruptCheckpointError(
        f"checkpoint store {path!r} is damaged ({detail}); restore the store from a backup"
    )


def read(conn: sqlite3.Connection, path: str) -> Ledger:
    """The file's ledger (empty for a new file); the old record, if any, checked against it.

    Read on one snapshot (a read transaction, unless the caller's is open), and looked at
    again when the ledger appears between its statements: another process may create or
    migrate the file at any instant, and its tables without its ledger would be damage.
    """
    if conn.in_transaction:
        return _read(conn, path)
    with read_txn(conn):
        return _read(conn, path)


def _read(conn: sqlite3.Connection, path: str, again: bool = True) -> Ledger:
    try:  # one statement: every process that opens the file runs it
        found = conn.execute(
            f"SELECT 1, name FROM {TABLE} UNION ALL SELECT 0, name FROM sqlite_master"
            f" WHERE type = 'table' AND name = '{LEGACY}'"
        ).fetchall()
    except sqlite3.OperationalError as e:
        if not str(e).startswith("no such table"):
            raise
        tables = _tables(conn)
        if TABLE in tables and again:  # made by another process since the first statement
            return _read(conn, path, again=False)
        return _without_ledger(tables, path)
    names = [name for kind, name in found if kind == 1]
    if any(type(name) is not str for name in names):
        raise damaged(path, "a migration record is not a name")
    legacy = any(kind == 0 for kind, _ in found)
    if legacy:
        rows = conn.execute(f"SELECT value FROM {LEGACY} WHERE key = 'schema_version'").fetchall()
        version = rows[0][0] if rows else 0
        if type(version) is not int:
            raise damaged(path, f"its schema version {version!r:.40} is not a number")
        if version != len(names):
            raise damaged(
                path, f"its schema version {version} does not match its migrations {sorted(names)}"
            )
    return Ledger(frozenset(names), legacy)


def _tables(conn: sqlite3.Connection) -> list[str]:
    """The file's tables (not SQLite's own), by name."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " ORDER BY name"
        )
    ]


def _without_ledger(tables: list[str], path: str) -> Ledger:
    """A file without a ledger: new (no tables), damaged (ours), or not a store (others)."""
    if not tables:
        return Ledger(frozenset())  # a new (empty) file
    ours = [t for t in tables if t.startswith("gf_") or t == LEGACY]
    if ours:
        raise CorruptCheckpointError(
            f"checkpoint store {path!r} is damaged (its schema records are missing, its "
            f"tables {ours} are not); restore the store from a backup"
        )
    shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
    raise not_a_store(path, f"it is an SQLite database with other tables ({shown})")


def check(ledger: Ledger, known: Sequence[str], path: str) -> None:
    """Refuse a file whose records are damaged, or that a newer graphflow wrote.

    The records are consistent when the known migrations applied are the first ones, in
    order; a newer graphflow's file has all the known ones and more (it only appends).
    """
    applied = ledger.applied
    ours = [name for name in known if name in applied]
    unknown = applied - set(known)
    if ours != list(known[: len(ours)]):
        missing = next(name for name in known if name not in applied)
        raise damaged(path, f"migration {missing!r} is not recorded, later ones are")
    if unknown and len(ours) < len(known):
        raise damaged(path, f"its migrations {sorted(applied)} skip known ones")
    if unknown:
        raise SchemaVersionError(
            f"checkpoint store {path!r} has schema version {len(applied)} (migrations "
            f"{sorted(unknown)} unknown here) but this graphflow understands version "
            f"{len(known)} at most: upgrade graphflow to open it"
        )


def create(conn: sqlite3.Connection) -> None:
    """Create the ledger if missing (inside the caller's write transaction)."""
    conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (name TEXT PRIMARY KEY, applied_at REAL)")


def record(conn: sqlite3.Connection, name: str) -> None:
    """Record that migration ``name`` was applied (in the transaction that applied it)."""
    conn.execute(f"INSERT INTO {TABLE} VALUES (?, ?)", (name, time.time()))


def fold_legacy(conn: sqlite3.Connection) -> None:
    """Drop the old record (``read`` found its count agrees with the ledger)."""
    conn.execute(f"DROP TABLE IF EXISTS {LEGACY}")
