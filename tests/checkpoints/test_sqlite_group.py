"""Group commit and shared thread hops of ``SqliteCheckpointer`` (``checkpoints.sqlite.group``).

Commits are made to arrive together by holding the store's limiter (the hop under way)
while they queue; the transactions they ran in are counted from SQLite's own trace of the
statements the connection ran.
"""

from __future__ import annotations

import signal
import sqlite3
import sys
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
    async with anyio.create_task_group() as tg, cp._db.limiter():
        for i in range(len(calls)):
            tg.start_soon(one, i)
        while len(cp._db._queue) < len(calls):
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
    async with anyio.create_task_group() as tg, cp._db.limiter():
        tg.start_soon(cp.commit, t, owner, step(t))
        while not cp._db._queue:
            await anyio.sleep(0)
        tg.cancel_scope.cancel()
    assert cp._db._queue == []
    rec = await cp.get_thread(t)
    assert rec is not None and rec.head is None


@pytest.mark.anyio
async def test_an_sqlite_error_fails_every_commit_of_the_group(cp: SqliteCheckpointer) -> None:
    """Not a member's own error (the disk, the file): the transaction is rolled back whole,
    and every member gets the error."""
    await cp.setup()
    await cp._db.run(None, lambda conn: conn.execute("CREATE TABLE scratch (x CHECK (x < 5))"))

    def insert(conn: sqlite3.Connection, txn: group.WriteTxn) -> None:
        with txn(conn, True, lambda: 0):
            conn.execute("INSERT INTO scratch VALUES (1)")

    def broken(conn: sqlite3.Connection, txn: group.WriteTxn) -> None:
        with txn(conn, True, lambda: 0):
            conn.execute("INSERT INTO scratch VALUES (9)")  # fails its CHECK

    jobs = [group.Job(None, None, fn) for fn in (insert, broken, insert)]
    await anyio.to_thread.run_sync(cp._db._run_jobs, jobs)
    errors = [j.error for j in jobs]
    assert all(isinstance(e, sqlite3.IntegrityError) for e in errors), errors
    assert errors[0] is errors[1] is errors[2]
    rows = await cp._db.run(None, lambda conn: conn.execute("SELECT * FROM scratch").fetchall())
    assert rows == []


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
            print(t, n, flush=True)
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
    async with await anyio.open_process([sys.executable, "-c", GROUP_CRASHER, str(path),
                                         TESTS_DIR]) as proc:  # fmt: skip
        assert proc.stdout is not None
        buf = b""
        while sum(1 for _ in returned.values()) < 16 or len(buf.split(b"\n")) < lines:
            buf += await proc.stdout.receive()
            for line in buf.split(b"\n")[:-1]:
                tid, n = line.decode().split()
                returned[tid] = max(returned.get(tid, -1), int(n))
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert len(returned) == 16
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
