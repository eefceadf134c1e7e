"""``SqliteCheckpointer`` beyond the conformance suite: files, processes, damage, schema."""

from __future__ import annotations

import gc
import os
import signal
import sqlite3
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypedDict

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream
from sqlite_utils import Database

from checkpoints import (
    ChannelWrite,
    CheckpointError,
    CheckpointRecord,
    CommitBatch,
    CorruptCheckpointError,
    HeadConflictError,
    LeaseHeldError,
    LeaseLostError,
    MemoRecord,
    PauseRecord,
    SchemaVersionError,
    SerializationError,
    SqliteCheckpointer,
    StoreIOError,
    StoreLockedError,
    TaskRecord,
    ThreadUpdate,
    serde,
)
from checkpoints import lockwait as _lockwait
from checkpoints.lease import new_owner
from checkpoints.models import CallId, CheckpointId, PauseId, TaskId, ThreadId, next_version
from checkpoints.sqlite import durability, listing, migrations
from checkpoints.sqlite import wal as _wal
from checkpoints.sqlite.listing import INFO_OF_STATUS, PAGES
from checkpoints.sqlite.rows import checks as rows
from checkpoints.testing import support as c

TESTS_DIR = str(Path(__file__).parent)
T1 = c.T1


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "store.sqlite"


@pytest.fixture
async def cp(path: Path) -> AsyncIterator[SqliteCheckpointer]:
    store = SqliteCheckpointer(path)
    yield store
    await store.close()


async def fill(cp: SqliteCheckpointer, steps: int = 5) -> tuple[str, CheckpointId]:
    """Lease T1 and commit ``steps`` W1-like steps with a list channel; (owner, head)."""
    owner = new_owner()
    await cp.acquire_lease(T1, owner, 60.0, graph_name="g")
    head: CheckpointId | None = None
    base = next_version()
    for step in range(steps):
        batch = c.step_batch(head, {"counter": step}, step=step)
        ck = batch.checkpoint
        assert ck is not None
        v = base if step == 0 else next_version()
        kind = "set" if step == 0 else "append"
        batch.channels.append(
            ChannelWrite("msgs", v, kind, [step], base=None if step == 0 else base)
        )
        ck.channel_versions["msgs"] = v
        if step:
            ck.channel_bases["msgs"] = (base, step)
        await cp.commit(T1, owner, batch)
        head = ck.id
    assert head is not None
    return owner, head


async def load_head_state(cp: SqliteCheckpointer) -> dict[str, object]:
    head = await cp.get_checkpoint(T1)
    assert head is not None
    return await cp.load_channels(T1, "", head.channel_versions, head.channel_bases)


async def raw(
    path: Path, sql: str, params: tuple[object, ...] = (), *, timeout: float = 5.0
) -> list[Any]:
    """Run SQL on a connection of its own, in a worker thread (tests never block the loop).

    Used to look at the file, or to change it behind the checkpointer's back as damage or
    another writer would.
    """

    def run() -> list[Any]:
        conn = sqlite3.connect(path, isolation_level=None, timeout=timeout)
        try:
            if "scratch" in sql:  # a table of another application's, for its writes
                conn.execute(SCRATCH)
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    return await anyio.to_thread.run_sync(run)


async def raw_script(path: Path, sql: str) -> None:
    """Run statements separated by ``;`` on a connection of their own (see ``raw``)."""

    def run() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.executescript(sql)
        finally:
            conn.close()

    await anyio.to_thread.run_sync(run)


LEGACY = "CREATE TABLE _graphflow_meta (key TEXT PRIMARY KEY, value)"
"""The second table of migration records that files of older versions have."""

RECOMPUTE_CHECKSUMS = [
    "UPDATE gf_threads SET crc = gf_crc(thread_id, status, graph_name, pending_pause_ids,"
    " pending_count, created_at, updated_at), head_crc = gf_crc(thread_id, head),"
    " lease_crc = gf_crc(thread_id, lease_owner, lease_expires_at),"
    " info_crc = gf_crc(thread_id, status, updated_at, pending_count, graph_name, created_at)",
    "UPDATE gf_checkpoints SET crc = gf_crc(thread_id, ns, id, parent_id, step, source,"
    " channel_versions, channel_bases, body, created_at)",
    "UPDATE gf_channels SET crc = gf_channel_crc(thread_id, ns, channel, version, kind, base,"
    " coalesce(blob, (SELECT data FROM gf_blobs b WHERE b.id = gf_channels.blob_id)))",
    "UPDATE gf_tasks SET crc = gf_crc(thread_id, ns, checkpoint_id, task_id, node, status,"
    " attempts, started_at, ended_at, error, body)",
    "UPDATE gf_memos SET crc = gf_crc(thread_id, ns, checkpoint_id, task_id, key, value,"
    " created_at)",
    "UPDATE gf_pauses SET crc = gf_crc(thread_id, id, ns, checkpoint_id, task_id, node, kind,"
    " value, created_at)",
]
"""What migration 0002 computes for existing rows: run after an edit, it makes the edit
look like damage that predates the upgrade (or a foreign writer that computes checksums),
which the decoders' own checks must catch."""


