"""Named schema migrations of the SQLite checkpoint store.

The schema of a store file changes only through the migrations listed in ``MIGRATIONS``,
applied in order. Each one is a ``(name, function)`` pair; a function gets a
``sqlite_utils.Database`` on the open connection and must not commit: ``apply`` runs inside
the caller's write transaction, so a file is either fully migrated or left as it was.

The file records what was applied in two tables of its own:

- ``_graphflow_meta`` (``key``, ``value``): ``schema_version`` is the number of migrations
  the file has (``SCHEMA_VERSION`` of the code that last migrated it);
- ``_graphflow_migrations`` (``name``, ``applied_at``): one row per applied migration.

Rules: never edit or reorder a released migration, only append new ones; a file that lists
a migration this code does not know (after all those it knows) was written by a newer
graphflow and raises ``SchemaVersionError``. Records that contradict each other (a known
migration missing before a recorded one, a version that does not count the migrations, a
migration whose tables exist already) are damage: ``CorruptCheckpointError`` naming the
file, never a migration run again.
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


def _checksums(db: Database) -> None:
    """Every record carries a CRC-32 of its columns; collections are anchored by counts.

    Schema 1 detected damage only where a blob did not decode; a flipped byte that still
    decodes, a changed number, an erased or swapped value became the state. Now:

    - every row of ``gf_checkpoints``, ``gf_channels``, ``gf_tasks``, ``gf_memos``,
      ``gf_pauses``, ``gf_answers``, ``gf_decisions`` and ``gf_dispatches`` has ``crc``,
      ``checkpoints.serde.checksum`` of its columns in table order, checked on every read
      (``checkpoints._sqlite_rows``). Keys are included, so a value moved to another row is
      caught; answers and decisions include their ``seq``. A channel's covers its value
      wherever it is stored (``gf_blobs`` included) and is computed in two parts (its keys
      but the version, then version and value: ``gf_channel_crc``), so that an append chain
      is checked with two ``zlib.crc32`` calls a row;
    - a thread row has three, so that a step rewrites only the one of what it changes:
      ``head_crc`` (``thread_id, head``), ``lease_crc`` (``thread_id, lease_owner,
      lease_expires_at``) and ``crc`` (the other columns, in table order); ``info_crc``
      covers the columns ``list_threads`` reads from the ``threads_by_status`` index, which
      now holds it too;
    - counts, kept on insert (by triggers, or by the write that inserts), so that a row
      moved away by a damaged key is missed: per thread, its root checkpoints (and the
      newest id), pauses, answers, decisions, dispatches (``gf_threads.n_*``); per
      checkpoint, its tasks and memos (``gf_checkpoints.n_*``); per subgraph namespace, its
      checkpoints and the newest (``gf_namespaces``); per status, the threads
      (``gf_thread_counts``: moved by a status change written with a new ``info_crc``,
      which a foreign edit of the status lacks);
    - decisions gain ``pause_id`` and ``extra`` (serde bytes; NULL when empty).

    Existing rows get their checksums and counts here.
    """
    x = db.execute
    count = "INTEGER NOT NULL DEFAULT 0"
    added = {
        "gf_threads": (
            "crc INTEGER", "head_crc INTEGER", "lease_crc INTEGER", "info_crc INTEGER",
            f"n_checkpoints {count}", "newest TEXT", f"n_pauses {count}", f"n_answers {count}",
            f"n_decisions {count}", f"n_dispatches {count}",
        ),
        "gf_checkpoints": ("crc INTEGER", f"n_tasks {count}", f"n_memos {count}"),
        "gf_channels": ("crc INTEGER",),
        "gf_tasks": ("crc INTEGER",),
        "gf_memos": ("crc INTEGER",),
        "gf_pauses": ("crc INTEGER",),
        "gf_answers": ("crc INTEGER",),
        "gf_decisions": ("pause_id TEXT", "extra BLOB", "crc INTEGER"),
        "gf_dispatches": ("crc INTEGER",),
    }  # fmt: skip
    for table, columns in added.items():
        for column in columns:
            x(f"ALTER TABLE {table} ADD COLUMN {column}")
    x(
        "UPDATE gf_threads SET crc = gf_crc(thread_id, status, graph_name, pending_pause_ids,"
        " pending_count, created_at, updated_at), head_crc = gf_crc(thread_id, head),"
        " lease_crc = gf_crc(thread_id, lease_owner, lease_expires_at),"
        " info_crc = gf_crc(thread_id, status, updated_at, pending_count, graph_name,"
        " created_at),"
        " n_checkpoints = (SELECT count(*) FROM gf_checkpoints c"
        "  WHERE c.thread_id = gf_threads.thread_id AND c.ns = ''),"
        " newest = (SELECT max(id) FROM gf_checkpoints c"
        "  WHERE c.thread_id = gf_threads.thread_id AND c.ns = ''),"
        " n_pauses = (SELECT count(*) FROM gf_pauses p WHERE p.thread_id = gf_threads.thread_id),"
        " n_answers = (SELECT count(*) FROM gf_answers a"
        "  WHERE a.thread_id = gf_threads.thread_id),"
        " n_decisions = (SELECT count(*) FROM gf_decisions d"
        "  WHERE d.thread_id = gf_threads.thread_id),"
        " n_dispatches = (SELECT count(*) FROM gf_dispatches d"
        "  WHERE d.thread_id = gf_threads.thread_id)"
    )
    x(
        "UPDATE gf_checkpoints SET crc = gf_crc(thread_id, ns, id, parent_id, step, source,"
        " channel_versions, channel_bases, body, created_at),"
        " n_tasks = (SELECT count(*) FROM gf_tasks t WHERE t.thread_id = gf_checkpoints.thread_id"
        "  AND t.ns = gf_checkpoints.ns AND t.checkpoint_id = gf_checkpoints.id),"
        " n_memos = (SELECT count(*) FROM gf_memos m WHERE m.thread_id = gf_checkpoints.thread_id"
        "  AND m.ns = gf_checkpoints.ns AND m.checkpoint_id = gf_checkpoints.id)"
    )
    x(
        "UPDATE gf_channels SET crc = gf_channel_crc(thread_id, ns, channel, version, kind, base,"
        " coalesce(blob, (SELECT data FROM gf_blobs b WHERE b.id = gf_channels.blob_id)))"
    )
    x(
        "UPDATE gf_tasks SET crc = gf_crc(thread_id, ns, checkpoint_id, task_id, node, status,"
        " attempts, started_at, ended_at, error, body)"
    )
    x("UPDATE gf_memos SET crc = gf_crc(thread_id, ns, checkpoint_id, task_id, key, value,"
      " created_at)")  # fmt: skip
    x(
        "UPDATE gf_pauses SET crc = gf_crc(thread_id, id, ns, checkpoint_id, task_id, node, kind,"
        " value, created_at)"
    )
    x("UPDATE gf_answers SET crc = gf_crc(seq, thread_id, pause_id, value, by, reason,"
      " created_at)")  # fmt: skip
    x(
        "UPDATE gf_decisions SET crc = gf_crc(seq, thread_id, call_id, verdict, fingerprint, by,"
        " reason, applied, note, created_at, pause_id, extra)"
    )
    x(
        "UPDATE gf_dispatches SET crc = gf_crc(thread_id, call_id, tool, fingerprint, owner,"
        " status, result, error, claimed_at, completed_at)"
    )
    x("DROP INDEX threads_by_status")
    x(
        "CREATE INDEX threads_by_status ON gf_threads (status, updated_at, thread_id,"
        " pending_count, graph_name, created_at, info_crc)"
    )
    x(
        "CREATE TABLE gf_namespaces (thread_id TEXT NOT NULL, ns TEXT NOT NULL,"
        " n_checkpoints INTEGER NOT NULL, newest TEXT NOT NULL, PRIMARY KEY (thread_id, ns))"
        " WITHOUT ROWID"
    )
    x(
        "INSERT INTO gf_namespaces SELECT thread_id, ns, count(*), max(id) FROM gf_checkpoints"
        " WHERE ns <> '' GROUP BY thread_id, ns"
    )
    x("CREATE TABLE gf_thread_counts (status TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID")
    x("INSERT INTO gf_thread_counts SELECT status, count(*) FROM gf_threads GROUP BY status")
    # Counts follow inserts only: upserts that update, and edits by other clients, fire none.
    # (A thread's root checkpoints are counted by the writes that insert them, which update
    # the thread row anyway: the commit that moves the head, the one that creates the row.)
    x(
        "CREATE TRIGGER gf_count_ns_checkpoint AFTER INSERT ON gf_checkpoints WHEN NEW.ns <> ''"
        " BEGIN INSERT INTO gf_namespaces VALUES (NEW.thread_id, NEW.ns, 1, NEW.id)"
        " ON CONFLICT (thread_id, ns) DO UPDATE SET n_checkpoints = n_checkpoints + 1,"
        " newest = max(newest, excluded.newest); END"
    )
    for table, column in (("gf_tasks", "n_tasks"), ("gf_memos", "n_memos")):
        x(
            f"CREATE TRIGGER gf_count_{table[3:]} AFTER INSERT ON {table} BEGIN"
            f" UPDATE gf_checkpoints SET {column} = {column} + 1 WHERE thread_id = NEW.thread_id"
            " AND ns = NEW.ns AND id = NEW.checkpoint_id; END"
        )
    for table, column in (
        ("gf_pauses", "n_pauses"),
        ("gf_answers", "n_answers"),
        ("gf_decisions", "n_decisions"),
        ("gf_dispatches", "n_dispatches"),
    ):
        x(
            f"CREATE TRIGGER gf_count_{table[3:]} AFTER INSERT ON {table} BEGIN"
            f" UPDATE gf_threads SET {column} = {column} + 1 WHERE thread_id = NEW.thread_id; END"
        )
    x(
        "CREATE TRIGGER gf_count_thread AFTER INSERT ON gf_threads BEGIN"
        " INSERT INTO gf_thread_counts VALUES (NEW.status, 1)"
        " ON CONFLICT (status) DO UPDATE SET n = n + 1; END"
    )
    x(
        "CREATE TRIGGER gf_count_status AFTER UPDATE OF status ON gf_threads"
        " WHEN NEW.status IS NOT OLD.status AND NEW.info_crc IS NOT OLD.info_crc BEGIN"
        " UPDATE gf_thread_counts SET n = n - 1 WHERE status = OLD.status;"
        " INSERT INTO gf_thread_counts VALUES (NEW.status, 1)"
        " ON CONFLICT (status) DO UPDATE SET n = n + 1; END"
    )


def _runnable(db: Database) -> None:
    """The runnable index (``Checkpointer.mark_runnable``): at most one row per thread, due
    times indexed so a worker finds what is due without a scan of threads. An index, not a
    record: nothing is appended, and a lost row only delays a resume (no checksums)."""
    db.execute(
        "CREATE TABLE gf_runnable (thread_id TEXT PRIMARY KEY, reason TEXT NOT NULL,"
        " due_at REAL NOT NULL, marked_at REAL NOT NULL) WITHOUT ROWID"
    )
    db.execute("CREATE INDEX gf_runnable_due ON gf_runnable (due_at, thread_id)")


MIGRATIONS: tuple[Migration, ...] = (
    ("0001_initial", _initial),
    ("0002_checksums", _checksums),
    ("0003_runnable", _runnable),
)
"""Every migration, oldest first. Append only."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this code writes and understands."""

