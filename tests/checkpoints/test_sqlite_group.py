"""Group commit and shared thread hops of ``SqliteCheckpointer`` (``checkpoints.sqlite.group``).

Commits are made to arrive together by holding the limiter of the store's lane (the hop under way)
while they queue; the transactions they ran in are counted from SQLite's own trace of the
statements the connection ran.
"""

from __future__ import annotations

import signal
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from checkpoints import SqliteCheckpointer
from checkpoints.batch import CommitBatch
from checkpoints.errors import HeadConflictError, LeaseLostError, SerializationError
from checkpoints.lease import new_owner
from checkpoints.models import CheckpointId, ThreadId
from checkpoints.sqlite import group
from checkpoints.testing import support as c

TESTS_DIR = str(Path(__file__).parent)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[SqliteCheckpointer]:
    store = SqliteCheckpointer(tmp_path / "store.sqlite")
    yield store
    await store.close()


def tids(n: int) -> list[ThreadId]:
    return [ThreadId(f"g-{i}") for i in range(n)]


async def leased(cp: SqliteCheckpointer, threads: list[ThreadId]) -> str:
    owner = new_owner()
    for tid in threads:
        await cp.acquire_lease(tid, owner, 60.0)
    return owner


def step(tid: ThreadId, head: CheckpointId | None = None, n: int = 0) -> CommitBatch:
    return c.step_batch(head, {"counter": n}, thread_id=tid, step=n)


async def traced(cp: SqliteCheckpointer) -> list[str]:
    """The statements the store's connection runs from now on (opened first)."""
    seen: list[str] = []
    await cp.setup()
    assert cp._db.conn is not None
    cp._db.conn.set_trace_callback(seen.append)
    return seen


async def together(
    cp: SqliteCheckpointer, calls: list[Callable[[], Awaitable[Any]]], hops: int = 1
) -> list[Any]:
    """Make ``calls`` while a hop is under way (the limiter held), so that they queue and
    the next hop takes them all; what each returned or raised, in order."""
    out: list[Any] = [None] * len(calls)

    async def one(i: int) -> None:
        try:
            out[i] = await calls[i]()
        except Exception as e:
            out[i] = e

    before = cp._db.hops
    async with anyio.create_task_group() as tg, cp._db.lane().limiter:
        for i in range(len(calls)):
            tg.start_soon(one, i)
        while len(cp._db.lane().queue) < len(calls):
            await anyio.sleep(0)
    assert cp._db.hops == before + hops  # one hop took them all
    return out


@pytest.mark.anyio
async def test_commits_that_arrive_together_share_one_transaction(cp: SqliteCheckpointer) -> None:
    threads = tids(8)
    owner = await leased(cp, threads)
    seen = await traced(cp)
    batches = [step(t) for t in threads]
    got = await together(
        cp, [partial(cp.commit, t, owner, b) for t, b in zip(threads, batches, strict=True)]
    )
    assert got == [None] * 8
    assert seen.count("COMMIT") == 1 and seen.count("BEGIN IMMEDIATE") == 1
    assert seen.count("RELEASE gf_member") == 8
    for t, b in zip(threads, batches, strict=True):
        rec = await cp.get_thread(t)
        assert rec is not None and rec.head == b.checkpoint.id  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_a_commit_that_fails_in_a_group_fails_alone(cp: SqliteCheckpointer) -> None:
    """A stale head, another owner's lease, an unstorable value: each of those commits gets
    its own error and writes nothing; the commits around them are written."""
    threads = tids(5)
    owner = await leased(cp, threads)
    first = step(threads[0])
    await cp.commit(threads[0], owner, first)
    stale = step(threads[0], CheckpointId("not-the-head"), 1)
    unstorable = step(threads[3])
    unstorable.channels[0].value = object()
    batches = [step(threads[1]), stale, step(threads[2]), unstorable, step(threads[4])]
    owners = [owner, owner, "someone-else:1:x", owner, owner]
    seen = await traced(cp)
    got = await together(
        cp,
        [
            partial(cp.commit, t, o, b)
            for t, o, b in zip([threads[1], threads[0], *threads[2:]], owners, batches, strict=True)
        ],
    )
    assert got[0] is None and got[4] is None
    assert isinstance(got[1], HeadConflictError)
    assert isinstance(got[2], LeaseLostError)
    assert isinstance(got[3], SerializationError)
    assert seen.count("COMMIT") == 1
    heads = {t: (r.head if (r := await cp.get_thread(t)) else None) for t in threads}
    assert heads[threads[0]] == first.checkpoint.id  # type: ignore[union-attr]
    assert heads[threads[1]] == batches[0].checkpoint.id  # type: ignore[union-attr]
    assert heads[threads[2]] is None and heads[threads[3]] is None
    assert heads[threads[4]] == batches[4].checkpoint.id  # type: ignore[union-attr]
    for t, b in [(threads[0], stale), (threads[2], batches[2]), (threads[3], unstorable)]:
        assert b.checkpoint is not None
        assert await cp.get_checkpoint(t, "", b.checkpoint.id) is None


