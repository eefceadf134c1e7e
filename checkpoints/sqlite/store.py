"""``SqliteCheckpointer``: the ``Checkpointer`` protocol over one connection (see the package).

Each method is one function run on the connection (``Connection.run``): reads from
``reads`` and ``reads_records``, the commit from ``commit``, other writes from ``writes``,
transactions from ``txn`` and ``Durability``. Adding a method: write its SQL in the module of
its kind, then a method here that runs it (a write in ``Txn(conn)``, a read of several
statements in ``read_txn(conn)``, one that needs no fsync in ``durability.relaxed(conn)``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import sniffio

from checkpoints.base import check_dispatch_outcome, check_listing, first_error
from checkpoints.batch import CommitBatch
from checkpoints.errors import CheckpointError, LeaseLostError, SerializationError, never_claimed
from checkpoints.models import (
    AnswerRecord,
    CallId,
    CheckpointId,
    CheckpointRecord,
    DecisionRecord,
    DispatchRecord,
    PauseId,
    PauseRecord,
    ResumePoint,
    TaskId,
    TaskRecord,
    ThreadId,
    ThreadInfo,
    ThreadRecord,
    ThreadStatus,
    now,
)
from checkpoints.serde import dumps
from checkpoints.sqlite import commit, listing, reads, reads_records, writes
from checkpoints.sqlite.connection import Connection
from checkpoints.sqlite.durability import (
    SYNC_OF,
    Durability,
    DurabilityLevel,
    check_durability,
    check_options,
)
from checkpoints.sqlite.rows import records
from checkpoints.sqlite.runnable import SqliteRunnable
from checkpoints.sqlite.txn import Txn, read_txn

__all__ = ["SqliteCheckpointer"]


def _on_event_loop() -> bool:
    """Whether an async library runs an event loop on this thread (anyio's own test)."""
    try:
        return sniffio.current_async_library() is not None
    except sniffio.AsyncLibraryNotFoundError:
        return False


class SqliteCheckpointer(SqliteRunnable):
    """A ``Checkpointer`` storing everything in one SQLite file, safe for many processes.

    Args:
        path: the database file; it and its tables are created when missing.
        busy_timeout: seconds to wait for another process's write transaction to end.
        durability: ``"fsync"`` (default): a commit returns once it is on disk, so it
            survives a crash of the process and of the machine (a power loss).
            ``"process"``: a commit returns once it is in the operating system's hands
            (SQLite's WAL at ``synchronous=NORMAL``, no fsync): it survives ``kill -9`` and
            any crash of the process, but a power loss or kernel crash may drop the last
            commits (the file stays consistent: a run resumes from an earlier step, and
            its nodes since then run again). Several times cheaper per step (benchmark
            ``w1_durability``). The evidence log kept beside the store follows it.
        synchronous: SQLite's ``synchronous`` pragma, for experts; by default ``FULL`` for
            ``durability="fsync"`` and ``NORMAL`` for ``"process"``.
        tuned_sync: relax the commits nothing durable depends on yet and keep room in the WAL
            (see ``checkpoints.sqlite.durability``); False: every write waits for its sync
            at ``synchronous`` (the baseline to measure the tuning against).
        group_commit: commits made from one event loop while another call of this store
            is under way share one transaction and one fsync, each fenced by its own lease
            and head (``checkpoints.sqlite.group``; a worker resuming many threads at
            once). False: each commits alone (the baseline to measure it against). Calls
            that arrive together share one thread hop either way.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        durability: DurabilityLevel = "fsync",
        synchronous: str | None = None,
        tuned_sync: bool = True,
        group_commit: bool = True,
    ) -> None:
        self.path = os.fspath(path)
        check_options(busy_timeout, synchronous, tuned_sync=tuned_sync, group_commit=group_commit)
        self.busy_timeout = busy_timeout
        self.durability: DurabilityLevel = check_durability(durability)
        if synchronous is None:
            synchronous = SYNC_OF[durability]
        self._durability = Durability(self.path, synchronous, tuned=tuned_sync)
        self.synchronous = self._durability.synchronous
        self._db = Connection(self.path, busy_timeout, self._durability, grouping=group_commit)
        # Open now, so that the first run does not pay for connecting and migrating, unless
        # this runs on an event loop's thread: the first call then opens the file off the
        # loop. A file that cannot be opened is reported by the first call.
        if not _on_event_loop():
            with contextlib.suppress(sqlite3.Error, CheckpointError):
                self._db.call(None, lambda conn: None)

    async def setup(self) -> None:
        """Create the file and its tables, or migrate them; idempotent."""
        await self._db.run(None, lambda conn: None)

    async def close(self) -> None:
        """Close the connection; a later call opens it again."""
        await self._db.close()

    # -- threads and leases ------------------------------------------------------------
    async def get_thread(self, thread_id: ThreadId) -> ThreadRecord | None:
        """The thread's row, or ``None`` when the thread does not exist (and has no
        checkpoints: a row missing from a thread that has some is damage)."""
        return await self._db.run(thread_id, lambda conn: reads.get_thread(conn, thread_id))

    async def acquire_lease(
        self, thread_id: ThreadId, owner: str, ttl: float, *, graph_name: str | None = None
    ) -> ThreadRecord:
        """Take the thread's lease, creating the thread row when missing: read, test and write
        in one ``BEGIN IMMEDIATE`` transaction, so two processes never both get it."""

        def run(conn: sqlite3.Connection) -> ThreadRecord:
            with self._durability.relaxed(conn):
                return writes.take_lease(conn, thread_id, owner, ttl, graph_name)

        return await self._db.run(thread_id, run)

    async def renew_lease(self, thread_id: ThreadId, owner: str, ttl: float) -> None:
        """Extend ``owner``'s lease; ``LeaseLostError`` when it no longer holds it."""

        def run(conn: sqlite3.Connection) -> None:
            with self._durability.relaxed(conn):
                if not writes.renew_lease(conn, thread_id, owner, ttl):
                    reads.check_thread_row(conn, thread_id)  # (a checksum that failed)
                    raise LeaseLostError(thread_id, owner)

        await self._db.run(thread_id, run)

    async def release_lease(self, thread_id: ThreadId, owner: str) -> None:
        """Give the lease up if ``owner`` holds it; otherwise do nothing."""

        def run(conn: sqlite3.Connection) -> None:
            with self._durability.relaxed(conn):
                if not writes.release_lease(conn, thread_id, owner):
                    reads.check_thread_row(conn, thread_id)

        await self._db.run(thread_id, run)

    async def resume_thread(
        self, thread_id: ThreadId, owner: str, ttl: float
    ) -> ResumePoint | None:
        """Take the lease of an existing thread and read what resuming it needs, in one
        transaction (see ``Checkpointer.resume_thread``)."""

        def run(conn: sqlite3.Connection) -> ResumePoint | None:
            with self._durability.relaxed(conn):  # an error rolls the lease back
                found = reads.read_thread_and_head(conn, thread_id)
                if found is None or found[2] is None:
                    return None
                _, thread_row, ck, ck_row = found
                assert ck is not None
                thread = writes.lease_existing(conn, thread_id, owner, ttl, thread_row)
                channels = reads.read_channels(
                    conn, thread_id, "", ck.channel_versions, ck.channel_bases
                )
                pauses, answers, tasks, memos = reads_records.read_step_records(
                    conn, thread_id, thread_row, thread.pending_pause_ids, ck.id, ck_row
                )
                return ResumePoint(thread, ck, channels, pauses, answers, tasks, memos)

        return await self._db.run(thread_id, run)

    async def list_threads(
        self,
        status: ThreadStatus | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
    ) -> list[ThreadInfo]:
        """Threads, most recently updated first (by status: a range of the status index),
        counted against the number of threads of that status; with ``limit`` or ``after``
        a page in thread-id order (a range of ``threads_by_id`` from the cursor)."""
        if (bad := check_listing(status, limit, after)) is not None:
            raise bad

        def run(conn: sqlite3.Connection) -> list[ThreadInfo]:
            with read_txn(conn):
                if limit is None and after is None:
                    return listing.list_threads(conn, status)
                return listing.page_threads(conn, status, limit, after)

        return await self._db.run(None, run)

    async def count_threads(self, status: ThreadStatus | None = None) -> int:
        """How many threads there are (of one status), from the counts the triggers keep
        (``gf_thread_counts``, each checked against its tally): one statement, no scan."""
        if (bad := check_listing(status)) is not None:
            raise bad
        return await self._db.run(None, lambda conn: listing.count_threads(conn, status))

    # -- checkpoints and state -------------------------------------------------------------
    async def commit(self, thread_id: ThreadId, owner: str, batch: CommitBatch) -> None:
        """Write ``batch`` in one transaction (fsync'd unless ``batch.durable`` is false),
        fenced by the lease and the head."""
        await self._db.commit(
            thread_id,
            lambda conn, txn: commit.commit(conn, thread_id, owner, batch, txn),
            batch.durable,
            self._durability.commit,
        )

    async def get_checkpoint(
        self, thread_id: ThreadId, ns: str = "", checkpoint_id: CheckpointId | None = None
    ) -> CheckpointRecord | None:
        """A checkpoint by id, or the newest of ``ns`` (the thread head for the root). A head
        whose checkpoint row is missing raises ``CorruptCheckpointError``."""

        def run(conn: sqlite3.Connection) -> CheckpointRecord | None:
            found = reads.read_checkpoint(conn, thread_id, ns, checkpoint_id, check_miss=False)
            if found is not reads.MISSED:  # (one statement: its own snapshot)
                return found
            with read_txn(conn):
                return reads.read_checkpoint(conn, thread_id, ns, checkpoint_id)

        return await self._db.run(thread_id, run)

    async def list_checkpoints(
        self, thread_id: ThreadId, ns: str = "", *, limit: int | None = None
    ) -> list[CheckpointRecord]:
        """Checkpoints of one namespace, newest first."""

        def run(conn: sqlite3.Connection) -> list[CheckpointRecord]:
            with read_txn(conn):
                return reads.list_checkpoints(conn, thread_id, ns, limit)

        return await self._db.run(thread_id, run)

    async def load_channels(
        self,
        thread_id: ThreadId,
        ns: str,
        versions: Mapping[str, int],
        bases: Mapping[str, tuple[int, int]],
    ) -> dict[str, Any]:
        """Channel values at ``versions``: one indexed query per channel, one snapshot."""

        def run(conn: sqlite3.Connection) -> dict[str, Any]:
            with read_txn(conn):
                return reads.read_channels(conn, thread_id, ns, versions, bases)

        return await self._db.run(thread_id, run)

    async def load_tasks(
        self, thread_id: ThreadId, ns: str, checkpoint_id: CheckpointId
    ) -> dict[TaskId, TaskRecord]:
        """Task records of one checkpoint, by task id, in the order first written."""
        return await self._db.run(
            thread_id, lambda conn: reads_records.read_tasks(conn, thread_id, ns, checkpoint_id)
        )

    async def load_memos(
        self, thread_id: ThreadId, ns: str, checkpoint_id: CheckpointId
    ) -> dict[TaskId, dict[str, Any]]:
        """Memoized step results of one checkpoint's tasks: task id -> key -> value."""
        return await self._db.run(
            thread_id, lambda conn: reads_records.read_memos(conn, thread_id, ns, checkpoint_id)
        )

    # -- pauses and answers ------------------------------------------------------------
    async def get_pauses(
        self, thread_id: ThreadId, pause_ids: Sequence[PauseId]
    ) -> list[PauseRecord]:
        """Pause records by id, in the order asked; unknown ids are left out."""

        def run(conn: sqlite3.Connection) -> list[PauseRecord]:
            with read_txn(conn):
                return reads_records.read_pauses(conn, thread_id, pause_ids)

        return await self._db.run(thread_id, run)

    async def list_pauses(self, thread_id: ThreadId) -> list[PauseRecord]:
        """Every pause record of the thread, oldest first."""
        return await self._db.run(
            thread_id, lambda conn: reads_records.list_pauses(conn, thread_id)
        )

    async def put_answers(self, answers: Sequence[AnswerRecord]) -> None:
        """Append answers in one transaction (all are serialized first)."""
        blobs = [(a, dumps(a.value, key=f"answer to {a.pause_id!r}")) for a in answers]

        def run(conn: sqlite3.Connection) -> None:
            with Txn(conn):
                writes.insert_answers(conn, blobs)

        if blobs:
            await self._db.run(blobs[0][0].thread_id, run)

    async def load_answers(
        self, thread_id: ThreadId, pause_ids: Sequence[PauseId] | None = None
    ) -> dict[PauseId, AnswerRecord]:
        """The latest answer per pause (all pauses of the thread when ``pause_ids`` is None)."""
        wanted = {str(p) for p in pause_ids} if pause_ids is not None else None
        return await self._db.run(
            thread_id, lambda conn: reads_records.read_answers(conn, thread_id, wanted)
        )

    # -- decisions and dispatch ------------------------------------------------------------
    async def put_decisions(self, decisions: Sequence[DecisionRecord]) -> None:
        """Append decisions in one transaction (every ``extra`` is serialized first)."""
        extras = [
            dumps(d.extra, key=f"extra of decision {d.call_id!r}") if d.extra else None
            for d in decisions
        ]

        def run(conn: sqlite3.Connection) -> None:
            with Txn(conn):
                writes.insert_decisions(conn, decisions, extras)

        if decisions:
            await self._db.run(decisions[0].thread_id, run)

    async def list_decisions(
        self, thread_id: ThreadId, call_id: CallId | None = None
    ) -> list[DecisionRecord]:
        """Decisions of a thread (optionally of one call), oldest first."""
        return await self._db.run(
            thread_id, lambda conn: reads_records.list_decisions(conn, thread_id, call_id)
        )

    async def claim_dispatch(self, record: DispatchRecord) -> bool:
        """Insert the claim, unless the thread is frozen (``FrozenThreadError``) or its lease
        is not the claimer's (``LeaseLostError``); False when it was already claimed."""
        row = writes.claim_row(record)

        def run(conn: sqlite3.Connection) -> bool:
            with Txn(conn):
                return writes.claim(conn, record, row)

        return await self._db.run(record.thread_id, run)

    async def complete_dispatch(
        self,
        thread_id: ThreadId,
        call_id: CallId,
        *,
        status: str,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        """Record a claimed call's outcome (``succeeded`` or ``failed``)."""
        problem: SerializationError | None = None
        blob: bytes | None = None
        try:
            if result is not None:
                blob = dumps(result, key=f"result of tool call {call_id!r}")
        except SerializationError as e:
            problem = e

        def run(conn: sqlite3.Connection) -> None:
            with Txn(conn):
                found = reads_records.dispatch_row(conn, thread_id, call_id)
                if found is None:
                    reads_records.check_dispatch_count(conn, thread_id)
                claim = None if found is None else records.dispatch(thread_id, call_id, found)
                # The order of checkpoints.base: never claimed, the status, then the result.
                error_first = first_error(
                    never_claimed(thread_id, call_id) if claim is None else None,
                    check_dispatch_outcome(status),
                    problem,
                )
                if error_first is not None:
                    raise error_first
                assert claim is not None
                writes.complete_claim(conn, claim, status, blob, error, now())

        await self._db.run(thread_id, run)

    async def get_dispatch(self, thread_id: ThreadId, call_id: CallId) -> DispatchRecord | None:
        """The dispatch record of a call, with its outcome when known."""
        return await self._db.run(
            thread_id, lambda conn: reads_records.get_dispatch(conn, thread_id, call_id)
        )