_META = "_graphflow_meta"
_APPLIED = "_graphflow_migrations"


def _stored(conn: sqlite3.Connection, path: str) -> tuple[object, set[str]]:
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
        version = next((v for kind, v in rows if kind == 0), 0)
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
    if _APPLIED not in tables:
        raise _damaged(path, f"its table {_APPLIED} is missing")
    raise AssertionError("unreachable: both tables exist, yet reading them failed")


def _damaged(path: str, detail: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"checkpoint store {path!r} is damaged ({detail}); restore it from a backup"
    )


def _check(version: object, applied: set[str], path: str) -> None:
    """Refuse a file whose migration records are damaged, or that a newer graphflow wrote.

    The records are consistent when the known migrations applied are the first ones, in
    order, and the version counts every applied migration; a newer graphflow's file has
    all the known ones and more (it only appends migrations).
    """
    known = [name for name, _ in MIGRATIONS]
    if any(type(name) is not str for name in applied):
        raise _damaged(path, "a migration record is not a name")
    ours = [name for name in known if name in applied]
    unknown = applied - set(known)
    if type(version) is not int:
        raise _damaged(path, f"its schema version {version!r:.40} is not a number")
    if ours != known[: len(ours)]:
        missing = next(name for name in known if name not in applied)
        raise _damaged(path, f"migration {missing!r} is not recorded, later ones are")
    if (unknown and len(ours) < len(known)) or version != len(applied):
        raise _damaged(
            path, f"its schema version {version} does not match its migrations {sorted(applied)}"
        )
    if unknown:
        raise SchemaVersionError(
            f"checkpoint store {path!r} has schema version {version} (migrations "
            f"{sorted(unknown)} unknown here) but this graphflow understands version "
            f"{SCHEMA_VERSION} at most: upgrade graphflow to open it"
        )


