"""``Connection``: opening a store's file, calling it off the event loop, and naming errors.

- **One connection per store object, used off the event loop.** Calls run on a worker
  thread, one hop at a time per event loop (a ``CapacityLimiter(1)`` of the loop's
  ``group.Lane``), so the event loop never waits for the disk; calls made while a hop is
  under way share the next one, and commits among them one transaction (``group``). A
  ``threading.Lock`` orders every call on the connection, also those of several event
  loops (of several threads) that share the object. The one exception is a private event
  loop of graphflow's sync API (``checkpoints.blocking``), where nothing else runs: there
  calls run inline, as a thread hop costs about as much as an fsync'd commit.
- **Damage is reported, never guessed around.** SQLite's "file is not a database" (for a
  file that was an SQLite file) and "database disk image is malformed" raise
  ``CorruptCheckpointError`` naming the thread.
- **Other SQLite errors get names too.** A path that cannot hold a store, or a file that is
  not one, raises ``StorePathError`` naming it (``paths``); a store whose file or directory
  is not writable is opened read-only (a write raises ``ReadOnlyStoreError``); a write lock
  held by another client past ``busy_timeout`` raises ``StoreLockedError`` (nothing written,
  retry the call); until then the call waits in short, jittered tries (``lockwait``).
- **Lifecycle.** The schema is created or migrated as the file is opened (``migrations``);
  ``close()`` closes the connection and a later call opens it again. A process forked while
  the connection is open must not use it (SQLite's lock bookkeeping is per process).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from checkpoints import lockwait
from checkpoints.blocking import inline_io, per_loop
from checkpoints.errors import (
    CorruptCheckpointError,
    ReadOnlyStoreError,
    StoreIOError,
    StoreLockedError,
    StorePathError,
)
from checkpoints.keeper import keeper
from checkpoints.sqlite import group, migrations, paths
from checkpoints.sqlite.durability import RELAXED_MAX_BYTES, Durability
from checkpoints.sqlite.group import Lane, WriteTxn
from checkpoints.sqlite.rows.checks import install
from checkpoints.sqlite.txn import Txn

T = TypeVar("T")


def is_damage(exc: sqlite3.DatabaseError) -> bool:
    """Whether a sqlite3 error means the file is damaged (not busy, locked or misused).

    Damaged pages or header (SQLITE_CORRUPT, SQLITE_NOTADB), tables missing although the file
    says its schema is complete, or text that is not UTF-8 (Python's sqlite3 cannot read it).
    """
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return type(exc) is sqlite3.DatabaseError or str(exc).startswith(
            "Could not decode to UTF-8"
        )
    return code & 0xFF in (11, 26) or str(exc).startswith(("no such table", "no such column"))


class Connection:
    """The one SQLite connection of a store object, opened lazily, with its durability."""

    def __init__(
        self, path: str, busy_timeout: float, durability: Durability, *, grouping: bool = True
    ) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.durability = durability
        self.read_only: str | None = None  # what is not writable, when opened read-only
        self.conn: sqlite3.Connection | None = None
        """The open connection (None until the first call, and after ``close``)."""
        self.lock = threading.Lock()
        """Held by every call: one at a time, whichever thread or event loop makes it."""
        self.grouping = grouping
        """Whether commits that share a hop share a transaction too (``group``)."""
        self.hops = 0
        """Thread hops made so far (each runs ``hops_jobs / hops`` calls on average)."""
        self.hops_jobs = 0

    # -- opening ---------------------------------------------------------------------------
    def open(self) -> sqlite3.Connection:
        """Connect, set the pragmas and migrate the schema (the lazy ``setup``)."""
        keeper().start()  # its thread starts while this waits for the file (see keeper)
        read_only = paths.locate(self.path)  # a path that cannot serve raises, naming it
        if read_only is not None:
            conn = self._connect_read_only(read_only)
        else:
            conn = self._connect(self.path)
            try:
                # What the file holds is looked at first: a foreign file is left as it was.
                pending = migrations.pending(conn, self.path)
                self.durability.configure(conn)
                if pending:
                    with Txn(conn):
                        migrations.apply(conn, self.path)
            except BaseException:
                conn.close()
                raise
        self.read_only = read_only
        self.conn = conn
        self.durability.opened(conn, writable=read_only is None)
        return conn

    def _connect(self, target: str, *, uri: bool = False) -> sqlite3.Connection:
        conn = sqlite3.connect(
            target,
            timeout=0,  # no busy handler: calls wait for locks themselves (lockwait)
            isolation_level=None,  # transactions are explicit (Txn)
            check_same_thread=False,  # used by anyio's worker threads, one at a time
            uri=uri,
        )
        install(conn)  # gf_crc(), for updates that recompute a row's checksum in SQL
        return conn

    def _connect_read_only(self, why: str) -> sqlite3.Connection:
        """Open a store whose file or directory is not writable (see ``paths``)."""

        def check(conn: sqlite3.Connection) -> None:
            if migrations.pending(conn, self.path, writable=False):
                raise ReadOnlyStoreError(
                    f"checkpoint store {self.path!r} was written by an older graphflow and "
                    f"must be upgraded, but it is read-only (its {why} is not writable): "
                    "open it once with write access",
                    path=self.path,
                )

        return paths.open_read_only(self.path, lambda uri: self._connect(uri, uri=True), check)

    # -- closing ---------------------------------------------------------------------------
    def _close_conn(self) -> None:
        """Close the connection (and the descriptor on its WAL)."""
        conn, self.conn = self.conn, None
        try:
            self.durability.closing()
        finally:
            if conn is not None:
                conn.close()

    def drop_if_stuck(self) -> None:
        """Close a connection left inside a transaction (its ROLLBACK failed): it would keep
        the write lock and refuse every later BEGIN; closing rolls back, the next call opens
        a fresh one."""
        conn = self.conn
        if conn is not None and conn.in_transaction:
            with contextlib.suppress(sqlite3.Error, OSError):
                self._close_conn()

    async def close(self) -> None:
        """Close the connection; a later call opens it again."""

        def close() -> None:
            with self.lock:
                if self.conn is not None:
                    self._close_conn()

        if inline_io.get():  # a private event loop, as in run
            close()
            return
        await anyio.to_thread.run_sync(close, limiter=self.lane().limiter)

    # -- calls -----------------------------------------------------------------------------
    def call(self, thread_id: str | None, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the connection (opening it first); SQLite errors become typed ones.

        A call that finds the file locked by another writer runs again after a short,
        jittered pause, until ``busy_timeout`` has passed (``lockwait``)."""
        with self.lock:
            started: float | None = None
            attempt = 0
            while True:
                before: int | None = None
                try:
                    conn = self.conn if self.conn is not None else self.open()
                    self.durability.before_call()
                    before = conn.total_changes
                    return fn(conn)
                except sqlite3.DatabaseError as e:
                    self.drop_if_stuck()
                    after = self.conn.total_changes if self.conn is not None else None
                    if lockwait.is_busy(e) and lockwait.may_retry(before, after):
                        now = time.monotonic()
                        started = now if started is None else started
                        if now - started < self.busy_timeout:
                            time.sleep(lockwait.pause(attempt))
                            attempt += 1
                            continue
                    typed = self.typed(e, thread_id)
                    if typed is e:
                        raise
                    raise typed from e
                except BaseException:
                    self.drop_if_stuck()  # (a call that returns never leaves a transaction open)
                    raise

    async def run(self, thread_id: str | None, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``call`` off the event loop, one call of this store at a time; calls made while a
        hop is under way share the next one (``group``)."""
        if inline_io.get():
            # A private event loop (graphflow's sync API): a thread hop would only add latency.
            return self.call(thread_id, fn)
        result: T = await self._hop(group.Job(thread_id, fn))
        return result

    async def commit(self, thread_id: str, fn: group.GroupFn, durable: bool, txn: WriteTxn) -> None:
        """Run the commit ``fn`` (which writes in the transaction its ``WriteTxn`` makes): in
        its own transaction (``txn``), or in one shared with the commits next to it in its
        hop (``group``), unless ``grouping`` is off."""
        if inline_io.get():
            self.call(thread_id, lambda conn: fn(conn, txn))
            return
        await self._hop(group.Job(thread_id, lambda conn: fn(conn, txn), fn, durable))

    async def _hop(self, job: group.Job) -> Any:
        """Queue ``job``; the first call to get the limiter runs every queued job in one hop.
        A call cancelled before its job was taken withdraws it (it never runs); once taken,
        it waits for it (as ``to_thread.run_sync`` does), then is cancelled."""
        lane = self.lane()
        lane.queue.append(job)
        limiter = lane.limiter
        try:
            async with limiter:
                if not job.taken:
                    jobs, lane.queue = lane.queue, []
                    for j in jobs:
                        j.taken = True
                    try:
                        # Taken jobs cannot be withdrawn: a cancelled caller waits for them
                        # (then is cancelled), and never hands its cancellation to the others.
                        with anyio.CancelScope(shield=True):
                            await anyio.to_thread.run_sync(
                                self._run_jobs, jobs, limiter=lane.hop_thread
                            )
                    except BaseException as e:  # the hop itself failed: none may pass as done
                        for j in jobs:
                            if not j.done:
                                j.value, j.error, j.done = None, e, True
                        job.error = None  # (raised here, not kept: no cycle through this frame)
                        raise
        except BaseException:
            withdrawn = not job.taken
            if withdrawn:
                lane.queue.remove(job)
            if not withdrawn:
                with anyio.CancelScope(shield=True):
                    async with limiter:  # (the hop that took it holds it until it is done)
                        pass
            raise
        return job.result()

    def _run_jobs(self, jobs: list[group.Job]) -> None:
        """One hop: each job in order, alone or in a group commit (``group.runs``)."""
        ran = 0
        for members in group.runs(jobs, self.grouping):
            try:
                if len(members) == 1:
                    [job] = members
                    assert job.fn is not None
                    job.value = self.call(job.thread_id, job.fn)
                else:
                    self.call(None, group.group_fn(members, self._group_txn, self.typed))
            except BaseException as e:
                cause = e.__cause__ if len(members) > 1 and e.__cause__ is not e else None
                for m in members:
                    m.value, m.error = None, e
                    if isinstance(cause, sqlite3.DatabaseError):  # each names its own thread
                        m.error = self.typed(cause, m.thread_id)
                        if m.error is not cause:
                            m.error.__cause__ = cause
            for m in members:
                m.done = True
            ran += len(members)
        with self.lock:  # (hops of several event loops may end at once)
            self.hops += 1
            self.hops_jobs += ran

    def _group_txn(self, conn: sqlite3.Connection, durable: bool) -> AbstractContextManager[None]:
        """A group commit's transaction: durable when any member is (a relaxed one only for
        small commits, which a group need not be: ``NORMAL``)."""
        return self.durability.write(conn, durable, lambda: RELAXED_MAX_BYTES)

    def lane(self) -> Lane:
        """What this store's hops on the running event loop share (``Lane``)."""
        return per_loop(self, Lane)

    def typed(self, e: sqlite3.DatabaseError, thread_id: str | None) -> Exception:
        """The ``CheckpointError`` that an SQLite error stands for (``e`` itself if none)."""
        path = self.path
        code = getattr(e, "sqlite_errorcode", 0) & 0xFF
        if code == sqlite3.SQLITE_BUSY:
            return StoreLockedError(path, self.busy_timeout)
        if code == sqlite3.SQLITE_IOERR:
            return StoreIOError(path, e)
        if code == sqlite3.SQLITE_READONLY:
            return paths.read_only_error(path, self.read_only or "file or directory")
        if code == sqlite3.SQLITE_NOTADB and paths.is_foreign(path):
            return paths.not_a_store(path, "it is not an SQLite file")
        if code == sqlite3.SQLITE_CANTOPEN:
            try:
                paths.locate(path)
            except StorePathError as found:
                return found
            return StorePathError(f"cannot open checkpoint store {path!r}: {e}", path=path)
        if not is_damage(e):
            return e
        who = f"thread {thread_id!r}: " if thread_id is not None else ""
        return CorruptCheckpointError(
            f"{who}checkpoint store {path!r} is damaged ({e}); restore the store from a backup",
            thread_id=thread_id,
        )