@pytest.mark.anyio
async def test_without_group_commit_each_commits_alone_in_one_hop(tmp_path: Path) -> None:
    cp = SqliteCheckpointer(tmp_path / "alone.sqlite", group_commit=False)
    try:
        threads = tids(4)
        owner = await leased(cp, threads)
        seen = await traced(cp)
        got = await together(cp, [partial(cp.commit, t, owner, step(t)) for t in threads])
        assert got == [None] * 4
        assert seen.count("COMMIT") == 4 and "RELEASE gf_member" not in seen
    finally:
        await cp.close()


@pytest.mark.anyio
async def test_reads_and_commits_share_a_hop_in_order(cp: SqliteCheckpointer) -> None:
    """A read queued after a commit in the same hop sees it; one queued before does not."""
    [t] = tids(1)
    owner = await leased(cp, [t])
    b = step(t)
    got = await together(
        cp, [lambda: cp.get_checkpoint(t), lambda: cp.commit(t, owner, b),
             lambda: cp.get_checkpoint(t)],
    )  # fmt: skip
    assert got[0] is None and got[1] is None
    assert got[2] is not None and got[2].id == b.checkpoint.id  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_a_call_cancelled_before_its_hop_never_runs(cp: SqliteCheckpointer) -> None:
    [t] = tids(1)
    owner = await leased(cp, [t])
    async with anyio.create_task_group() as tg, cp._db.lane().limiter:
        tg.start_soon(cp.commit, t, owner, step(t))
        while not cp._db.lane().queue:
            await anyio.sleep(0)
        tg.cancel_scope.cancel()
    assert cp._db.lane().queue == []
    rec = await cp.get_thread(t)
    assert rec is not None and rec.head is None


def scratch_jobs(*fns: Callable[[sqlite3.Connection], None]) -> list[group.Job]:
    """Group-commit jobs, each running ``fn`` in its member transaction."""

    def member(fn: Callable[[sqlite3.Connection], None]) -> group.GroupFn:
        def run(conn: sqlite3.Connection, txn: group.WriteTxn) -> None:
            with txn(conn, True, lambda: 0):
                fn(conn)

        return run

    return [group.Job(f"t-{i}", None, member(fn)) for i, fn in enumerate(fns)]


async def scratch(cp: SqliteCheckpointer) -> list[Any]:
    rows = await cp._db.run(None, lambda conn: conn.execute("SELECT x FROM scratch").fetchall())
    return sorted(x for (x,) in rows)


