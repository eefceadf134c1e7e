"""Named schema migrations of the SQLite checkpoint store.

The schema of a store file changes only through the migrations listed in ``MIGRATIONS``,
applied in order, each recorded in the file's one ledger table (``ledger``). A file is
either fully migrated or left as it was: ``apply`` runs inside the caller's write
transaction, and a migration must not commit.

Adding one (say a new table): write ``m0008_NAME.py`` beside the others with ``NAME =
"0008_NAME"`` and ``def migrate(db: Database) -> None`` (a ``sqlite_utils.Database`` on the
open connection; ``db.execute`` runs SQL), and append it to ``MIGRATIONS``. Nothing else:
``SCHEMA_VERSION`` follows, files of older versions migrate on their next write access, and
the rows' codecs and reads of the new table go in ``rows`` and ``reads`` (a table whose rows
are checked carries a ``crc`` column, see ``m0002_checksums``).

Rules: never edit or reorder a released migration, only append new ones; a file that lists
a migration this code does not know (after all those it knows) was written by a newer
graphflow and raises ``SchemaVersionError``. Records that contradict each other, or a
migration whose tables exist already, are damage: ``CorruptCheckpointError`` naming the file,
never a migration run again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING

from checkpoints.sqlite.migrations import (
    ledger,
    m0001_initial,
    m0002_checksums,
    m0003_runnable,
    m0004_paging,
    m0005_compact,
    m0006_newest,
    m0007_folded_chains,
)

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "apply", "pending"]

if TYPE_CHECKING:  # sqlite_utils (and numpy, which it imports) load only to migrate
    from sqlite_utils import Database

Migration = tuple[str, Callable[["Database"], None]]

MIGRATIONS: tuple[Migration, ...] = (
    (m0001_initial.NAME, m0001_initial.migrate),
    (m0002_checksums.NAME, m0002_checksums.migrate),
    (m0003_runnable.NAME, m0003_runnable.migrate),
    (m0004_paging.NAME, m0004_paging.migrate),
    (m0005_compact.NAME, m0005_compact.migrate),
    (m0006_newest.NAME, m0006_newest.migrate),
    (m0007_folded_chains.NAME, m0007_folded_chains.migrate),
)
"""Every migration, oldest first. Append only."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this code writes and understands (migrations a file lists)."""

_KNOWN = tuple(name for name, _ in MIGRATIONS)


def pending(conn: sqlite3.Connection, path: str = "", *, writable: bool = True) -> bool:
    """Whether the file needs migrations (or, ``writable``, its old record folded); reads
    only (plain sqlite3, nothing else loaded).

    Raises:
        SchemaVersionError: the file was written by a newer graphflow.
        CorruptCheckpointError: the file's migration records are damaged.
        StorePathError: the file is an SQLite database of another application.
    """
    found = ledger.read(conn, path)
    ledger.check(found, _KNOWN, path)
    return len(found.applied) < SCHEMA_VERSION or (writable and found.legacy)


def apply(conn: sqlite3.Connection, path: str = "") -> list[str]:
    """Apply the missing migrations, in order; call inside a write transaction.

    Reads the ledger again (another process may have migrated the file since ``pending``
    looked), so concurrent openers apply each migration once.

    Returns:
        The names of the migrations applied.

    Raises:
        SchemaVersionError: the file was written by a newer graphflow.
    """
    from sqlite_utils import Database

    from checkpoints.sqlite.rows.checks import install

    install(conn)  # gf_crc(), which computes the checksums of existing rows
    db = Database(conn, recursive_triggers=False, execute_plugins=False)
    found = ledger.read(conn, path)
    ledger.check(found, _KNOWN, path)
    ledger.create(conn)
    done: list[str] = []
    for name, migrate in MIGRATIONS:
        if name not in found.applied:
            try:
                migrate(db)
            except sqlite3.OperationalError as e:
                # What a migration creates exists already: its record was lost (damage),
                # and the migration must never run twice.
                if "already exists" in str(e) or "duplicate column" in str(e):
                    raise ledger.damaged(
                        path, f"migration {name!r} meets its own tables: {e}"
                    ) from e
                raise
            ledger.record(conn, name)
            done.append(name)
    ledger.fold_legacy(conn)
    return done