async def blessed(path: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    """Run SQL on a connection of its own, then give every row a checksum of what it holds."""

    def run() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        rows.install(conn)
        try:
            conn.execute(sql, params)
            for recompute in RECOMPUTE_CHECKSUMS:
                conn.execute(recompute)
        finally:
            conn.close()

    await anyio.to_thread.run_sync(run)


async def on_connection(cp: SqliteCheckpointer, sql: str) -> list[Any]:
    """Run SQL on the checkpointer's own connection, in a worker thread."""
    return await anyio.to_thread.run_sync(
        lambda: cp._db.call(None, lambda c: c.execute(sql).fetchall())
    )


async def run_child(script: str, *args: str) -> str:
    """Run a Python script in a new process; its stdout."""
    done = await anyio.run_process([sys.executable, "-c", script, *args], check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def read_line(proc: Process) -> str:
    """The next line a child prints (children flush every line)."""
    assert proc.stdout is not None
    buf = ""
    async for chunk in TextReceiveStream(proc.stdout):
        buf += chunk
        if "\n" in buf:
            return buf.split("\n", 1)[0]
    raise AssertionError(f"child ended without a line; got {buf!r}")


_PRELUDE = """
import os, sys, time
import anyio
sys.path.insert(0, sys.argv[2])
from checkpoints.testing import support as c
from checkpoints import *
from checkpoints.lease import new_owner
from checkpoints.models import *
"""

WRITER = (
    _PRELUDE
    + """
async def main(path):
    cp = SqliteCheckpointer(path)
    owner = "writer-host:1:x"
    await cp.acquire_lease(c.T1, owner, 60.0, graph_name="g")
    head = None
    for step in range(10):
        batch = c.step_batch(head, {"counter": step, "rich": c.rich_value()}, step=step)
        await cp.commit(c.T1, owner, batch)
        head = batch.checkpoint.id
    pause = PauseRecord(PauseId("p1"), c.T1, "", head, TaskId("t"), "ask", "interrupt", "ok?")
    await cp.commit(c.T1, owner, CommitBatch(pauses=[pause],
                    thread=ThreadUpdate("paused", (pause.id,))))
    await cp.put_answers([AnswerRecord(pause.id, c.T1, c.rich_value(), by="ann")])
    await cp.put_decisions([DecisionRecord(c.T1, CallId("c1"), "approve", "fp")])
    await cp.claim_dispatch(DispatchRecord(c.T1, CallId("c1"), "tool", "fp", owner))
    await cp.complete_dispatch(c.T1, CallId("c1"), status="succeeded", result=(1, "x"))
    await cp.release_lease(c.T1, owner)
    await cp.close()
    print(head)

anyio.run(main, sys.argv[1])
"""
)

RACER = (
    _PRELUDE
    + """
async def main(path, me):
    cp = SqliteCheckpointer(path)
    print("ready", flush=True)
    while not os.path.exists(path + ".go"):
        time.sleep(0.001)
    try:
        await cp.acquire_lease(c.T1, me, 60.0)
        print("won", flush=True)
    except LeaseHeldError:
        print("held", flush=True)
    await cp.close()

anyio.run(main, sys.argv[1], sys.argv[3])
"""
)

CRASHER = (
    _PRELUDE
    + """
async def main(path):
    cp = SqliteCheckpointer(path)
    owner = new_owner()  # this process: known dead once it is killed
    await cp.acquire_lease(c.T1, owner, 3600.0)
    head, base = None, next_version()
    step = 0
    while True:
        batch = c.step_batch(head, {"counter": step}, step=step)
        ck = batch.checkpoint
        v = base if step == 0 else next_version()
        kind = "set" if step == 0 else "append"
        batch.channels.append(ChannelWrite("msgs", v, kind, [step] * 50,
                                           base=None if step == 0 else base))
        ck.channel_versions["msgs"] = v
        if step:
            ck.channel_bases["msgs"] = (base, step)
        await cp.commit(c.T1, owner, batch)
        head = ck.id
        print(step, flush=True)
        step += 1

anyio.run(main, sys.argv[1])
"""
)

SCRATCH = "CREATE TABLE IF NOT EXISTS scratch (key TEXT PRIMARY KEY, value)"

HOLDER = f"""
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("{SCRATCH}")
conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO scratch VALUES ('holder', 1)")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


# -- connection discipline ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_connection_is_wal_full_with_busy_timeout(cp: SqliteCheckpointer) -> None:
    await cp.setup()
    assert await on_connection(cp, "PRAGMA journal_mode") == [("wal",)]
    assert await on_connection(cp, "PRAGMA synchronous") == [(2,)]  # FULL
    # No busy handler: a call waits for another writer's lock itself (lockwait), 5 s at most.
    assert await on_connection(cp, "PRAGMA busy_timeout") == [(0,)]
    assert cp._db.busy_timeout == 5.0
    assert cp._db.conn is not None and not cp._db.conn.in_transaction


@pytest.mark.anyio
async def test_synchronous_and_busy_timeout_options(path: Path) -> None:
    cp = SqliteCheckpointer(path, busy_timeout=0.25, synchronous="normal")
    await cp.setup()
    assert await on_connection(cp, "PRAGMA synchronous") == [(1,)]  # NORMAL
    assert cp._db.busy_timeout == 0.25
    await cp.close()
    with pytest.raises(ValueError, match="synchronous"):
        SqliteCheckpointer(path, synchronous="sometimes")


@pytest.mark.parametrize(
    ("option", "value"),
    [("busy_timeout", "5"), ("busy_timeout", -1), ("busy_timeout", float("nan")),
     ("busy_timeout", True), ("synchronous", 2), ("tuned_sync", "no"), ("group_commit", 1)],
)  # fmt: skip
def test_options_of_the_wrong_kind_are_refused_before_the_file_is_made(
    tmp_path: Path, option: str, value: object
) -> None:
    path = tmp_path / "store.sqlite"
    with pytest.raises(ValueError, match=f"^{option} must be"):
        SqliteCheckpointer(path, **{option: value})  # type: ignore[arg-type]
    assert not path.exists()


@pytest.mark.anyio
async def test_failed_commits_leave_no_transaction_open(cp: SqliteCheckpointer, path: Path) -> None:
    owner, head = await fill(cp, 2)
    bad = [
        (LeaseLostError, "intruder", c.step_batch(head, {"x": 1})),
        (HeadConflictError, owner, c.step_batch(CheckpointId("old"), {"x": 1})),
        (SerializationError, owner, c.step_batch(head, {"x": object()})),
    ]
    for error, who, batch in bad:
        with pytest.raises(error):
            await cp.commit(T1, who, batch)
        assert cp._db.conn is not None and not cp._db.conn.in_transaction
        # The write lock is free at once: another writer that does not wait gets it.
        await raw(path, "INSERT OR REPLACE INTO scratch VALUES ('probe', 1)", timeout=0)


@pytest.mark.anyio
async def test_a_wal_removed_under_a_live_store_is_a_typed_error_naming_the_file(
    cp: SqliteCheckpointer, path: Path
) -> None:
    await fill(cp, 2)  # the file is open, its -wal and -shm beside it
    os.remove(f"{path}-wal")
    other = SqliteCheckpointer(path)  # another store object (or process) opening it now
    with pytest.raises(StoreIOError) as info:
        await other.get_thread(T1)
    assert isinstance(info.value, CheckpointError) and info.value.path == str(path)
    assert f"{path}-wal or {path}-shm was removed" in str(info.value)
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    await other.close()


@pytest.mark.anyio
async def test_concurrent_calls_on_one_object(cp: SqliteCheckpointer) -> None:
    threads = [ThreadId(f"t{i}") for i in range(20)]
    owner = new_owner()

    async def run(tid: ThreadId) -> None:
        await cp.acquire_lease(tid, owner, 60.0)
        batch = c.step_batch(None, {"n": tid}, thread_id=tid)
        await cp.commit(tid, owner, batch)
        assert batch.checkpoint is not None
        versions = batch.checkpoint.channel_versions
        assert await cp.load_channels(tid, "", versions, {}) == {"n": tid}

    async with anyio.create_task_group() as tg:
        for tid in threads:
            tg.start_soon(run, tid)
    assert len(await cp.list_threads("running")) == 20


def test_one_object_across_event_loops(path: Path) -> None:
    """A sync wrapper runs each call in a new event loop: the object must survive that."""
    cp = SqliteCheckpointer(path)
    _owner, head = anyio.run(fill, cp, 3)
    got = anyio.run(cp.get_checkpoint, T1)
    assert got is not None and got.id == head
    anyio.run(cp.close)


# -- durability and lifecycle -------------------------------------------------------------------


@pytest.mark.anyio
async def test_lazy_setup_and_reopen_after_close(path: Path) -> None:
    cp = SqliteCheckpointer(path)
    assert await cp.get_thread(T1) is None  # no setup() call needed
    owner, head = await fill(cp, 4)
    state = await load_head_state(cp)
    assert state == {"counter": 3, "msgs": [0, 1, 2, 3]}
    await cp.close()
    await cp.close()  # twice is fine
    assert cp._db.conn is None
    rec = await cp.get_thread(T1)  # the same object opens the file again
    assert rec is not None and rec.head == head
    await cp.close()

    again = SqliteCheckpointer(path)
    assert await load_head_state(again) == state
    assert [ck.step for ck in await again.list_checkpoints(T1)] == [3, 2, 1, 0]
    await again.commit(T1, owner, c.step_batch(head, {"counter": 4}, step=4))  # lease kept
    await again.close()


@pytest.mark.anyio
@pytest.mark.slow
async def test_data_written_by_another_process(path: Path) -> None:
    head = (await run_child(WRITER, str(path), TESTS_DIR)).strip()
    cp = SqliteCheckpointer(path)
    try:
        rec = await cp.get_thread(T1)
        assert rec is not None
        assert (rec.head, rec.status, rec.pending_pause_ids, rec.lease_owner) == (
            head, "paused", ("p1",), None
        )  # fmt: skip
        ck = await cp.get_checkpoint(T1)
        assert ck is not None and ck.step == 9 and len(await cp.list_checkpoints(T1)) == 10
        state = await cp.load_channels(T1, "", ck.channel_versions, ck.channel_bases)
        assert state["counter"] == 9
        c.assert_rich(state["rich"])
        answers = await cp.load_answers(T1)
        c.assert_rich(answers[PauseId("p1")].value)
        assert [d.verdict for d in await cp.list_decisions(T1)] == ["approve"]
        dispatch = await cp.get_dispatch(T1, CallId("c1"))
        assert dispatch is not None and dispatch.result == (1, "x")
        assert [p.id for p in await cp.list_pauses(T1)] == ["p1"]
    finally:
        await cp.close()


@pytest.mark.anyio
@pytest.mark.slow
async def test_kill_9_mid_run_leaves_a_consistent_head(path: Path) -> None:
    async with await anyio.open_process(
        [sys.executable, "-c", CRASHER, str(path), TESTS_DIR]
    ) as proc:
        while int(await read_line(proc)) < 25:
            pass
        proc.send_signal(signal.SIGKILL)  # somewhere in the middle of a later commit
        await proc.wait()
    cp = SqliteCheckpointer(path)
    try:
        head = await cp.get_checkpoint(T1)
        assert head is not None and head.step >= 25
        # Every checkpoint, the head first, has all its inputs (promise 2).
        history = await cp.list_checkpoints(T1)
        assert [ck.step for ck in history] == list(range(head.step, -1, -1))
        for ck in history[:5]:
            state = await cp.load_channels(T1, "", ck.channel_versions, ck.channel_bases)
            assert state["counter"] == ck.step
            assert state["msgs"] == [i for i in range(ck.step + 1) for _ in range(50)]
        # Its owner is known dead: a new runner takes over at once (promise 3).
        me = new_owner()
        assert (await cp.acquire_lease(T1, me, 60.0)).lease_owner == me
    finally:
        await cp.close()


# -- many processes on one file -----------------------------------------------------------------


@pytest.mark.anyio
async def test_two_objects_on_one_file_contend_for_a_lease(path: Path) -> None:
    a, b = SqliteCheckpointer(path), SqliteCheckpointer(path)  # as two processes would
    try:
        owner_a, head = await fill(a, 1)
        owner_b = new_owner()
        with pytest.raises(LeaseHeldError):
            await b.acquire_lease(T1, owner_b, 60.0)
        with pytest.raises(LeaseLostError):
            await b.commit(T1, owner_b, c.step_batch(head, {"counter": 9}, step=1))
        await a.commit(T1, owner_a, c.step_batch(head, {"counter": 1}, step=1))
        await a.release_lease(T1, owner_a)
        await b.acquire_lease(T1, owner_b, 60.0)
        with pytest.raises(LeaseLostError):
            await a.commit(T1, owner_a, c.step_batch(None, {"counter": 2}, check_head=False))
        assert (await load_head_state(b))["counter"] == 1

        # Both objects race for a fresh thread many times over: exactly one wins each time.
        for i in range(10):
            tid = ThreadId(f"race-{i}")
            wins: list[str] = []

            async def take(
                store: SqliteCheckpointer, who: str, tid: ThreadId = tid, wins: list[str] = wins
            ) -> None:
                try:
                    await store.acquire_lease(tid, who, 60.0)
                    wins.append(who)
                except LeaseHeldError:
                    pass

            async with anyio.create_task_group() as tg:
                tg.start_soon(take, a, f"host-a:{i}:x")
                tg.start_soon(take, b, f"host-b:{i}:x")
            assert len(wins) == 1
            rec = await a.get_thread(tid)
            assert rec is not None and rec.lease_owner == wins[0]
    finally:
        await a.close()
        await b.close()


@pytest.mark.anyio
@pytest.mark.slow
async def test_processes_racing_on_a_new_file(path: Path) -> None:
    """Four processes create the schema and take one lease at once: one wins."""
    procs = []
    try:
        for i in range(4):
            procs.append(
                await anyio.open_process(
                    [sys.executable, "-c", RACER, str(path), TESTS_DIR, f"racer-host:{i}:x"]
                )
            )
        for proc in procs:
            assert await read_line(proc) == "ready"
        await anyio.Path(str(path) + ".go").touch()
        results = sorted([await read_line(proc) for proc in procs])
        for proc in procs:
            assert await proc.wait() == 0
    finally:
        for proc in procs:
            await proc.aclose()
    assert results == ["held", "held", "held", "won"]
    names = [(name,) for name, _ in migrations.MIGRATIONS]
    assert await raw(path, "SELECT name FROM _graphflow_migrations ORDER BY name") == names


class _MigratedMidway:
    """A connection to a new file on which another opener creates the whole schema right
    after this one's first statement found no ledger (the instant four racing processes
    hit at random)."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self._path = path
        self.raced = False

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, *args)
        except sqlite3.OperationalError:
            if not self.raced:
                self.raced = True
                other = SqliteCheckpointer(self._path)  # (not on an event loop: opens now)
                anyio.run(other.close)
            raise


