"""Migration 0002: a checksum on every row, counts anchoring every collection."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # sqlite_utils (and numpy, which it imports) load only to migrate
    from sqlite_utils import Database

NAME = "0002_checksums"


def migrate(db: Database) -> None:
    """Every record carries a CRC-32 of its columns; collections are anchored by counts.

    Schema 1 detected damage only where a blob did not decode; a flipped byte that still
    decodes, a changed number, an erased or swapped value became the state. Now:

    - every row of ``gf_checkpoints``, ``gf_channels``, ``gf_tasks``, ``gf_memos``,
      ``gf_pauses``, ``gf_answers``, ``gf_decisions`` and ``gf_dispatches`` has ``crc``,
      ``checkpoints.serde.checksum`` of its columns in table order, checked on every read
      (``checkpoints.sqlite.rows``). Keys are included, so a value moved to another row is
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
