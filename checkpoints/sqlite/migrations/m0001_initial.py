"""Migration 0001: the tables of DESIGN.md "Stored records"."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # sqlite_utils (and numpy, which it imports) load only to migrate
    from sqlite_utils import Database

NAME = "0001_initial"


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


def migrate(db: Database) -> None:
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