def test_a_store_created_by_another_opener_between_two_reads_is_not_damage(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        racing = _MigratedMidway(conn, path)
        assert migrations.pending(racing, str(path)) is False  # type: ignore[arg-type]
        assert racing.raced  # the other opener did create it in between
    finally:
        conn.close()
    cp = SqliteCheckpointer(path)  # and the file is a sound store
    try:
        assert anyio.run(cp.get_thread, T1) is None
    finally:
        anyio.run(cp.close)


@pytest.mark.anyio
@pytest.mark.slow
async def test_commit_waits_for_another_process_write(cp: SqliteCheckpointer, path: Path) -> None:
    owner, head = await fill(cp, 1)
    async with await anyio.open_process([sys.executable, "-c", HOLDER, str(path), "0.5"]) as proc:
        assert await read_line(proc) == "locked"
        t0 = time.perf_counter()
        await cp.commit(T1, owner, c.step_batch(head, {"counter": 1}, step=1))
        waited = time.perf_counter() - t0
        assert await proc.wait() == 0
    assert waited > 0.2  # it waited for the other writer (busy_timeout), then committed
    assert (await load_head_state(cp))["counter"] == 1
    assert await raw(path, "SELECT value FROM scratch WHERE key = 'holder'") == [(1,)]


@pytest.mark.anyio
@pytest.mark.slow
async def test_busy_timeout_expiry_is_an_error_not_damage(path: Path) -> None:
    cp = SqliteCheckpointer(path, busy_timeout=0.05)
    try:
        owner, head = await fill(cp, 1)
        async with await anyio.open_process(
            [sys.executable, "-c", HOLDER, str(path), "1.0"]
        ) as proc:
            assert await read_line(proc) == "locked"
            with pytest.raises(StoreLockedError, match="locked by another writer"):
                await cp.commit(T1, owner, c.step_batch(head, {"counter": 1}, step=1))
            assert await proc.wait() == 0
        assert (await load_head_state(cp))["counter"] == 0  # nothing was written
        await cp.commit(T1, owner, c.step_batch(head, {"counter": 1}, step=1))  # retry works
    finally:
        await cp.close()


# -- schema ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_schema_is_created_by_named_migrations(cp: SqliteCheckpointer, path: Path) -> None:
    await cp.setup()
    await cp.setup()

    def inspect() -> tuple[set[str], set[str]]:
        db = Database(path)
        try:
            indexes = {i.name for t in ("gf_threads", "gf_channels") for i in db.table(t).indexes}
            return set(db.table_names()), indexes
        finally:
            db.close()

    tables, indexes = await anyio.to_thread.run_sync(inspect)
    expected = {"gf_threads", "gf_checkpoints", "gf_channels", "gf_tasks", "gf_memos",
                "gf_pauses", "gf_answers", "gf_decisions", "gf_dispatches",
                "_graphflow_migrations"}  # fmt: skip
    assert expected <= tables
    assert "_graphflow_meta" not in tables  # one table records the migrations
    assert {"threads_by_status"} <= indexes
    applied = await raw(path, "SELECT name FROM _graphflow_migrations")
    assert applied == [(name,) for name, _ in migrations.MIGRATIONS]
    assert len(applied) == migrations.SCHEMA_VERSION
    # Reopening applies nothing again.
    await cp.close()
    again = SqliteCheckpointer(path)
    await again.setup()
    await again.close()
    count = await raw(path, "SELECT count(*) FROM _graphflow_migrations")
    assert count == [(len(migrations.MIGRATIONS),)]


@pytest.mark.anyio
async def test_newer_schema_version_is_refused(cp: SqliteCheckpointer, path: Path) -> None:
    """A newer graphflow appends migrations: its file lists one unknown here and counts it."""
    await fill(cp, 1)
    await cp.close()
    newer = migrations.SCHEMA_VERSION + 1
    await raw(path, "INSERT INTO _graphflow_migrations VALUES ('9999_from_the_future', 0)")
    store = SqliteCheckpointer(path)
    with pytest.raises(SchemaVersionError, match=f"schema version {newer}.*upgrade graphflow"):
        await store.get_thread(T1)
    with pytest.raises(SchemaVersionError, match="9999_from_the_future"):
        await store.setup()
    await store.close()


@pytest.mark.anyio
@pytest.mark.parametrize(
    "damage",
    [
        # The record of older versions (a legacy file) that does not count the migrations:
        f"{LEGACY}; INSERT INTO _graphflow_meta VALUES ('schema_version', 1)",
        f"{LEGACY}; INSERT INTO _graphflow_meta VALUES ('schema_version', 'two')",
        f"{LEGACY}",
        f"{LEGACY}; INSERT INTO _graphflow_meta VALUES ('schema_version', 2);"
        " INSERT INTO _graphflow_migrations VALUES ('9999_from_the_future', 0)",
        "DELETE FROM _graphflow_migrations WHERE name = '0001_initial'",
        "DELETE FROM _graphflow_migrations WHERE name = '0002_checksums'",
        "UPDATE _graphflow_migrations SET name = '0001_initiam' WHERE name = '0001_initial'",
        "UPDATE _graphflow_migrations SET name = 7 WHERE name = '0001_initial'",
        "DROP TABLE _graphflow_migrations",
    ],
)
async def test_damaged_migration_records_are_damage(
    cp: SqliteCheckpointer, path: Path, damage: str
) -> None:
    """Migration records that contradict each other (or are gone, the tables being there)
    are damage naming the file: never "written by a newer graphflow", never a migration run
    again on tables it made already (``table gf_threads already exists``)."""
    await fill(cp, 1)
    await cp.close()
    await raw_script(path, damage)
    before = path.read_bytes()
    store = SqliteCheckpointer(path)
    for call in (store.setup, lambda: store.get_thread(T1)):
        with pytest.raises(CorruptCheckpointError, match="is damaged") as err:
            await call()
        assert repr(str(path)) in str(err.value)
        assert "already exists" not in str(err.value) or "meets its own tables" in str(err.value)
    await store.close()
    assert path.read_bytes() == before  # nothing migrated, nothing "repaired"


@pytest.mark.anyio
async def test_a_migration_meeting_its_own_tables_is_damage(path: Path) -> None:
    """The migration records say 0001 did not run, yet its tables exist (the records are
    consistent among themselves: a file made by hand): 0001 must not run again."""
    cp = SqliteCheckpointer(path)
    await fill(cp, 1)
    await cp.close()
    await raw(path, "DELETE FROM _graphflow_migrations")
    store = SqliteCheckpointer(path)
    with pytest.raises(CorruptCheckpointError, match="'0001_initial' meets its own tables"):
        await store.setup()
    await store.close()
    assert await raw(path, "SELECT count(*) FROM gf_checkpoints") == [(1,)]


# -- damage ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_corrupt_channel_blob(cp: SqliteCheckpointer, path: Path) -> None:
    await fill(cp, 3)
    await raw(path, "UPDATE gf_channels SET blob = X'C1C1C1C1' WHERE channel = 'counter'")
    head = await cp.get_checkpoint(T1)
    assert head is not None
    with pytest.raises(CorruptCheckpointError) as err:
        await cp.load_channels(T1, "", head.channel_versions, head.channel_bases)
    assert err.value.thread_id == T1 and "'thread-1'" in str(err.value)
    assert "'counter'" in str(err.value)


@pytest.mark.anyio
async def test_corrupt_checkpoint_and_records(cp: SqliteCheckpointer, path: Path) -> None:
    _owner, head = await fill(cp, 3)
    await blessed(path, "UPDATE gf_checkpoints SET body = X'92C1' WHERE id = ?", (head,))
    with pytest.raises(CorruptCheckpointError) as err:
        await cp.get_checkpoint(T1)
    assert (err.value.thread_id, err.value.checkpoint_id) == (T1, head)
    assert head in str(err.value) and "'thread-1'" in str(err.value)
    with pytest.raises(CorruptCheckpointError):
        await cp.list_checkpoints(T1)

    # Valid msgpack of the wrong shape is damage too, never a half-built record.
    await blessed(path, "UPDATE gf_checkpoints SET body = ? WHERE id = ?", (serde.dumps([1]), head))
    with pytest.raises(CorruptCheckpointError, match="invalid shape"):
        await cp.get_checkpoint(T1, checkpoint_id=head)

    for column, value in [
        ("channel_versions", serde.dumps([5])),  # a list where a map belongs
        ("channel_versions", serde.dumps({"counter": "5"})),  # a string where an int belongs
        ("channel_bases", serde.dumps({"msgs": 5})),
        ("body", serde.dumps([{}, {}])),  # a map where the frontier list belongs
    ]:
        await blessed(path, f"UPDATE gf_checkpoints SET {column} = ? WHERE id = ?", (value, head))
        with pytest.raises(CorruptCheckpointError, match="invalid shape") as err:
            await cp.get_checkpoint(T1)
        assert err.value.checkpoint_id == head
        valid = (serde.dumps({}), serde.dumps([[], {}]), head)
        await blessed(
            path,
            "UPDATE gf_checkpoints SET channel_versions = ?, channel_bases = NULL, body = ?"
            " WHERE id = ?",
            valid,
        )

    await blessed(path, "UPDATE gf_threads SET pending_pause_ids = X'FFFF'")
    with pytest.raises(CorruptCheckpointError, match="thread-1"):
        await cp.get_thread(T1)

    await blessed(path, "UPDATE gf_threads SET pending_pause_ids = ?", (serde.dumps(5),))
    with pytest.raises(CorruptCheckpointError, match="invalid shape"):
        await cp.get_thread(T1)

    await blessed(path, "UPDATE gf_tasks SET body = X'C1'")
    [(tasks,)] = await raw(path, "SELECT checkpoint_id FROM gf_tasks LIMIT 1")
    with pytest.raises(CorruptCheckpointError, match="thread-1"):
        await cp.load_tasks(T1, "", tasks)
    await blessed(path, "UPDATE gf_tasks SET body = ?", (serde.dumps(5),))
    with pytest.raises(CorruptCheckpointError, match="invalid shape"):
        await cp.load_tasks(T1, "", tasks)


@pytest.mark.anyio
async def test_list_channel_of_the_wrong_shape(cp: SqliteCheckpointer, path: Path) -> None:
    await fill(cp, 3)
    ck = await cp.get_checkpoint(T1)
    assert ck is not None
    await blessed(path, "UPDATE gf_channels SET blob = ? WHERE channel = 'msgs' AND kind = 'set'",
        (serde.dumps(5),))  # fmt: skip
    with pytest.raises(CorruptCheckpointError, match="invalid shape") as err:
        await cp.load_channels(T1, "", ck.channel_versions, ck.channel_bases)
    assert err.value.thread_id == T1


async def paused(cp: SqliteCheckpointer) -> tuple[str, CheckpointId]:
    """``fill`` then a pause: T1 paused at its head, lease released."""
    owner, head = await fill(cp, 3)
    pause = PauseRecord(PauseId("p1"), T1, "", head, TaskId("t"), "ask", "interrupt", "ok?")
    await cp.commit(T1, owner, CommitBatch(pauses=[pause],
                    thread=ThreadUpdate("paused", (pause.id,)), release=True))  # fmt: skip
    return owner, head


async def every_read_is_corrupt(cp: SqliteCheckpointer, match: str) -> None:
    """get_thread and resume_thread raise CorruptCheckpointError naming T1 (and ``match``)."""
    for read in (lambda: cp.get_thread(T1), lambda: cp.resume_thread(T1, new_owner(), 60.0)):
        with pytest.raises(CorruptCheckpointError, match=match) as err:
            await read()
        assert err.value.thread_id == T1 and "'thread-1'" in str(err.value)


@pytest.mark.anyio
@pytest.mark.parametrize("ids", [[["p1"]], [1], [None], "p1", [], [b"p1"]], ids=repr)
async def test_pending_pause_ids_of_the_wrong_type(
    cp: SqliteCheckpointer, path: Path, ids: object
) -> None:
    """Items that are not pause ids used to reach SQL (sqlite3.ProgrammingError), or to be
    iterated (a string into characters): damage. Written as a schema-1 file held them
    before the upgrade gave them checksums (``blessed``), so the decoder's check alone acts."""
    await paused(cp)
    await blessed(path, "UPDATE gf_threads SET pending_pause_ids = ?", (serde.dumps(ids),))
    await every_read_is_corrupt(cp, "pending pauses")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("channel_versions", {"counter": 2**64}),  # once OverflowError when bound to SQL
        ("channel_versions", {"counter": -1}),
        ("channel_versions", {"counter": True}),
        ("channel_bases", {"msgs": [2**63, 1]}),
        ("channel_bases", {"msgs": [1, -1]}),
        ("channel_bases", {"nope": [1, 1]}),  # a base of a channel the checkpoint lacks
    ],
    ids=repr,
)
async def test_channel_versions_out_of_range(
    cp: SqliteCheckpointer, path: Path, column: str, value: object
) -> None:
    _owner, head = await paused(cp)
    [(versions,)] = await raw(path, "SELECT channel_versions FROM gf_checkpoints WHERE id = ?",
                              (head,))  # fmt: skip
    if column == "channel_versions":
        value = {**serde.loads(versions), **value}  # type: ignore[dict-item]
    await blessed(path, f"UPDATE gf_checkpoints SET {column} = ? WHERE id = ?",
                  (serde.dumps(value), head))  # fmt: skip
    for read in (lambda: cp.get_checkpoint(T1), lambda: cp.resume_thread(T1, new_owner(), 60)):
        with pytest.raises(CorruptCheckpointError, match="invalid shape") as err:
            await read()
        assert (err.value.thread_id, err.value.checkpoint_id) == (T1, head)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("table", "column"),
    [
        ("gf_checkpoints", "step"), ("gf_checkpoints", "created_at"),
        ("gf_threads", "lease_expires_at"), ("gf_threads", "created_at"),
        ("gf_threads", "updated_at"), ("gf_threads", "status"), ("gf_threads", "pending_count"),
        ("gf_tasks", "attempts"), ("gf_tasks", "started_at"), ("gf_tasks", "status"),
        ("gf_pauses", "created_at"), ("gf_pauses", "kind"), ("gf_memos", "created_at"),
    ],
)  # fmt: skip
async def test_text_in_numeric_or_time_columns(
    cp: SqliteCheckpointer, path: Path, table: str, column: str
) -> None:
    """Text where a number, a time or a known status belongs used to surface as a TypeError
    (comparing a lease expiry, adding to a step) or a wrong record: damage, named."""
    _owner, head = await paused(cp)
    await cp.commit(T1, "x", CommitBatch(acquire_ttl=60.0))  # a lease with an expiry
    await cp.commit(T1, "x", CommitBatch(
        memos=[MemoRecord(head, TaskId("t"), "k", 1)],
        tasks=[TaskRecord(head, TaskId("t"), "ask", "paused", 1, 2.0)], release=True,
    ))  # fmt: skip
    await blessed(path, f"UPDATE {table} SET {column} = 'soon'")
    reads = {
        "gf_checkpoints": lambda: cp.get_checkpoint(T1),
        "gf_threads": lambda: cp.get_thread(T1),
        "gf_tasks": lambda: cp.load_tasks(T1, "", head),
        "gf_pauses": lambda: cp.list_pauses(T1),
        "gf_memos": lambda: cp.load_memos(T1, "", head),
    }
    for read in (reads[table], lambda: cp.resume_thread(T1, new_owner(), 60.0)):
        with pytest.raises(CorruptCheckpointError, match="invalid shape") as err:
            await read()
        assert err.value.thread_id == T1