@pytest.mark.anyio
async def test_a_members_own_errors_undo_its_writes_only(cp: SqliteCheckpointer) -> None:
    """A member that wrote and then failed (its checkpoint error, or an SQLite error of its
    own statement) has its writes rolled back to its savepoint; the others are written."""
    await cp.setup()
    await cp._db.run(None, lambda conn: conn.execute("CREATE TABLE scratch (x CHECK (x < 50))"))

    def fenced_after_writing(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO scratch VALUES (2)")
        raise HeadConflictError(ThreadId("t-1"), None, None)

    def breaks_a_check_after_writing(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO scratch VALUES (3)")
        conn.execute("INSERT INTO scratch VALUES (99)")

    jobs = scratch_jobs(
        lambda conn: conn.execute("INSERT INTO scratch VALUES (1)") and None,
        fenced_after_writing,
        breaks_a_check_after_writing,
        lambda conn: conn.execute("INSERT INTO scratch VALUES (4)") and None,
    )
    seen = await traced(cp)
    await anyio.to_thread.run_sync(cp._db._run_jobs, jobs)
    assert [type(j.error) for j in jobs] == [
        type(None),
        HeadConflictError,
        sqlite3.IntegrityError,
        type(None),
    ]
    assert seen.count("COMMIT") == 1 and seen.count("ROLLBACK TO gf_member") == 2
    assert await scratch(cp) == [1, 4]


@pytest.mark.anyio
async def test_an_error_of_the_transaction_fails_every_commit_of_the_group(
    cp: SqliteCheckpointer,
) -> None:
    """A full disk (here: the file's page limit) rolls the whole transaction back: every
    member gets that error, nothing is written, and no transaction is left open."""
    await cp.setup()
    await cp._db.run(None, lambda conn: conn.execute("CREATE TABLE scratch (x)"))
    pages = (await cp._db.run(None, lambda c: c.execute("PRAGMA page_count").fetchone()))[0]
    await cp._db.run(None, lambda c: c.execute(f"PRAGMA max_page_count = {pages + 2}"))
    jobs = scratch_jobs(
        lambda conn: conn.execute("INSERT INTO scratch VALUES (1)") and None,
        lambda conn: conn.execute("INSERT INTO scratch VALUES (?)", (b"x" * 100_000,)) and None,
        lambda conn: conn.execute("INSERT INTO scratch VALUES (3)") and None,
    )
    await anyio.to_thread.run_sync(cp._db._run_jobs, jobs)
    errors = [j.error for j in jobs]
    assert all(isinstance(e, sqlite3.OperationalError) for e in errors), errors
    assert all("full" in str(e) for e in errors), errors
    await cp._db.run(None, lambda c: c.execute("PRAGMA max_page_count = 4294967294"))
    assert await scratch(cp) == []
    assert cp._db.conn is not None and not cp._db.conn.in_transaction


@pytest.mark.anyio
async def test_groups_of_relaxed_commits_wait_for_no_fsync_and_mixed_ones_do(
    cp: SqliteCheckpointer,
) -> None:
    """A group is durable when any member is (``FULL``, room kept in the WAL); a group of
    relaxed commits (new runs' inputs) runs at ``NORMAL``."""
    await cp.setup()
    await cp._db.run(None, lambda conn: conn.execute("CREATE TABLE scratch (x)"))
    for durables, level in (((False, False), "NORMAL"), ((False, True), "FULL")):
        jobs = scratch_jobs(*(lambda conn: conn.execute("INSERT INTO scratch VALUES (1)") and None
                              for _ in durables))  # fmt: skip
        for j, durable in zip(jobs, durables, strict=True):
            j.durable = durable
        levels: list[str] = []
        assert cp._db.conn is not None
        cp._db.conn.set_trace_callback(levels.append)
        await anyio.to_thread.run_sync(cp._db._run_jobs, jobs)
        assert [j.error for j in jobs] == [None, None]
        syncs = [s for s in levels if s.startswith("PRAGMA synchronous")]
        assert syncs[-1:] == [f"PRAGMA synchronous={level}"] or (level == "FULL" and not syncs)
        assert await cp._db.run(None, lambda c: c.execute("PRAGMA synchronous").fetchone()) == (
            2,
        )  # (every call starts durable)


@pytest.mark.anyio
async def test_a_cancelled_caller_whose_hop_runs_never_fails_the_others(
    cp: SqliteCheckpointer,
) -> None:
    """The caller that runs a hop is cancelled while the hop runs: the hop goes on, the
    other calls in it get their own results, and the cancelled one is cancelled after."""
    [t] = tids(1)
    owner = await leased(cp, [t])
    started, go = threading.Event(), threading.Event()

    def slow(conn: sqlite3.Connection) -> str:
        started.set()
        go.wait(5)
        return "slow"

    b = step(t)
    outcome: dict[str, Any] = {}

    async def first(scope: anyio.CancelScope) -> None:
        with scope:
            outcome["first"] = await cp._db.run(None, slow)
        outcome["first cancelled"] = scope.cancelled_caught

    async def second() -> None:
        outcome["second"] = await cp.commit(t, owner, b)

    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        async with cp._db.lane().limiter:
            tg.start_soon(first, scope)
            while len(cp._db.lane().queue) < 1:
                await anyio.sleep(0)
            tg.start_soon(second)
            while len(cp._db.lane().queue) < 2:
                await anyio.sleep(0)
        await anyio.to_thread.run_sync(started.wait, 5)
        scope.cancel()
        await anyio.sleep(0.05)
        go.set()
    assert outcome == {"second": None, "first cancelled": True} or outcome == {
        "first": "slow", "second": None, "first cancelled": False
    }  # fmt: skip
    rec = await cp.get_thread(t)
    assert rec is not None and rec.head == b.checkpoint.id  # type: ignore[union-attr]


GROUP_CRASHER = """
import sys
import anyio
sys.path.insert(0, sys.argv[2])
from checkpoints import SqliteCheckpointer
from checkpoints.lease import new_owner
from checkpoints.models import ThreadId
from checkpoints.testing import support as c

async def main(path):
    cp = SqliteCheckpointer(path)
    owner = new_owner()
    threads = [ThreadId(f"g-{i}") for i in range(16)]
    for t in threads:
        await cp.acquire_lease(t, owner, 3600.0)

    async def run(t):
        head, n = None, 0
        while True:
            batch = c.step_batch(head, {"counter": n}, thread_id=t, step=n)
            await cp.commit(t, owner, batch)
            head = batch.checkpoint.id
            print(t, n, cp._db.hops_jobs, cp._db.hops, flush=True)
            n += 1

    async with anyio.create_task_group() as tg:
        for t in threads:
            tg.start_soon(run, t)

anyio.run(main, sys.argv[1])
"""


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.parametrize("lines", [7, 150])
async def test_kill_9_during_group_commits_keeps_every_returned_commit(
    tmp_path: Path, lines: int
) -> None:
    """16 threads committing at once in one process, killed at some instant: every commit
    that had returned is there, and every thread's head has all its inputs."""
    path = tmp_path / "group.sqlite"
    returned: dict[str, int] = {}
    shared = 0.0  # the most calls a hop has run on average so far
    async with await anyio.open_process([sys.executable, "-c", GROUP_CRASHER, str(path),
                                         TESTS_DIR]) as proc:  # fmt: skip
        assert proc.stdout is not None
        buf = b""
        while sum(1 for _ in returned.values()) < 16 or len(buf.split(b"\n")) < lines:
            buf += await proc.stdout.receive()
            for line in buf.split(b"\n")[:-1]:
                tid, n, calls, hops = line.decode().split()
                returned[tid] = max(returned.get(tid, -1), int(n))
                shared = max(shared, int(calls) / int(hops))
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert len(returned) == 16
    assert shared > 1  # commits did share hops (and so transactions)
    cp = SqliteCheckpointer(path)
    try:
        for i in range(16):
            tid = ThreadId(f"g-{i}")
            head = await cp.get_checkpoint(tid)
            assert head is not None and head.step >= returned[tid]
            history = await cp.list_checkpoints(tid)
            assert [ck.step for ck in history] == list(range(head.step, -1, -1))
            state = await cp.load_channels(tid, "", head.channel_versions, head.channel_bases)
            assert state["counter"] == head.step
    finally:
        await cp.close()


@pytest.mark.anyio
async def test_a_hop_that_fails_to_run_fails_every_call_it_took(
    cp: SqliteCheckpointer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No call passes for done when its hop never ran (no thread to run it): each gets the
    error, none a ``None`` result."""
    [t] = tids(1)
    owner = await leased(cp, [t])

    async def no_thread(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(anyio.to_thread, "run_sync", no_thread)
    got = await together(cp, [lambda: cp.get_thread(t), lambda: cp.commit(t, owner, step(t))],
                         hops=0)  # fmt: skip
    assert [type(e) for e in got] == [RuntimeError, RuntimeError]
    monkeypatch.undo()
    rec = await cp.get_thread(t)
    assert rec is not None and rec.head is None


@pytest.mark.anyio
async def test_a_caller_cancelled_as_its_hop_starts_still_runs_the_others(
    cp: SqliteCheckpointer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancellation of the caller that runs a hop arrives as the hop starts (after it
    took the queued calls): every call it took runs, and only that caller is cancelled."""
    threads = tids(2)
    owner = await leased(cp, threads)
    scopes: dict[str, anyio.CancelScope] = {}
    real = anyio.to_thread.run_sync

    async def cancelled_first(*args: Any, **kwargs: Any) -> Any:
        scopes["first"].cancel()  # (as if it arrived at this instant)
        return await real(*args, **kwargs)

    outcome: dict[str, Any] = {}

    async def first() -> None:
        with anyio.CancelScope() as scopes["first"]:
            outcome["first"] = await cp.commit(threads[0], owner, step(threads[0]))
            await anyio.sleep(0)  # (where its cancellation is delivered)

    async def second() -> None:
        outcome["second"] = await cp.commit(threads[1], owner, step(threads[1]))

    monkeypatch.setattr(anyio.to_thread, "run_sync", cancelled_first)
    async with anyio.create_task_group() as tg, cp._db.lane().limiter:
        tg.start_soon(first)
        while len(cp._db.lane().queue) < 1:
            await anyio.sleep(0)
        tg.start_soon(second)
        while len(cp._db.lane().queue) < 2:
            await anyio.sleep(0)
    monkeypatch.undo()
    assert outcome == {"first": None, "second": None}
    for t in threads:
        rec = await cp.get_thread(t)
        assert rec is not None and rec.head is not None