def pending(conn: sqlite3.Connection, path: str = "") -> bool:
    """Whether the file needs migrations; reads only (plain sqlite3, nothing else loaded).

    Raises:
        SchemaVersionError: the file was written by a newer graphflow.
        CorruptCheckpointError: the file's migration records are damaged.
        StorePathError: the file is an SQLite database of another application.
    """
    version, applied = _stored(conn, path)
    _check(version, applied, path)
    return len(applied) < SCHEMA_VERSION


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

    from checkpoints._sqlite_rows import install

    install(conn)  # gf_crc(), which computes the checksums of existing rows
    db = Database(conn, recursive_triggers=False, execute_plugins=False)
    db.execute(f"CREATE TABLE IF NOT EXISTS {_META} (key TEXT PRIMARY KEY, value)")
    db.execute(f"CREATE TABLE IF NOT EXISTS {_APPLIED} (name TEXT PRIMARY KEY, applied_at REAL)")
    version, applied = _stored(conn, path)
    _check(version, applied, path)
    done: list[str] = []
    for name, migrate in MIGRATIONS:
        if name not in applied:
            try:
                migrate(db)
            except sqlite3.OperationalError as e:
                # What a migration creates exists already: its record was lost (damage),
                # and the migration must never run twice.
                if "already exists" in str(e) or "duplicate column" in str(e):
                    raise _damaged(path, f"migration {name!r} meets its own tables: {e}") from e
                raise
            db.execute(f"INSERT INTO {_APPLIED} VALUES (?, ?)", (name, time.time()))
            done.append(name)
    db.execute(f"INSERT OR REPLACE INTO {_META} VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
    return done