@pytest.mark.anyio
@pytest.mark.parametrize(
    "case", ["a list channel holding a string", "erased channel versions",
             "a flipped byte in an int", "a flipped letter in a value"],
)  # fmt: skip
async def test_damage_that_still_decodes_is_detected(
    cp: SqliteCheckpointer, path: Path, case: str
) -> None:
    """Damage that decodes used to become the state: a list channel holding a string was
    iterated into characters, erased channel versions reset every channel to its default,
    a flipped byte in a value was returned as is. Checksums catch each."""
    _owner, head = await paused(cp)
    ck = await cp.get_checkpoint(T1)
    assert ck is not None
    versions, bases = ck.channel_versions, ck.channel_bases
    load = lambda: cp.load_channels(T1, "", versions, bases)  # noqa: E731
    [(text,)] = await raw(path, "SELECT value FROM gf_pauses")
    sql, params, read = {
        "a list channel holding a string": (
            "UPDATE gf_channels SET blob = ? WHERE channel = 'msgs' AND kind = 'set'",
            (serde.dumps("abc"),), load),
        "erased channel versions": (
            "UPDATE gf_checkpoints SET channel_versions = ?, channel_bases = NULL WHERE id = ?",
            (serde.dumps({}), head), lambda: cp.get_checkpoint(T1)),
        "a flipped byte in an int": (
            "UPDATE gf_channels SET blob = ? WHERE channel = 'counter' AND version = ?",
            (serde.dumps(3), versions["counter"]), load),
        "a flipped letter in a value": (
            "UPDATE gf_pauses SET value = ?", (text.replace(b"ok?", b"ok!"),),
            lambda: cp.list_pauses(T1)),
    }[case]  # fmt: skip
    await raw(path, sql, params)
    with pytest.raises(CorruptCheckpointError, match="checksum mismatch") as err:
        await read()
    assert err.value.thread_id == T1
    with pytest.raises(CorruptCheckpointError):
        await cp.resume_thread(T1, new_owner(), 60.0)


@pytest.mark.anyio
@pytest.mark.parametrize("column", ["graph_name", "head", "lease_owner", "lease_expires_at"])
async def test_writes_never_bless_a_damaged_thread_row(
    cp: SqliteCheckpointer, path: Path, column: str
) -> None:
    """A write to a thread row recomputes the checksum of what it changes only: the damage
    of another column stays visible (or the write refuses, naming it), never gets a fresh
    checksum. A status change, which recomputes the status checksum in SQL, checks it first."""
    owner, head = await fill(cp, 2)
    value = {"graph_name": "h", "head": "x" + head[1:], "lease_owner": owner + "!",
             "lease_expires_at": 1.0}[column]  # fmt: skip
    await raw(path, f"UPDATE gf_threads SET {column} = ?", (value,))
    writes = [
        lambda: cp.renew_lease(T1, owner, 60.0),
        lambda: cp.commit(T1, owner, CommitBatch()),
        lambda: cp.commit(T1, owner, c.step_batch(head, {"counter": 9}, step=2)),
        lambda: cp.commit(T1, owner, CommitBatch(thread=ThreadUpdate("done"))),
        lambda: cp.release_lease(T1, owner),
    ]
    refused = 0
    for write in writes:
        try:
            await write()
        except CorruptCheckpointError as e:
            assert "thread row" in str(e) and e.thread_id == T1
            refused += 1
        except (LeaseLostError, HeadConflictError):
            pass  # (a damaged lease or head fences the write off)
        if column in ("lease_expires_at",):
            continue  # the renewal rewrote the lease whole: no damage is left to see
        with pytest.raises(CorruptCheckpointError, match="checksum mismatch"):
            await cp.get_thread(T1)
    assert refused >= (column != "lease_expires_at")  # the status change at least


@pytest.mark.anyio
async def test_missing_table_is_damage(cp: SqliteCheckpointer, path: Path) -> None:
    await fill(cp, 1)
    await cp.close()
    await raw(path, "DROP TABLE gf_memos")
    with pytest.raises(CorruptCheckpointError, match="no such table: gf_memos"):
        await cp.load_memos(T1, "", CheckpointId("c"))


@pytest.mark.anyio
async def test_deleted_rows(cp: SqliteCheckpointer, path: Path) -> None:
    _owner, head = await fill(cp, 4)
    ck = await cp.get_checkpoint(T1)
    assert ck is not None
    # An append row in the middle of a list channel's chain.
    await raw(path, "DELETE FROM gf_channels WHERE channel = 'msgs' AND version = ("
              "SELECT version FROM gf_channels WHERE channel = 'msgs' AND kind = 'append'"
              " ORDER BY version LIMIT 1)")  # fmt: skip
    with pytest.raises(CorruptCheckpointError, match="'msgs'") as err:
        await cp.load_channels(T1, "", ck.channel_versions, ck.channel_bases)
    assert err.value.thread_id == T1
    # A plain channel's row.
    await raw(path, "DELETE FROM gf_channels WHERE channel = 'counter'")
    with pytest.raises(CorruptCheckpointError, match="'counter'"):
        await cp.load_channels(T1, "", {"counter": ck.channel_versions["counter"]}, {})
    # resume_thread reads them in the transaction that takes the lease: not taken.
    await cp.release_lease(T1, _owner)
    with pytest.raises(CorruptCheckpointError, match=r"'msgs'|'counter'"):
        await cp.resume_thread(T1, new_owner(), 60.0)
    th = await cp.get_thread(T1)
    assert th is not None and th.lease_owner is None
    # The head checkpoint itself: reported, not taken for a new thread.
    await raw(path, "DELETE FROM gf_checkpoints WHERE id = ?", (head,))
    with pytest.raises(CorruptCheckpointError) as err:
        await cp.get_checkpoint(T1)
    assert (err.value.thread_id, err.value.checkpoint_id) == (T1, head)
    with pytest.raises(CorruptCheckpointError) as err:
        await cp.resume_thread(T1, new_owner(), 60.0)
    assert (err.value.thread_id, err.value.checkpoint_id) == (T1, head)
    th = await cp.get_thread(T1)
    assert th is not None and th.lease_owner is None


@pytest.mark.anyio
@pytest.mark.parametrize("damage", ["truncated", "header", "random"])
async def test_damaged_file(path: Path, damage: str) -> None:
    cp = SqliteCheckpointer(path, synchronous="OFF")
    await fill(cp, 60)
    await cp.close()  # checkpoints the WAL into the file

    def damage_file() -> None:
        size = path.stat().st_size
        if damage == "random":
            path.write_bytes(os.urandom(size))
            return
        with path.open("r+b") as f:
            f.truncate(size // 2 if damage == "truncated" else 50)

    await anyio.to_thread.run_sync(damage_file)
    store = SqliteCheckpointer(path)
    try:
        with pytest.raises(CorruptCheckpointError) as err:
            await store.get_thread(T1)
        assert err.value.thread_id == T1 and "'thread-1'" in str(err.value)
        assert str(path) in str(err.value)
        assert isinstance(err.value.__cause__, sqlite3.DatabaseError)
        with pytest.raises(CorruptCheckpointError):
            await store.get_checkpoint(T1)
        with pytest.raises(CorruptCheckpointError):
            await store.list_threads("paused")
        with pytest.raises(CorruptCheckpointError):
            await store.setup()
    finally:
        await store.close()


# -- listing -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_listing_1000_paused_threads(
    path: Path, record_property: Callable[[str, object], None]
) -> None:
    writer = SqliteCheckpointer(path, synchronous="OFF")  # filling fast; not what is measured
    owner = new_owner()
    for i in range(2000):
        tid = ThreadId(f"thread-{i:05d}")
        await writer.acquire_lease(tid, owner, 60.0)
        status = "paused" if i % 2 else "done"
        pauses = (PauseId(f"p{i}"),) if status == "paused" else ()
        await writer.commit(tid, owner, CommitBatch(thread=ThreadUpdate(status, pauses)))
    await writer.close()

    cp = SqliteCheckpointer(path)
    try:
        await cp.setup()
        timings = []
        for _ in range(7):
            t0 = time.perf_counter()
            paused = await cp.list_threads("paused")
            timings.append(time.perf_counter() - t0)
        ms = statistics.median(timings) * 1000
        print(f"\nlist_threads('paused'): 1,000 of 2,000 threads in {ms:.2f} ms (median of 7)")
        record_property("list_1000_paused_ms", round(ms, 3))
        assert len(paused) == 1000 and {i.pending_pauses for i in paused} == {1}
        assert paused[0].thread_id == "thread-01999"
        assert [i.updated_at for i in paused] == sorted(
            (i.updated_at for i in paused), reverse=True
        )
        # One range of the index, which holds every column read: no row of the table is read
        # and nothing is sorted.
        plan = await on_connection(cp, f"EXPLAIN QUERY PLAN {INFO_OF_STATUS}".replace("?", "''"))
        assert [row[-1] for row in plan] == [
            "SEARCH gf_threads USING COVERING INDEX threads_by_status (status=?)"
        ]
        # Pages are in thread-id order, and counting reads no thread.
        page = await cp.list_threads("paused", limit=100)
        assert [i.thread_id for i in page] == sorted(i.thread_id for i in paused)[:100]
        assert (
            await cp.list_threads("paused", limit=100, after=page[-1].thread_id)
            == sorted(paused, key=lambda i: i.thread_id)[100:200]
        )
        assert (await cp.count_threads("paused"), await cp.count_threads()) == (1000, 2000)
    finally:
        await cp.close()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("column", "value"),
    [("pending_count", -1), ("updated_at", float("inf")), ("created_at", "yesterday"),
     ("graph_name", b"g"), ("thread_id", b"t-1")],
)  # fmt: skip
async def test_a_listed_row_of_the_wrong_kind_is_damage_even_with_its_checksum(
    path: Path, column: str, value: object
) -> None:
    """A listing by status checks each row inline; a row whose checksum was recomputed over
    a value of the wrong type or range (a foreign writer) is refused like any damage, in
    the listing and in each page that holds it."""
    cp = SqliteCheckpointer(path)
    owner = new_owner()
    for i in range(3):
        tid = ThreadId(f"t-{i}")
        await cp.acquire_lease(tid, owner, 60.0)
        await cp.commit(tid, owner, CommitBatch(thread=ThreadUpdate("paused", (PauseId("p"),))))
    listed = await cp.list_threads("paused")
    assert [t.thread_id for t in listed] == ["t-2", "t-1", "t-0"]
    await cp.close()
    await blessed(path, f"UPDATE gf_threads SET {column} = ? WHERE thread_id = 't-1'", (value,))
    cp = SqliteCheckpointer(path)
    try:
        for listing in (cp.list_threads("paused"), cp.list_threads("paused", limit=3)):
            with pytest.raises(CorruptCheckpointError, match="thread row"):
                await listing
        assert [t.thread_id for t in await cp.list_threads("paused", limit=1)] == ["t-0"]
    finally:
        await cp.close()


@pytest.mark.anyio
async def test_a_page_is_one_range_of_an_index(cp: SqliteCheckpointer) -> None:
    """A page of a status is a range of ``threads_by_id`` from the cursor; a page of all, a
    range of the table's key: in order, nothing sorted, ``limit`` rows read."""
    await cp.setup()
    plans = {}
    for key, sql in PAGES.items():
        literal = sql.replace(":status", "'paused'").replace(":after", "'t'")
        plan = await on_connection(cp, "EXPLAIN QUERY PLAN " + literal.replace(":limit", "9"))
        plans[key] = [row[-1] for row in plan]
    assert plans == {  # (the table is its key's b-tree: m0005_compact)
        (False, False): ["SCAN gf_threads"],
        (False, True): ["SEARCH gf_threads USING PRIMARY KEY (thread_id>?)"],
        (True, False): ["SEARCH gf_threads USING INDEX threads_by_id (status=?)"],
        (True, True): ["SEARCH gf_threads USING INDEX threads_by_id (status=? AND thread_id>?)"],
    }


@pytest.mark.anyio
async def test_a_damaged_count_is_refused_and_stays_so(cp: SqliteCheckpointer, path: Path) -> None:
    """``count_threads`` has no rows to compare a count with: each count carries a tally (its
    status and number as text), so a count edited behind the store's back is damage, and a
    later status change, which moves counts only while they agree, does not mend it."""
    owner = new_owner()
    for tid in ("a", "b"):
        await cp.acquire_lease(ThreadId(tid), owner, 60.0)
        await cp.commit(ThreadId(tid), owner, CommitBatch(thread=ThreadUpdate("paused")))
    assert (await cp.count_threads("paused"), await cp.count_threads()) == (2, 2)
    assert await raw(path, "SELECT status, n, tally FROM gf_thread_counts ORDER BY status") == [
        ("paused", 2, "paused:2"), ("running", 0, "running:0"),
    ]  # fmt: skip
    await raw(path, "UPDATE gf_thread_counts SET n = 3 WHERE status = 'paused'")
    for status in ("paused", None, "running"):
        with pytest.raises(CorruptCheckpointError, match="threads of status 'paused' is damaged"):
            await cp.count_threads(status)
    await cp.commit(ThreadId("a"), owner, CommitBatch(thread=ThreadUpdate("done")))
    assert await raw(path, "SELECT n, tally FROM gf_thread_counts WHERE status = 'paused'") == [
        (3, "paused:2")
    ]
    with pytest.raises(CorruptCheckpointError):
        await cp.count_threads("paused")
    with pytest.raises(CorruptCheckpointError):
        await cp.list_threads("done")


@pytest.mark.anyio
async def test_bad_listing_arguments_are_refused_before_the_file_is_read(path: Path) -> None:
    path.write_bytes(b"not a checkpoint store " * 200)
    store = SqliteCheckpointer(path)
    try:
        with pytest.raises(ValueError, match="limit must be a positive int"):
            await store.list_threads("paused", limit=0)
        with pytest.raises(ValueError, match="after must be a cursor"):
            await store.list_threads(after=7)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="status"):
            await store.count_threads("bogus")  # type: ignore[arg-type]
        with pytest.raises(CheckpointError):  # what reading it says
            await store.list_threads(limit=1)
    finally:
        await store.close()


# -- records that need no other test -----------------------------------------------------------


@pytest.mark.anyio
async def test_small_records_stay_small(cp: SqliteCheckpointer, path: Path) -> None:
    await fill(cp, 3)
    [(body, versions, bases)] = await raw(
        path,
        "SELECT length(body), length(channel_versions), channel_bases FROM gf_checkpoints"
        " ORDER BY id LIMIT 1",
    )
    assert body < 40 and versions < 40 and bases is None  # one TaskSpec, two versions
    types = "SELECT typeof(step), typeof(version) FROM gf_checkpoints, gf_channels LIMIT 1"
    assert await raw(path, types) == [("integer", "integer")]
    assert await raw(path, "SELECT DISTINCT body FROM gf_tasks") == [(None,)]
    pending = await raw(path, "SELECT pending_pause_ids, pending_count FROM gf_threads")
    assert pending == [(None, 0)]


@pytest.mark.anyio
async def test_pause_record_fields_round_trip(cp: SqliteCheckpointer) -> None:
    owner, head = await fill(cp, 1)
    pause = PauseRecord(PauseId("p"), T1, "a:b", head, TaskId("t"), "n", "before", None, 7.25)
    await cp.commit(T1, owner, CommitBatch(pauses=[pause]))
    assert await cp.get_pauses(T1, [pause.id]) == [pause]


@pytest.mark.anyio
async def test_relaxed_writes_never_leave_the_connection_relaxed(path: Path) -> None:
    """A lease or a non-durable commit skips the fsync; every other write is FULL again."""
    cp = SqliteCheckpointer(path)
    owner = "me"
    await cp.acquire_lease(T1, owner, 60.0)  # a lease: relaxed
    assert await on_connection(cp, "PRAGMA synchronous") == [(2,)]
    ck = CheckpointRecord(id=CheckpointId("c1"), thread_id=T1, ns="", parent_id=None, step=-1,
                          source="input", channel_versions={}, frontier=(),
                          created_at=1.0)  # fmt: skip
    await cp.commit(T1, owner, CommitBatch(checkpoint=ck, durable=False))
    assert await on_connection(cp, "PRAGMA synchronous") == [(2,)]
    assert (await cp.get_checkpoint(T1)) == ck
    await cp.close()


def trace_statements(cp: SqliteCheckpointer) -> list[str]:
    """The statements cp's connection runs from now on (PRAGMAs, BEGIN and COMMIT included)."""
    assert cp._db.conn is not None
    seen: list[str] = []
    cp._db.conn.set_trace_callback(lambda sql: seen.append(" ".join(sql.split())[:40]))
    return seen


def around_commit(seen: list[str]) -> list[str]:
    """The transaction-control statements in ``seen``, in order."""
    keep = ("PRAGMA synchronous", "BEGIN", "COMMIT", "ROLLBACK")
    return [s for s in seen if s.startswith(keep)]


@pytest.mark.anyio
async def test_untuned_sync_waits_for_every_fsync_and_keeps_no_room(path: Path) -> None:
    """``tuned_sync=False`` (the baseline of A/B measurements): the first lease of a new WAL,
    a lease, an input commit and a step commit all run at the configured level, and nothing
    is written into the WAL ahead of SQLite."""
    cp = SqliteCheckpointer(path, tuned_sync=False)
    await cp.setup()  # (made on the event loop: it opens on first use)
    await cp.close()
    await cp.setup()
    assert os.path.getsize(f"{path}-wal") == 0
    seen = trace_statements(cp)
    owner, head = await fill(cp, 1)  # a lease, then a durable step commit
    await cp.commit(T1, owner, CommitBatch.input(c.checkpoint(parent=head, step=1), []))
    await cp.release_lease(T1, owner)
    assert [s for s in around_commit(seen) if s.startswith("PRAGMA")] == []  # FULL throughout
    assert await on_connection(cp, "PRAGMA synchronous") == [(2,)]
    assert os.path.getsize(f"{path}-wal") % _wal.ROOM_BYTES != 0  # SQLite's frames alone
    await cp.close()


@pytest.mark.anyio
async def test_a_lease_that_starts_the_wal_is_not_synced_alone(path: Path) -> None:
    """A process's first write to a closed store (its WAL is empty) is a lease: it starts the
    WAL without syncing its header (the next durable commit syncs it); later leases, whose
    WAL holds frames, keep SQLite's header sync; the level is FULL again right after."""
    cp = SqliteCheckpointer(path)
    await cp.setup()  # (made on the event loop: it opens on first use)
    await cp.close()  # the last close checkpoints and deletes the WAL
    await cp.setup()
    assert os.path.getsize(f"{path}-wal") == 0
    seen = trace_statements(cp)
    owner, _ = await fill(cp, 1)  # a lease, then a step's durable commit
    assert around_commit(seen) == [
        "PRAGMA synchronous=OFF", "BEGIN IMMEDIATE", "COMMIT", "PRAGMA synchronous=FULL",
        "BEGIN IMMEDIATE", "COMMIT",
    ]  # fmt: skip
    seen.clear()
    await cp.release_lease(T1, owner)
    assert around_commit(seen) == ["PRAGMA synchronous=NORMAL", "BEGIN IMMEDIATE", "COMMIT"]
    await cp.close()
    cp = SqliteCheckpointer(path)  # resume_thread, as a resuming process calls it
    await cp.setup()  # (made on the event loop: it opens on first use)
    seen = trace_statements(cp)
    point = await cp.resume_thread(T1, "again", 60.0)
    assert point is not None and point.thread.lease_owner == "again"
    assert around_commit(seen)[0] == "PRAGMA synchronous=OFF"
    assert await on_connection(cp, "PRAGMA synchronous") == [(2,)]
    await cp.close()
    assert await raw(path, "SELECT lease_owner FROM gf_threads") == [("again",)]


@pytest.mark.anyio
async def test_a_write_between_the_look_and_the_lock_keeps_the_header_sync(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process writing after the WAL was seen empty, before this one's BEGIN: the
    lease is taken again at NORMAL (SQLite syncs the header of a WAL it restarts)."""
    cp = SqliteCheckpointer(path)
    await cp.setup()  # (made on the event loop: it opens on first use)
    await cp.close()
    await cp.setup()
    looks: list[bool] = []
    real_look = cp._durability.wal_is_empty

    def look() -> bool:
        empty = real_look()
        if not looks:  # the first look: another process writes right after it
            other = sqlite3.connect(path, isolation_level=None)
            other.execute(SCRATCH)
            other.execute("INSERT INTO scratch VALUES ('probe', 1)")
            other.close()
        looks.append(empty)
        return empty

    monkeypatch.setattr(cp._durability, "wal_is_empty", look)
    seen = trace_statements(cp)
    await cp.acquire_lease(T1, "me", 60.0)
    assert looks == [True, False]
    assert around_commit(seen) == [
        "PRAGMA synchronous=OFF", "BEGIN IMMEDIATE", "ROLLBACK", "PRAGMA synchronous=NORMAL",
        "BEGIN IMMEDIATE", "COMMIT",
    ]  # fmt: skip
    assert (await cp.get_thread(T1)) is not None
    assert await on_connection(cp, "PRAGMA synchronous") == [(2,)]
    assert os.path.getsize(f"{path}-wal") < _wal.ROOM_BYTES  # no room made either
    await cp.close()


WAL_MAGIC = (0x377F0682, 0x377F0683)  # the first four bytes of a WAL header (big-endian)


@pytest.mark.anyio
async def test_a_new_wal_is_given_room_that_the_commits_overwrite(path: Path) -> None:
    """The first lease of a process on a closed store (an empty WAL) fills the WAL with zeros
    under the write lock; SQLite writes its header and frames over them, so the following
    commits do not grow the file (an fsync of an overwrite costs less than of an append)."""
    cp = SqliteCheckpointer(path)
    await cp.setup()  # (made on the event loop: it opens on first use)
    await cp.close()
    await cp.setup()
    wal = Path(f"{path}-wal")
    assert wal.stat().st_size == 0
    owner, head = await fill(cp, 3)  # a lease, then three durable step commits
    data = wal.read_bytes()
    assert len(data) == _wal.ROOM_BYTES  # overwritten, not grown
    assert int.from_bytes(data[:4], "big") in WAL_MAGIC
    assert data.endswith(bytes(4096))  # the tail is still zeros
    # Another connection reads the commits through the WAL; the file is sound.
    assert await raw(path, "SELECT count(*) FROM gf_checkpoints") == [(3,)]
    assert await raw(path, "PRAGMA integrity_check") == [("ok",)]
    th = await cp.get_thread(T1)
    assert th is not None and th.head == head and th.lease_owner == owner
    await cp.close()
    assert not wal.exists()  # the last close checkpoints and removes it, as before
    cp = SqliteCheckpointer(path)
    assert (await cp.get_checkpoint(T1)) is not None
    await cp.close()


@pytest.mark.anyio
async def test_a_durable_commit_keeps_room_past_the_frames(path: Path) -> None:
    """Once frames reach the end of the room (here: another connection, which keeps none,
    writes past it), the next durable commit writes zeros from the file's end to one to two
    chunks beyond it, under the write lock, before its own frames; nothing before the end
    changes. A lease alone (no fsync of its own) leaves the file as it is."""
    cp = SqliteCheckpointer(path)
    await cp.setup()  # (made on the event loop: it opens on first use)
    await cp.close()
    await cp.setup()
    owner, head = await fill(cp, 1)
    room = _wal.ROOM_BYTES
    wal = Path(f"{path}-wal")
    assert wal.stat().st_size == room
    for i in range(40):  # past the room, as any other writer may
        await raw(path, "INSERT INTO scratch VALUES (?, ?)", (f"big{i}", bytes(4000)))
    before = wal.read_bytes()
    assert len(before) > room and len(before) % room != 0
    await cp.renew_lease(T1, owner, 60.0)  # relaxed: no room kept
    leased = wal.read_bytes()
    assert leased.startswith(before) and len(leased) % room != 0
    await cp.commit(T1, owner, c.step_batch(head, {"counter": 1}, step=1))
    after = wal.read_bytes()
    assert len(after) == (len(leased) // room + 2) * room
    assert after.startswith(leased)  # the commit's frames went past the old end
    assert after.endswith(bytes(4096))  # the room left past them
    assert await raw(path, "SELECT count(*) FROM gf_checkpoints") == [(2,)]
    assert await raw(path, "SELECT count(*) FROM scratch WHERE key LIKE 'big%'") == [(40,)]
    assert await raw(path, "PRAGMA integrity_check") == [("ok",)]
    await cp.close()


@pytest.mark.anyio
async def test_a_failure_while_making_room_ends_the_transaction(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected error in make_room (it reports no OSError) fails that commit alone: the
    transaction is rolled back, and the next commit, and another connection, can write."""
    cp = SqliteCheckpointer(path)
    owner, head = await fill(cp, 1)

    def broken(fd: int | None) -> int:
        raise RuntimeError("broken")

    monkeypatch.setattr(_wal, "make_room", broken)
    conn = cp._db.conn
    with pytest.raises(RuntimeError, match="broken"):
        await cp.commit(T1, owner, c.step_batch(head, {"counter": 1}, step=1))
    assert cp._db.conn is conn and conn is not None and not conn.in_transaction  # rolled back
    monkeypatch.undo()
    await raw(path, "INSERT INTO scratch VALUES ('probe', 1)", timeout=0.5)
    await cp.commit(T1, owner, c.step_batch(head, {"counter": 1}, step=1))
    assert await raw(path, "SELECT count(*) FROM gf_checkpoints") == [(2,)]
    await cp.close()


@pytest.mark.anyio
async def test_a_lease_on_a_wal_that_holds_frames_makes_no_room(path: Path) -> None:
    """A lease in a process that finds the WAL holding frames (another connection wrote):
    SQLite appends to the WAL, as before; no zeros."""
    writer = SqliteCheckpointer(path)
    await writer.setup()  # (made on the event loop: it opens on first use)
    await writer.close()
    await writer.setup()
    await raw(path, "INSERT INTO scratch VALUES ('probe', 1)")  # frames, no room
    wal = Path(f"{path}-wal")
    before = wal.read_bytes()
    assert 0 < len(before) < _wal.ROOM_BYTES
    await writer.acquire_lease(T1, "me", 60.0)
    after = wal.read_bytes()
    assert after.startswith(before) and len(after) < _wal.ROOM_BYTES
    await writer.close()


async def first_input(cp: SqliteCheckpointer, value: object) -> CheckpointId:
    """A new run's input commit, as the engine makes it: not durable, taking the lease."""
    batch = c.step_batch(None, {"counter": value})
    batch.acquire_ttl, batch.durable = 60.0, False
    await cp.commit(T1, "me", batch)
    assert batch.checkpoint is not None
    return batch.checkpoint.id


@pytest.mark.anyio
async def test_a_new_runs_input_that_starts_the_wal_is_relaxed_and_gives_it_room(
    path: Path,
) -> None:
    """A process's first write to a closed store may be a new run's input (no fsync of its
    own): like a first lease, it starts the WAL at OFF and gives it room; the step after it
    is FULL, and the two read back from another connection."""
    cp = SqliteCheckpointer(path)
    await cp.setup()  # (made on the event loop: it opens on first use)
    await cp.close()
    await cp.setup()
    seen = trace_statements(cp)
    head = await first_input(cp, 0)
    assert os.path.getsize(f"{path}-wal") == _wal.ROOM_BYTES
    await cp.commit(T1, "me", c.step_batch(head, {"counter": 1}, step=1))
    assert around_commit(seen) == [
        "PRAGMA synchronous=OFF", "BEGIN IMMEDIATE", "COMMIT", "PRAGMA synchronous=FULL",
        "BEGIN IMMEDIATE", "COMMIT",
    ]  # fmt: skip
    assert os.path.getsize(f"{path}-wal") == _wal.ROOM_BYTES
    assert await raw(path, "SELECT count(*) FROM gf_checkpoints") == [(2,)]
    await cp.close()


@pytest.mark.anyio
async def test_a_large_input_is_never_committed_at_synchronous_off(path: Path) -> None:
    """An input of a MiB or more could fill the WAL past SQLite's automatic checkpoint,
    which would then run unsynced: it is committed at NORMAL, with no room made."""
    cp = SqliteCheckpointer(path)
    await cp.close()
    await cp.setup()
    seen = trace_statements(cp)
    head = await first_input(cp, os.urandom(durability.RELAXED_MAX_BYTES))
    assert around_commit(seen) == ["PRAGMA synchronous=NORMAL", "BEGIN IMMEDIATE", "COMMIT"]
    assert os.path.getsize(f"{path}-wal") > durability.RELAXED_MAX_BYTES
    with open(f"{path}-wal", "rb") as f:
        assert int.from_bytes(f.read(4), "big") in WAL_MAGIC
    ck = await cp.get_checkpoint(T1)
    assert ck is not None and ck.id == head
    await cp.close()


def wal_frames(path: Path) -> int:
    """The frames of the WAL's current cycle (those whose salts match its header's)."""
    data = Path(f"{path}-wal").read_bytes()
    page = int.from_bytes(data[8:12], "big")
    salts = data[16:24]
    n, at = 0, 32
    while at + 24 + page <= len(data) and data[at + 8 : at + 16] == salts:
        n, at = n + 1, at + 24 + page
    return n


@pytest.mark.anyio
async def test_the_largest_relaxed_input_stays_below_the_automatic_checkpoint(
    path: Path,
) -> None:
    """An input committed at ``OFF`` writes fewer pages than start SQLite's automatic
    checkpoint (which would then run unsynced), and each connection asks for that
    checkpoint at ``AUTOCHECKPOINT_PAGES``."""
    cp = SqliteCheckpointer(path)
    await cp.setup()  # (made on the event loop: it opens on first use)
    await cp.close()
    await cp.setup()
    assert await on_connection(cp, "PRAGMA wal_autocheckpoint") == [
        (durability.AUTOCHECKPOINT_PAGES,)
    ]
    seen = trace_statements(cp)
    await first_input(cp, os.urandom(durability.RELAXED_MAX_BYTES - 4096))
    assert around_commit(seen)[:2] == ["PRAGMA synchronous=OFF", "BEGIN IMMEDIATE"]
    frames = wal_frames(path)
    assert durability.RELAXED_MAX_BYTES // 4096 < frames < durability.AUTOCHECKPOINT_PAGES
    await cp.close()


@pytest.mark.anyio
async def test_the_wal_descriptor_lives_and_dies_with_the_connection(path: Path) -> None:
    """The descriptor kept on the WAL is opened with the connection and closed with it (by
    close, or when a stuck connection is dropped): opening and closing leaks none."""
    fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    cp = SqliteCheckpointer(path)
    await cp.setup()  # (made on the event loop: it opens on first use)
    await fill(cp, 1)
    await cp.close()
    before = fds()
    for _ in range(20):
        cp = SqliteCheckpointer(path)
        await cp.setup()  # (made on the event loop: it opens on first use)
        assert cp._durability.wal_fd is not None
        assert os.path.samefile(f"/proc/self/fd/{cp._durability.wal_fd}", f"{path}-wal")
        await cp.get_thread(T1)
        await cp.close()
        assert cp._durability.wal_fd is None and cp._db.conn is None
    assert fds() == before
    cp = SqliteCheckpointer(path)
    await cp.setup()  # (made on the event loop: it opens on first use)
    assert cp._db.conn is not None
    cp._db.conn.execute("BEGIN")  # as a failed ROLLBACK leaves it
    cp._db.drop_if_stuck()
    assert cp._durability.wal_fd is None and cp._db.conn is None and fds() == before
    assert (await cp.get_thread(T1)) is not None  # reopened
    assert cp._durability.wal_fd is not None
    await cp.close()


def test_make_room_writes_zeros_only_past_the_end(tmp_path: Path) -> None:
    room = _wal.ROOM_BYTES

    def make_room(path: Path) -> int:
        fd = _wal.open_fd(str(path))
        try:
            return _wal.make_room(fd)
        finally:
            if fd is not None:
                os.close(fd)

    empty, used, full = tmp_path / "empty-wal", tmp_path / "used-wal", tmp_path / "full-wal"
    empty.write_bytes(b"")
    assert make_room(empty) == room
    assert empty.read_bytes() == bytes(room)
    used.write_bytes(b"frames")  # frames reached the end of the room: one to two more chunks
    assert make_room(used) == 2 * room - 6
    assert used.read_bytes() == b"frames" + bytes(2 * room - 6)
    used.write_bytes(b"x" * (room + room // 2))
    assert make_room(used) == room // 2 + room
    assert used.read_bytes() == b"x" * (room + room // 2) + bytes(room // 2 + room)
    full.write_bytes(b"y" * room)  # the zeros still end it (their end is a chunk boundary)
    assert make_room(full) == 0 and full.read_bytes() == b"y" * room
    assert _wal.open_fd(str(tmp_path / "missing-wal")) is None
    assert not (tmp_path / "missing-wal").exists()  # never created: SQLite creates its WAL
    assert _wal.make_room(None) == 0 and _wal.size(None) is None
    link = tmp_path / "link-wal"
    link.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_bytes(b"")
    assert _wal.open_fd(str(link)) is None  # never through a symlink (as SQLite opens it)


@pytest.mark.anyio
@pytest.mark.blocking_ok  # white box: sets the connection's level from the test body
async def test_closing_never_checkpoints_at_synchronous_off(path: Path) -> None:
    """Closing checkpoints the WAL into the file: if a failure left the connection at OFF, the
    durable level is set first, so that checkpoint syncs."""
    cp = SqliteCheckpointer(path)
    await fill(cp, 1)
    with cp._db.lock:
        cp._durability.ensure(False, off=True)  # as a lease whose restore failed leaves it
    seen = trace_statements(cp)
    await cp.close()
    assert around_commit(seen) == ["PRAGMA synchronous=FULL"]
    assert not os.path.exists(f"{path}-wal")  # checkpointed and removed


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["relative, then chdir", "through a symlink"])
async def test_the_wal_is_looked_at_where_sqlite_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "elsewhere").mkdir()
    if how == "through a symlink":
        where = tmp_path / "elsewhere" / "link.sqlite"
        where.symlink_to(tmp_path / "data" / "store.sqlite")
    else:
        monkeypatch.chdir(tmp_path / "data")
        where = Path("store.sqlite")
    cp = SqliteCheckpointer(where)
    await cp.setup()  # (made on the event loop: it opens on first use)
    await cp.close()
    await cp.setup()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert os.path.getsize(tmp_path / "data" / "store.sqlite-wal") == 0
    seen = trace_statements(cp)
    await cp.acquire_lease(T1, "me", 60.0)  # an empty WAL: no sync
    await cp.release_lease(T1, "me")  # frames in it: SQLite's own rules
    assert [s for s in around_commit(seen) if s.startswith("PRAGMA")] == [
        "PRAGMA synchronous=OFF", "PRAGMA synchronous=FULL", "PRAGMA synchronous=NORMAL"
    ]  # fmt: skip
    await cp.close()


@pytest.mark.anyio
async def test_a_thread_row_deleted_from_under_its_checkpoints_is_damage(
    cp: SqliteCheckpointer, path: Path
) -> None:
    """A thread that has checkpoints but no row was damaged (its row deleted or its key
    changed): ``get_thread`` says so instead of calling the thread new; a thread that has
    neither is new (None)."""
    await fill(cp, 2)
    await cp.close()
    await raw(path, "DELETE FROM gf_threads WHERE thread_id = ?", (T1,))
    with pytest.raises(CorruptCheckpointError, match=r"thread row.*missing") as e:
        await cp.get_thread(T1)
    assert e.value.thread_id == T1
    assert await cp.get_thread(ThreadId("never-made")) is None


class XState(TypedDict):
    x: int


@pytest.mark.parametrize(("durability", "level"), [("fsync", 2), ("process", 1)])
def test_durability_sets_the_sync_level_of_the_store_and_of_its_evidence_log(
    path: Path, durability: str, level: int
) -> None:
    """``durability="process"`` commits at ``synchronous=NORMAL`` (no fsync), ``"fsync"`` at
    ``FULL``; the evidence log a graph keeps beside the store follows it (an fsync'd log runs
    at ``NORMAL`` and syncs its WAL itself: ``graphflow.evidence.walsync``)."""
    from graphflow import END, START, StateGraph

    cp = SqliteCheckpointer(path, durability=durability)  # type: ignore[arg-type]
    try:
        assert cp.durability == durability
        assert cp._db.conn is not None
        assert cp._db.conn.execute("PRAGMA synchronous").fetchone()[0] == level
        b = StateGraph(XState)
        b.add_node("a", lambda s: {"x": 1})
        b.add_edge(START, "a")
        b.add_edge("a", END)
        log = b.compile(checkpointer=cp).evidence
        assert log is not None and log.durability == durability
        with log._store.reading() as conn:
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1
        assert (log._store._wal.fd is not None) == (durability == "fsync")
    finally:
        anyio.run(cp.close)


def test_an_unknown_durability_is_refused_naming_the_levels(path: Path) -> None:
    with pytest.raises(ValueError, match=r"durability must be 'fsync' .* or 'process'"):
        SqliteCheckpointer(path, durability="power")  # type: ignore[arg-type]
    assert not path.exists()  # refused before anything is written


def _busy() -> sqlite3.OperationalError:
    e = sqlite3.OperationalError("database is locked")
    e.sqlite_errorcode = sqlite3.SQLITE_BUSY  # type: ignore[attr-defined]
    return e


def _busy_then_done(path: Path, tries_needed: int) -> int:
    """A call on a new store that meets ``SQLITE_BUSY`` until its ``tries_needed``-th try;
    the tries it took (it returned "done")."""
    cp = SqliteCheckpointer(path)
    tries = []

    def fn(conn: sqlite3.Connection) -> str:
        tries.append(1)
        if len(tries) < tries_needed:
            raise _busy()
        return "done"

    try:
        assert cp._db.call(None, fn) == "done"
    finally:
        anyio.run(cp.close)
    return len(tries)


def test_a_call_that_finds_the_file_locked_runs_again_after_short_pauses(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waiting for another writer's lock is ours, not SQLite's busy handler (which sleeps up
    to 100 ms between tries): a call that met ``SQLITE_BUSY`` before it changed anything
    runs again after a pause of at most ``lockwait.CAP``."""
    pauses: list[float] = []
    real_pause = _lockwait.pause
    monkeypatch.setattr(_lockwait, "pause", lambda n: pauses.append(real_pause(n)) or 0.0)
    assert _busy_then_done(path, 12) == 12 and len(pauses) == 11
    assert 0 <= max(pauses) <= _lockwait.CAP  # bounded: never SQLite's 100 ms sleeps


def test_a_lock_held_through_thousands_of_tries_is_waited_for_not_an_overflow(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lock held long enough for thousands of short tries (each pause is at most
    ``lockwait.CAP``, 2 ms: another process writing for a few seconds) keeps the call
    waiting until ``busy_timeout``. (The cap doubled per try as ``2.0 ** attempt``, which
    overflowed at try 1024, about 1-2 s in: ``OverflowError`` from every command that
    writes, found from the CLI.)"""
    sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", sleeps.append)  # (the tries, without the waiting)
    assert all(0 <= _lockwait.pause(n) <= _lockwait.CAP for n in (0, 10, 1023, 1024, 10**6))
    assert _busy_then_done(path, 3000) == 3000
    assert len(sleeps) == 2999 and max(sleeps) <= _lockwait.CAP


def test_a_call_that_changed_rows_before_meeting_the_lock_is_not_run_again(path: Path) -> None:
    """A call that committed something and then met ``SQLITE_BUSY`` must not run twice: it
    raises ``StoreLockedError`` at once."""
    cp = SqliteCheckpointer(path)
    tries = []

    def fn(conn: sqlite3.Connection) -> None:
        tries.append(1)
        conn.execute("CREATE TABLE IF NOT EXISTS scratch (k INTEGER)")
        conn.execute("INSERT INTO scratch VALUES (1)")  # (autocommit: it is written)
        raise _busy()

    try:
        with pytest.raises(StoreLockedError):
            cp._db.call(None, fn)
    finally:
        anyio.run(cp.close)
    assert len(tries) == 1


def test_lock_waits_give_up_after_busy_timeout(path: Path) -> None:
    cp = SqliteCheckpointer(path, busy_timeout=0.05)
    tries = []

    def fn(conn: sqlite3.Connection) -> None:
        tries.append(1)
        raise _busy()

    try:
        with pytest.raises(StoreLockedError, match="locked by another writer"):
            cp._db.call(None, fn)
    finally:
        anyio.run(cp.close)
    assert len(tries) > 1


def test_only_a_call_known_to_have_changed_nothing_runs_again() -> None:
    assert _lockwait.may_retry(None, None)  # the store could not be opened: nothing ran
    assert _lockwait.may_retry(7, 7)
    assert not _lockwait.may_retry(7, 8)
    assert not _lockwait.may_retry(7, None)  # its connection was dropped: unknown


@pytest.mark.anyio
async def test_a_listing_leaves_the_garbage_collector_as_it_was(path: Path) -> None:
    """A large listing pauses the collector while it builds its objects, and gives it back
    as it found it: on, off (paused by someone else), and after the listing failed."""
    cp = SqliteCheckpointer(path)
    owner = new_owner()
    await cp.acquire_lease(T1, owner, 60.0)
    await cp.commit(T1, owner, CommitBatch(thread=ThreadUpdate("paused", (PauseId("p"),))))
    seen: list[bool] = []
    try:
        assert gc.isenabled()
        real = listing.threads.infos_of

        def spy(status: str, rows: Any) -> Any:
            seen.append(gc.isenabled())
            return real(status, rows)

        listing.threads.infos_of = spy  # type: ignore[assignment]
        try:
            assert len(await cp.list_threads("paused")) == 1
            assert len(await cp.list_threads("paused", limit=listing.LARGE_LISTING)) == 1
            assert len(await cp.list_threads("paused", limit=2)) == 1
        finally:
            listing.threads.infos_of = real  # type: ignore[assignment]
        assert seen == [False, False, True] and gc.isenabled()
        gc.disable()
        try:
            await cp.list_threads("paused")
            assert not gc.isenabled()
        finally:
            gc.enable()
        await blessed(path, "UPDATE gf_threads SET pending_count = -1")
        with pytest.raises(CorruptCheckpointError):
            await cp.list_threads("paused")
        assert gc.isenabled()
    finally:
        await cp.close()


@pytest.mark.anyio
async def test_a_new_threads_first_commit_removes_no_runnable_mark(path: Path) -> None:
    """A commit that creates the thread's row writes its status: no mark can exist yet, so
    none is deleted (a statement fewer on every new thread: W5); a later status change
    removes the mark that ``submit`` made."""
    cp = SqliteCheckpointer(path)
    await cp.setup()
    seen = trace_statements(cp)
    ck = CheckpointRecord(id=CheckpointId("c1"), thread_id=T1, ns="", parent_id=None, step=-1,
                          source="input", channel_versions={}, frontier=(),
                          created_at=1.0)  # fmt: skip
    batch = CommitBatch(checkpoint=ck, thread=ThreadUpdate("running", (), None), durable=False)
    batch.acquire_ttl = 60.0
    await cp.commit(T1, "me", batch)
    assert not [s for s in seen if "gf_runnable" in s]
    assert await cp.mark_runnable(T1, reason="answered")
    await cp.commit(T1, "me", CommitBatch(thread=ThreadUpdate("done", (), None), release=True))
    assert [s for s in seen if s.startswith("DELETE FROM gf_runnable")]
    assert await cp.list_runnable() == []
    await cp.close()
