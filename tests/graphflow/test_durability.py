"""Durability on a real SQLite file and real processes (DESIGN.md promises 1-3, 7 and 8).

- Pause in one process, resume in another: finished work is not redone, memoized steps are
  replayed, the final state is the uninterrupted one.
- ``kill -9`` at many points of a run (timed, and on markers such as "right after a task's
  commit"), then a fresh process finishes it: same final state, no committed node re-run,
  the file passes ``PRAGMA integrity_check``.
- A storage fault at every write of a run (before, after, and inside the SQLite transaction
  of each ``commit``/``put_answers``), then a fresh graph and checkpointer finish it.
- One writer per thread: racing resumers, a second runner, lease takeover from a dead pid.
- Damaged records and files raise ``CorruptCheckpointError`` naming the thread.

Child processes run ``_durability_worker.py`` (graphs, effects file and JSON job format are
there). Counts of node executions come from its effects file, which survives SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _durability_worker as w
import anyio
import pytest

from checkpoints import CommitBatch, CorruptCheckpointError, SqliteCheckpointer
from checkpoints.models import ThreadId, ThreadRecord
from checkpoints.sqlite import wal as _wal

WORKER = Path(__file__).with_name("_durability_worker.py")
TIMEOUT = 60.0  # seconds any child may take; only guards against hangs, never asserted

PAUSE_REF = Counter({"a": 1, "b": 1, "c": 2, "c.prep": 1, "d": 1})
"""Node entries of ``pause_graph`` paused once and resumed (``c`` reruns from its start)."""
LONG_REF = Counter(dict.fromkeys(w.LONG_NODES, 1))


# -- processes ----------------------------------------------------------------------------------
class ForkServer:
    """``_durability_worker.py serve``: forks runners from a process that imported everything.

    An interpreter start plus imports costs over a second of CPU, a fork a few milliseconds:
    tests that need many runners (to kill them, or to race them) fork them. The children are
    ordinary processes (own pid, own SQLite connection, never ran a graph before, killed
    with SIGKILL by this process); the server only forks and reaps. Where "a new process"
    is the point (resuming after a pause or a crash), tests start a fresh interpreter.
    """

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._lock = threading.Lock()
        self._n = 0

    def ask(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self._lock:
            if req["op"] == "spawn":
                self._n += 1
                req["out"] = str(self.tmp / f"report{self._n}.json")
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        assert line, "fork server died"
        return {**req, **json.loads(line)}

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()  # the server stops at the end of its input
        try:
            self.proc.wait(timeout=TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()


@pytest.fixture(scope="module")
def fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    server = ForkServer(tmp_path_factory.mktemp("forks"))
    try:
        yield server
    finally:
        server.close()


class Child:
    """A runner process: a fresh interpreter (``Popen``) or a child of the fork server."""

    def __init__(self, spec: dict[str, Any], server: ForkServer | None) -> None:
        self.server = server
        self.popen: subprocess.Popen[str] | None = None
        self.returncode: int | None = None
        if server is None:
            self.popen = subprocess.Popen(
                [sys.executable, str(WORKER), json.dumps(spec)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            self.pid = self.popen.pid
        else:
            reply = server.ask({"op": "spawn", "spec": spec})
            self.pid, self.out = reply["pid"], Path(reply["out"])

    def finished(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is not None
        return self.out.exists() or Path(f"{self.out}.err").exists()

    def reap(self) -> int:
        """Wait for the process to end and collect it; its return code (-9: SIGKILL)."""
        if self.returncode is None:
            if self.popen is not None:
                self.stdout, self.stderr = self.popen.communicate(timeout=TIMEOUT)
                self.returncode = self.popen.returncode
            else:
                assert self.server is not None
                self.returncode = self.server.ask({"op": "wait", "pid": self.pid})["code"]
                err = Path(f"{self.out}.err")
                self.stdout = self.out.read_text() if self.out.exists() else ""
                self.stderr = err.read_text() if err.exists() else ""
        return self.returncode

    def report(self) -> dict[str, Any]:
        """The JSON report: ``{"pid": ..., "results": [[action outcome, ...] per job]}``."""
        code = self.reap()
        assert code == 0, f"runner {self.pid} failed ({code}):\n{self.stderr}"
        return json.loads(self.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]

    def kill(self, *, reap: bool = True) -> int | None:
        """``kill -9``; wait until it is dead, and reap it unless a zombie is wanted."""
        os.kill(self.pid, signal.SIGKILL)
        if reap:
            return self.reap()
        if self.popen is not None:
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        else:
            assert self.server is not None
            self.server.ask({"op": "wait_dead", "pid": self.pid})
        return None


class Procs:
    """Starts the runners of one test; kills and reaps any left at teardown."""

    def __init__(self, server: ForkServer) -> None:
        self.server = server
        self.all: list[Child] = []

    def fresh(self, jobs: list[dict[str, Any]], **extra: Any) -> Child:
        """A runner in a new interpreter (nothing imported, nothing shared)."""
        self.all.append(Child({"jobs": jobs, **extra}, None))
        return self.all[-1]

    def fork(self, jobs: list[dict[str, Any]], **extra: Any) -> Child:
        """A runner forked from the fork server."""
        self.all.append(Child({"jobs": jobs, **extra}, self.server))
        return self.all[-1]

    def close(self) -> None:
        for c in self.all:
            if c.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(c.pid, signal.SIGKILL)
                c.reap()


@pytest.fixture
def procs(fork_server: ForkServer) -> Iterator[Procs]:
    ps = Procs(fork_server)
    try:
        yield ps
    finally:
        ps.close()


def job(graph: str, db: Path, tid: str, effects: Path, *actions: str, **kw: Any) -> dict[str, Any]:
    return {
        "graph": graph,
        "db": str(db),
        "tid": tid,
        "effects": str(effects),
        "actions": list(actions),
        **kw,
    }


def wait_for_line(effects: Path, node: str, event: str, child: Child) -> None:
    """Wait until the effects file has the line ``node event``; fail if the runner ends."""
    deadline = time.monotonic() + TIMEOUT
    while not any(n == node and e == event for n, e, _ in w.read_effects(effects)):
        if child.finished():
            child.reap()
            raise AssertionError(f"runner ended before {node} {event}:\n{child.stderr}")
        assert time.monotonic() < deadline, f"no line {node} {event} in {effects}"
        time.sleep(0.002)


# -- storage helpers ----------------------------------------------------------------------------
def integrity_ok(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()


def dump(db: Path | str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, read through a separate connection (committed data only)."""
    conn = sqlite3.connect(db)
    try:
        names = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1")
        ]
        return {n: sorted(conn.execute(f'SELECT * FROM "{n}"').fetchall(), key=repr) for n in names}
    finally:
        conn.close()


def compiled(builder: Any, db: Path, **kw: Any) -> tuple[Any, SqliteCheckpointer]:
    """A graph on a new checkpointer object for ``db``, as a new process would have."""
    cp = SqliteCheckpointer(db)
    return builder.compile(checkpointer=cp, **kw), cp


def close(cp: Any) -> None:
    anyio.run(cp.close)


def thread_row(db: Path, tid: str) -> ThreadRecord | None:
    """The thread's row, read through a store of its own (opened and closed here)."""
    cp = SqliteCheckpointer(db)
    try:
        return anyio.run(cp.get_thread, ThreadId(tid))
    finally:
        close(cp)


def committed_nodes(graph: Any, tid: str) -> set[str]:
    """Nodes whose completion is committed: every task of an older checkpoint, plus the
    tasks of the head checkpoint whose record says ``completed``."""
    head = graph.get_state(tid)
    if head is None:
        return set()
    done = {t.name for t in head.tasks if t.status == "completed"}
    for snap in graph.get_state_history(tid):
        if snap.checkpoint_id != head.checkpoint_id:
            done |= set(snap.next)
    return done


def check_store(db: Path, tid: str) -> None:
    """No half-written checkpoint: every checkpoint's channel values, the head's task records
    and the pending pauses all load; the file passes ``integrity_check``."""
    integrity_ok(db)
    cp = SqliteCheckpointer(db)
    tid_ = ThreadId(tid)

    async def go() -> None:
        th = await cp.get_thread(tid_)
        if th is None or th.head is None:
            assert not await cp.list_checkpoints(tid_)
            return
        head = await cp.get_checkpoint(tid_)
        assert head is not None and head.id == th.head
        for ck in await cp.list_checkpoints(tid_):
            values = await cp.load_channels(tid_, "", ck.channel_versions, ck.channel_bases)
            assert set(values) >= {"log", "total", "x"}
        records = await cp.load_tasks(tid_, "", head.id)
        assert set(records) <= {t.id for t in head.frontier}
        for r in records.values():
            assert r.status != "completed" or r.writes is not None
        pauses = await cp.get_pauses(tid_, list(th.pending_pause_ids))
        assert [p.id for p in pauses] == list(th.pending_pause_ids)
        assert (th.status == "paused") == bool(th.pending_pause_ids)

    try:
        anyio.run(go)
    finally:
        close(cp)


def fault_of(e: BaseException | None) -> BaseException | None:
    """The ``InjectedFault`` behind an error (it may be the cause of another error)."""
    while e is not None and not isinstance(e, InjectedFault):
        e = e.__cause__
    return e


def raised(fn: Callable[[], Any]) -> BaseException:
    """The error ``fn`` raised (itself: an ExceptionGroup around it would be a bug)."""
    try:
        fn()
    except Exception as e:
        return e
    raise AssertionError("no error was raised")


# -- 1. pause in one process, resume in another -------------------------------------------------
@pytest.mark.slow
def test_pause_in_one_process_resume_in_a_fresh_process(tmp_path: Path, procs: Procs) -> None:
    db, effects = tmp_path / "store.db", tmp_path / "effects"
    first = procs.fork([job("pause", db, "t", effects, "input")]).report()
    [[paused]] = first["results"]
    assert paused["status"] == "paused"
    assert paused["state"] == {"log": ["a:0:0:7"], "total": 1, "x": 8}

    second = procs.fresh([job("pause", db, "t", effects, "resume")]).report()
    [[done]] = second["results"]
    assert done == {"status": "done", "state": w.PAUSE_FINAL}

    lines = w.read_effects(effects)
    assert w.entries(effects) == PAUSE_REF  # a, b once; c paused then resumed; d once
    by_pid = {(n, pid) for n, e, pid in lines if e == "enter"}
    assert ("c", first["pid"]) in by_pid and ("c", second["pid"]) in by_pid
    assert ("d", second["pid"]) in by_pid
    assert ("c.prep", second["pid"]) not in by_pid  # the memoized step was replayed
    integrity_ok(db)


# -- 2. kill -9 at many points -------------------------------------------------------------------
@dataclass
class KillPoint:
    name: str
    delay: float | None = None  # seconds after the runner was forked
    marker: tuple[str, str] | None = None  # or: as soon as this effects line appears
    watch_fast: bool = False  # slow waits for fast's record to be committed
    durability: str = "fsync"  # the runner's store's (SqliteCheckpointer(durability=...))
    db: Path = field(default=Path())
    effects: Path = field(default=Path())
    tid: str = ""
    before: Counter[str] = field(default_factory=Counter)
    committed: set[str] = field(default_factory=set)
    head_tasks: dict[str, str] = field(default_factory=dict)


def _kill_one(procs: Procs, kp: KillPoint) -> None:
    opts: dict[str, Any] = {}
    if kp.watch_fast:
        opts["watch_fast"] = [str(kp.db), kp.tid]
    spec = job("long", kp.db, kp.tid, kp.effects, "input", opts=opts, durability=kp.durability)
    child = procs.fork([spec])
    if kp.marker is not None:
        wait_for_line(kp.effects, *kp.marker, child)
    else:
        assert kp.delay is not None
        time.sleep(kp.delay)
    code = child.kill()  # a runner that finished just before is a valid point too
    assert code == -signal.SIGKILL or (code == 0 and child.report()), code


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["fsync", "process"])
def test_kill_9_at_many_points_then_a_fresh_process_finishes(
    tmp_path: Path, procs: Procs, durability: str
) -> None:
    """Killed anywhere, a run is finished by a fresh process, every committed node exactly
    once; with ``durability="process"`` (no fsync) too: ``kill -9`` loses nothing the
    operating system was given."""
    # The uninterrupted run, in a runner like the killed ones: the reference state, and
    # how long a run takes (only to spread the kill delays over it).
    t0 = time.monotonic()
    ref = procs.fork([job("long", tmp_path / "ref.db", "ref", tmp_path / "ref.effects", "input",
                          durability=durability)])  # fmt: skip
    while not ref.finished():
        time.sleep(0.002)
    span = time.monotonic() - t0
    assert ref.report()["results"] == [[{"status": "done", "state": w.LONG_FINAL}]]
    assert w.entries(tmp_path / "ref.effects") == LONG_REF

    points = [KillPoint(f"t+{i}", delay=span * 1.15 * i / 15) for i in range(16)]
    points += [
        KillPoint("in a", marker=("a", "enter")),
        KillPoint("fast committed", marker=("slow", "fast-committed"), watch_fast=True),
        KillPoint("in slow", marker=("slow", "enter")),
        KillPoint("j returned", marker=("j", "exit")),
        KillPoint("in f", marker=("f", "enter")),
        KillPoint("last node returned", marker=("g", "exit")),
    ]
    for i, kp in enumerate(points):
        kp.db, kp.effects, kp.tid = tmp_path / f"k{i}.db", tmp_path / f"k{i}.effects", f"k{i}"
        kp.durability = durability
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda kp: _kill_one(procs, kp), points))

    for kp in points:
        check_store(kp.db, kp.tid)  # no half-written checkpoint, integrity_check ok
        kp.before = w.entries(kp.effects)
        graph, cp = compiled(w.long_graph(w.MemoryRecorder()), kp.db)
        try:
            kp.committed = committed_nodes(graph, kp.tid)
            head = graph.get_state(kp.tid)
            kp.head_tasks = {t.name: t.status for t in head.tasks} if head else {}
        finally:
            close(cp)
    marked = next(kp for kp in points if kp.watch_fast)
    assert marked.head_tasks == {"fast": "completed", "slow": "pending"}

    # One fresh process resumes every killed thread (invoke(None), or the input again
    # when the thread has no head yet); each thread has its own file.
    finisher = procs.fresh(
        [job("long", kp.db, kp.tid, kp.effects, "finish", durability=durability) for kp in points],
        parallel=4,
    )
    results = finisher.report()["results"]
    for kp, [res] in zip(points, results, strict=True):
        where = f"kill point {kp.name!r} (committed: {sorted(kp.committed)})"
        assert res == {"status": "done", "state": w.LONG_FINAL}, where
        after = w.entries(kp.effects)
        for node in w.LONG_NODES:
            assert kp.before[node] <= 1, where
            if node in kp.committed:
                assert kp.before[node] == 1 and after[node] == 1, f"{node} re-run at {where}"
            else:
                assert after[node] == kp.before[node] + 1, f"{node} at {where}"
        assert not set(after) - set(w.LONG_NODES)
        integrity_ok(kp.db)
    assert marked.before["fast"] == 1 and w.entries(marked.effects)["fast"] == 1


# -- 3. a fault at every write -----------------------------------------------------------------
class InjectedFault(Exception):
    """The storage failure ``FaultyCheckpointer`` raises."""


class FaultyCheckpointer:
    """A ``SqliteCheckpointer`` that fails its ``at``-th write (``commit`` or ``put_answers``).

    ``when="before"``: raise without writing. ``"after"``: write, then raise (the write
    happened but the caller sees an error). ``"inside"``: abort the SQLite transaction
    after ``vm_step`` virtual-machine steps (a progress handler), check that the file did
    not change at all, then raise. Everything else is delegated. ``log`` lists the writes
    that went through; ``vm_steps`` the SQLite VM steps of each write (to place aborts).
    """

    def __init__(
        self, db: Path, *, at: int = 0, when: str = "before", vm_step: int = 0, dies: bool = False
    ):
        self.inner = SqliteCheckpointer(db)
        self.db = db
        self.at, self.when, self.vm_step = at, when, vm_step
        self.dies = dies  # every write from the at-th on fails (the store is gone, as in a crash)
        self.calls = 0
        self.faulted = False
        self.log: list[tuple[str, Any]] = []
        self.vm_steps: list[int] = []
        self.unchanged: bool | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def commit(self, thread_id: Any, owner: str, batch: CommitBatch) -> None:
        await self._write("commit", batch, lambda: self.inner.commit(thread_id, owner, batch))

    async def put_answers(self, answers: Any) -> None:
        await self._write("answers", answers, lambda: self.inner.put_answers(answers))

    async def _write(self, kind: str, payload: Any, call: Callable[[], Any]) -> None:
        self.calls += 1
        n = self.calls
        conn = self.inner._db.conn  # white box: count or abort the transaction's VM steps
        assert conn is not None
        steps = [0]
        limit = self.vm_step if n == self.at and self.when == "inside" else None

        def progress() -> int:  # one interrupt, at step ``limit``: the ROLLBACK may run
            steps[0] += 1
            return 1 if steps[0] == limit else 0

        if (n == self.at or (self.dies and n > self.at)) and self.when == "before":
            self.faulted = True
            raise InjectedFault(f"write {n} ({kind}) failed before reaching the store")
        before = await anyio.to_thread.run_sync(dump, self.db) if limit is not None else None
        conn.set_progress_handler(progress, 1)
        try:
            await call()
        except sqlite3.OperationalError as e:
            assert limit is not None and "interrupted" in str(e), e
            self.faulted = True
            self.unchanged = before == await anyio.to_thread.run_sync(dump, self.db)
            raise InjectedFault(f"write {n} ({kind}) aborted inside its transaction") from e
        finally:
            conn.set_progress_handler(None, 1)
        self.vm_steps.append(steps[0])
        self.log.append((kind, payload))
        if limit is not None:
            raise AssertionError(f"write {n} ({kind}) ended before VM step {limit}")
        if n == self.at and self.when == "after":
            self.faulted = True
            raise InjectedFault(f"write {n} ({kind}) failed after it was committed")

    def b_committed(self) -> bool:
        return any(
            kind == "commit" and any(t.node == "b" for t in batch.tasks) for kind, batch in self.log
        )


def _faulty_run(db: Path, rec: w.MemoryRecorder, **kw: Any) -> tuple[FaultyCheckpointer, Any]:
    """Pause and resume ``pause_graph`` on a ``FaultyCheckpointer``; return the error, if any."""
    fcp = FaultyCheckpointer(db, **kw)
    anyio.run(fcp.inner.setup)

    async def coordinate() -> None:  # c pauses only once b's record is committed
        while not (fcp.b_committed() or fcp.faulted):
            await anyio.sleep(0.001)

    graph = w.pause_graph(rec, coordinate=coordinate).compile(checkpointer=fcp)  # type: ignore[arg-type]
    error: BaseException | None = None
    try:
        r = graph.invoke(w.INPUT, thread_id="t")
        assert r.status == "paused"
        r = graph.invoke(None, thread_id="t", resume=w.ANSWER)
        assert r.status == "done" and r.state == w.PAUSE_FINAL
    except Exception as e:
        error = e
    finally:
        close(fcp.inner)
    return fcp, error


def _describe(kind: str, payload: Any) -> str:
    if kind == "answers":
        return "answers"
    parts = [f"{t.node}:{t.status}" for t in payload.tasks]
    parts += ["memo"] * len(payload.memos) + ["pause"] * len(payload.pauses)
    if payload.checkpoint is not None:
        parts.append("checkpoint")
    if payload.thread is not None:
        parts.append(f"thread={payload.thread.status}")
    return "+".join(parts)


@pytest.fixture(scope="module")
def reference_writes(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[int]]:
    """The writes of the fault-free run (what each commit point holds) and their VM steps."""
    db = tmp_path_factory.mktemp("faults") / "reference.db"
    rec = w.MemoryRecorder()
    fcp, error = _faulty_run(db, rec)
    assert error is None and rec.entries() == PAUSE_REF
    writes = [_describe(k, p) for k, p in fcp.log]
    assert writes == [
        "checkpoint+thread=running",  # the input: creates the thread and takes the lease
        "checkpoint",  # a's step: its record is implied by the checkpoint
        "memo",  # c's step_once
        "b:completed",  # a sibling's record while c still runs
        "c:paused+pause+thread=paused",
        # resume: the answer is written with the run's next commit
        "c:completed+checkpoint+thread=running",  # kept: c ran twice (attempts 2)
        "checkpoint+thread=done",  # d
    ]
    return writes, fcp.vm_steps


def _recover_and_check(db: Path, rec: w.MemoryRecorder, where: str) -> None:
    check_store(db, "t")
    graph, cp = compiled(w.pause_graph(rec), db)
    try:
        committed = committed_nodes(graph, "t")
        prepped = any(
            anyio.run(cp.load_memos, ThreadId("t"), "", s.checkpoint_id)
            for s in graph.get_state_history("t")
        )
        at_fault = rec.entries()
        result = w.drive(graph, "t")
    finally:
        close(cp)
    assert result.state == w.PAUSE_FINAL, where
    after = rec.entries()
    for node in committed | ({"c.prep"} if prepped else set()):
        assert after[node] == at_fault[node], f"{node} re-executed after {where}"
    for node, n in after.items():
        assert n <= PAUSE_REF[node] + 1, f"{node} ran {n} times after {where}"
    check_store(db, "t")


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_fault_at_every_write_then_a_fresh_graph_finishes(
    tmp_path: Path, when: str, reference_writes: tuple[list[str], list[int]]
) -> None:
    writes, _ = reference_writes
    for n, what in enumerate(writes, start=1):
        db = tmp_path / f"{when}-{n}.db"
        rec = w.MemoryRecorder()
        fcp, error = _faulty_run(db, rec, at=n, when=when)
        where = f"a fault {when} write {n} ({what})"
        assert isinstance(fault_of(error), InjectedFault), (where, error)
        done = n if when == "after" else n - 1
        assert [_describe(k, p) for k, p in fcp.log][:done] == writes[:done], where
        _recover_and_check(db, rec, where)


@pytest.mark.slow
def test_a_write_aborted_inside_its_transaction_changes_nothing(
    tmp_path: Path, reference_writes: tuple[list[str], list[int]]
) -> None:
    writes, vm_steps = reference_writes
    for n, (what, total) in enumerate(zip(writes, vm_steps, strict=True), start=1):
        for step in sorted({1, total // 3, 2 * total // 3, total - 1}):
            db = tmp_path / f"inside-{n}-{step}.db"
            rec = w.MemoryRecorder()
            fcp, error = _faulty_run(db, rec, at=n, when="inside", vm_step=step)
            where = f"write {n} ({what}) aborted at VM step {step} of {total}"
            assert isinstance(fault_of(error), InjectedFault), (where, error)
            assert fcp.unchanged, f"{where} left part of its transaction in the file"
            _recover_and_check(db, rec, where)


# -- 4. three resumers at once -------------------------------------------------------------------
@pytest.mark.slow
def test_three_processes_resume_one_paused_thread_at_once(tmp_path: Path, procs: Procs) -> None:
    db, effects = tmp_path / "store.db", tmp_path / "effects"
    graph, cp = compiled(w.pause_graph(w.file_recorder(effects)), db)
    assert graph.invoke(w.INPUT, thread_id="t").status == "paused"
    close(cp)

    barrier = tmp_path / "go"
    racers = [
        procs.fork(
            [job("pause", db, "t", effects, "resume", opts={"c_after_answer": 0.3})],
            ready=str(tmp_path / f"ready{i}"),
            barrier=str(barrier),
        )
        for i in range(3)
    ]
    deadline = time.monotonic() + TIMEOUT
    while not all((tmp_path / f"ready{i}").exists() for i in range(3)):
        assert time.monotonic() < deadline
        time.sleep(0.005)
    barrier.touch()
    reports = [p.report() for p in racers]

    winners = [r for r in reports if "status" in r["results"][0][0]]
    assert len(winners) == 1, reports
    assert winners[0]["results"][0][0] == {"status": "done", "state": w.PAUSE_FINAL}
    for r in reports:
        if r is winners[0]:
            continue
        res = r["results"][0][0]
        if res["error"] == "NothingToResumeError":  # came after the winner had finished
            assert res["after"] == {"state": w.PAUSE_FINAL, "next": []}, res
        else:
            assert res["error"] == "ThreadBusyError", res
    assert w.entries(effects) == PAUSE_REF
    lines = w.read_effects(effects)
    assert [pid for n, e, pid in lines if (n, e) in {("c", "answered"), ("d", "enter")}] == [
        winners[0]["pid"]
    ] * 2


# -- 5. a second runner while the first is inside a node ---------------------------------------
@pytest.mark.slow
def test_a_second_runner_gets_thread_busy_before_running_anything(
    tmp_path: Path, procs: Procs
) -> None:
    db, effects, release = tmp_path / "store.db", tmp_path / "effects", tmp_path / "release"
    opts = {"block": "slow", "release": str(release)}
    first = procs.fork([job("long", db, "t", effects, "input", opts=opts)])
    wait_for_line(effects, "slow", "enter", first)
    graph, cp = compiled(w.long_graph(w.MemoryRecorder()), db)
    head = graph.get_state("t").checkpoint_id

    second = procs.fork([job("long", db, "t", effects, "continue", "input")]).report()
    for res in second["results"][0]:
        assert res["error"] == "ThreadBusyError", res
        assert "'t'" in res["message"]
    assert graph.get_state("t").checkpoint_id == head
    close(cp)

    release.touch()
    [[done]] = first.report()["results"]
    assert done == {"status": "done", "state": w.LONG_FINAL}
    assert w.entries(effects) == LONG_REF
    assert second["pid"] not in {pid for _, _, pid in w.read_effects(effects)}


# -- 6. lease takeover from a killed runner --------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("reap", [True, False], ids=["reaped", "zombie"])
def test_a_killed_runners_lease_is_taken_over_at_once(
    tmp_path: Path, procs: Procs, reap: bool
) -> None:
    db, effects = tmp_path / "store.db", tmp_path / "effects"
    opts = {"block": "e", "release": str(tmp_path / "never")}
    first = procs.fork([job("long", db, "t", effects, "input", opts=opts, lease_ttl=3600.0)])
    wait_for_line(effects, "e", "enter", first)
    first.kill(reap=reap)  # not reaped: a zombie, whose pid still exists

    th = thread_row(db, "t")
    assert th is not None and th.lease_owner is not None
    assert f":{first.pid}:" in th.lease_owner and th.lease_expires_at > time.time() + 3000

    resume = job("long", db, "t", effects, "continue", lease_ttl=3600.0)
    second = procs.fresh([resume]).report()
    assert second["results"] == [[{"status": "done", "state": w.LONG_FINAL}]]
    assert w.entries(effects) == LONG_REF + Counter({"e": 1})
    assert first.reap() == -signal.SIGKILL


@pytest.mark.slow
def test_a_resume_killed_after_taking_the_lease_is_taken_over_and_finishes(
    tmp_path: Path, procs: Procs
) -> None:
    """A resuming process's first write is its lease, committed without an fsync into an
    empty WAL (the pausing process closed the store). Killed in the resumed node after it:
    the file is sound, the thread still paused, and a fresh process takes over at once."""
    db, effects = tmp_path / "store.db", tmp_path / "effects"
    first = procs.fresh([job("pause", db, "t", effects, "input")]).report()
    [[paused]] = first["results"]
    assert paused == {"status": "paused", "state": {"log": ["a:0:0:7"], "total": 1, "x": 8}}
    assert not Path(f"{db}-wal").exists()  # so the resume's lease starts a new WAL

    opts = {"c_after_answer": 60.0}  # c holds the lease once it has its answer
    second = procs.fresh([job("pause", db, "t", effects, "resume", opts=opts, lease_ttl=3600.0)])
    wait_for_line(effects, "c", "answered", second)
    assert second.kill() == -signal.SIGKILL
    wal = Path(f"{db}-wal").read_bytes()  # room made by the lease, which SQLite wrote over
    assert len(wal) == _wal.ROOM_BYTES and wal[:4] != bytes(4)
    check_store(db, "t")
    th = thread_row(db, "t")
    assert th is not None and th.status == "paused" and th.lease_owner is not None
    assert f":{second.pid}:" in th.lease_owner  # the lease was committed, then its owner died

    third = procs.fresh([job("pause", db, "t", effects, "resume")]).report()
    assert third["results"] == [[{"status": "done", "state": w.PAUSE_FINAL}]]
    assert w.entries(effects) == PAUSE_REF + Counter({"c": 1})  # c re-entered once more
    integrity_ok(db)


@pytest.mark.slow
def test_a_resume_killed_between_making_room_in_the_wal_and_its_lease_commit(
    tmp_path: Path, procs: Procs
) -> None:
    """The resuming process writes zeros into the new WAL under the write lock and dies before
    its lease commits: the WAL holds zeros only, which SQLite treats as an empty WAL. The
    thread is still paused with no owner, and a fresh process resumes it to its end."""
    db, effects = tmp_path / "store.db", tmp_path / "effects"
    first = procs.fresh([job("pause", db, "t", effects, "input")]).report()
    assert first["results"][0][0]["status"] == "paused"
    assert not Path(f"{db}-wal").exists()

    second = procs.fresh([job("pause", db, "t", effects, "resume", die_after_room="empty")])
    assert second.reap() == -signal.SIGKILL
    assert Path(f"{db}-wal").read_bytes() == bytes(_wal.ROOM_BYTES)  # zeros, no header
    check_store(db, "t")
    th = thread_row(db, "t")
    assert th is not None and th.status == "paused" and th.lease_owner is None

    third = procs.fresh([job("pause", db, "t", effects, "resume")]).report()
    assert third["results"] == [[{"status": "done", "state": w.PAUSE_FINAL}]]
    assert w.entries(effects) == PAUSE_REF  # the killed process ran no node
    integrity_ok(db)


@pytest.mark.slow
def test_a_new_run_killed_after_its_input_commit_in_a_new_wal(tmp_path: Path, procs: Procs) -> None:
    """A fresh process's first write to a closed store is a new run's input, committed
    without an fsync into a new WAL given room. Killed in the first node: the file is sound,
    the input checkpoint is there (the kill loses no committed data: only a power loss
    could), and a fresh process finishes the run with every node run once more at most."""
    db, effects = tmp_path / "store.db", tmp_path / "effects"
    close(SqliteCheckpointer(db))  # creates the file; the close leaves no WAL
    assert Path(db).exists() and not Path(f"{db}-wal").exists()
    opts = {"block": "a", "release": str(tmp_path / "never")}
    first = procs.fresh([job("long", db, "t", effects, "input", opts=opts, lease_ttl=3600.0)])
    wait_for_line(effects, "a", "enter", first)
    assert first.kill() == -signal.SIGKILL
    assert Path(f"{db}-wal").stat().st_size == _wal.ROOM_BYTES
    check_store(db, "t")
    th = thread_row(db, "t")
    assert th is not None and th.head is not None and th.status == "running"

    second = procs.fresh([job("long", db, "t", effects, "continue", lease_ttl=3600.0)])
    assert second.report()["results"] == [[{"status": "done", "state": w.LONG_FINAL}]]
    assert w.entries(effects) == LONG_REF + Counter({"a": 1})
    integrity_ok(db)


@pytest.mark.slow
def test_killed_after_writing_room_past_the_frames_recovery_stops_at_the_zeros(
    tmp_path: Path, procs: Procs
) -> None:
    """A durable commit that finds SQLite's frames at the end of the WAL writes zeros past
    them, then its own frames over the zeros. Killed between the two (the last connection
    gone, so the next open rebuilds the WAL index from the file): recovery keeps every
    committed frame and stops at the zeros; a fresh process finishes the run."""
    db, effects, release = tmp_path / "store.db", tmp_path / "effects", tmp_path / "go"
    close(SqliteCheckpointer(db))
    other = sqlite3.connect(db, isolation_level=None)  # keeps the WAL; frames in it
    other.execute("CREATE TABLE scratch (key TEXT PRIMARY KEY, value)")  # another app's
    other.execute("INSERT INTO scratch VALUES ('probe', 1)")
    assert Path(f"{db}-wal").stat().st_size % _wal.ROOM_BYTES != 0
    opts = {"block": "a", "release": str(release)}
    first = procs.fresh([job("long", db, "t", effects, "input", opts=opts, die_after_room="grow")])
    wait_for_line(effects, "a", "enter", first)  # the input is committed (no room made)
    before = Path(f"{db}-wal").read_bytes()
    other.close()  # the runner's connection is now the last one
    release.touch()
    assert first.reap() == -signal.SIGKILL  # killed in a's step commit, zeros written
    wal = Path(f"{db}-wal").read_bytes()
    assert wal.startswith(before) and len(wal) > len(before) and wal.endswith(bytes(4096))
    check_store(db, "t")  # recovery: the input's frames kept, the zeros ignored
    rows = dump(db)
    assert ("probe", 1) in rows["scratch"] and len(rows["gf_checkpoints"]) == 1
    second = procs.fresh([job("long", db, "t", effects, "continue")])
    assert second.report()["results"] == [[{"status": "done", "state": w.LONG_FINAL}]]
    assert w.entries(effects) == LONG_REF + Counter({"a": 1})
    integrity_ok(db)


# -- 7. corruption -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def paused_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file holding thread ``t`` paused at ``c`` (b completed), its WAL folded in."""
    db = tmp_path_factory.mktemp("corrupt") / "paused.db"
    graph, cp = compiled(w.pause_graph(w.MemoryRecorder()), db)
    assert graph.invoke(w.INPUT, thread_id="t").status == "paused"
    close(cp)
    assert not Path(f"{db}-wal").exists()
    return db


def _sql(sql: str, *args: Any) -> Callable[[Path], None]:
    def mutate(db: Path) -> None:
        conn = sqlite3.connect(db)
        try:
            assert conn.execute(sql, args).rowcount >= 1, sql
            conn.commit()
        finally:
            conn.close()

    return mutate


def _file(fn: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def mutate(db: Path) -> None:
        db.write_bytes(fn(db.read_bytes()))

    return mutate


HEAD = "(SELECT head FROM gf_threads WHERE thread_id = 't')"
GARBAGE = random.Random(8).randbytes(48)

CORRUPTIONS = [
    pytest.param(_sql("UPDATE gf_channels SET blob = x'c1' WHERE channel = 'x'"),
                 id="channel blob: a byte msgpack never uses"),
    pytest.param(_sql("UPDATE gf_channels SET blob = ? WHERE channel = 'log'", GARBAGE),
                 id="channel blob: random bytes"),
    pytest.param(_sql("UPDATE gf_channels SET blob = substr(blob, 1, length(blob) / 2)"
                      " WHERE channel = 'log' AND kind = 'append'"),
                 id="channel blob: truncated"),
    pytest.param(_sql("UPDATE gf_channels SET blob = x'05' WHERE channel = 'log'"),
                 id="channel blob: a number where a list segment belongs"),
    pytest.param(_sql("UPDATE gf_channels SET blob = x'a3616263' WHERE channel = 'total'"),
                 id="channel blob: a string where an int belongs"),
    pytest.param(_sql(f"UPDATE gf_checkpoints SET body = x'c1' WHERE id = {HEAD}"),
                 id="checkpoint body: garbage"),
    pytest.param(_sql(f"UPDATE gf_checkpoints SET body = x'05' WHERE id = {HEAD}"),
                 id="checkpoint body: wrong shape"),
    pytest.param(_sql(f"UPDATE gf_checkpoints SET channel_versions = ? WHERE id = {HEAD}", GARBAGE),
                 id="checkpoint channel_versions: garbage"),
    pytest.param(_sql(f"UPDATE gf_checkpoints SET channel_versions = x'9105' WHERE id = {HEAD}"),
                 id="checkpoint channel_versions: a list, not a map"),
    pytest.param(_sql("UPDATE gf_tasks SET body = x'c1' WHERE body IS NOT NULL"),
                 id="task record: garbage writes"),
    pytest.param(_sql("UPDATE gf_pauses SET value = x'c1'"), id="pause record: garbage value"),
    pytest.param(_sql("UPDATE gf_threads SET pending_pause_ids = x'c1'"),
                 id="thread row: garbage pending pause ids"),
    pytest.param(_sql("DELETE FROM gf_channels WHERE channel = 'total' AND version ="
                      " (SELECT max(version) FROM gf_channels WHERE channel = 'total')"),
                 id="deleted channel row"),
    pytest.param(_sql(f"DELETE FROM gf_checkpoints WHERE id = {HEAD}"),
                 id="deleted head checkpoint"),
    pytest.param(_sql("DELETE FROM gf_pauses"), id="deleted pending pause record"),
    pytest.param(_file(lambda b: b[: len(b) // 2]), id="truncated file"),
    pytest.param(_file(lambda b: random.Random(9).randbytes(len(b))), id="file of random bytes"),
]  # fmt: skip


def _corrupt_copy(paused_store: Path, tmp_path: Path, mutate: Callable[[Path], None]) -> Path:
    db = tmp_path / "damaged.db"
    shutil.copy(paused_store, db)
    mutate(db)
    return db


@pytest.mark.parametrize("mutate", CORRUPTIONS)
def test_damage_raises_corrupt_checkpoint_error_naming_the_thread(
    paused_store: Path, tmp_path: Path, mutate: Callable[[Path], None]
) -> None:
    db = _corrupt_copy(paused_store, tmp_path, mutate)
    rec = w.MemoryRecorder()
    graph, cp = compiled(w.pause_graph(rec), db)
    try:
        errors = [
            raised(lambda: graph.get_state("t")),
            raised(lambda: graph.invoke(None, thread_id="t", resume=w.ANSWER)),
        ]
    finally:
        close(cp)
    for e in errors:
        assert isinstance(e, CorruptCheckpointError), repr(e)
        assert "'t'" in str(e) and e.thread_id == "t", str(e)
    assert not rec.events  # no node ran on a damaged state


@pytest.mark.parametrize("mutate", [p.values[0] for p in CORRUPTIONS[-2:]],
                         ids=["truncated file", "file of random bytes"])  # fmt: skip
def test_a_damaged_file_raises_corrupt_checkpoint_error(
    paused_store: Path, tmp_path: Path, mutate: Callable[[Path], None]
) -> None:
    db = _corrupt_copy(paused_store, tmp_path, mutate)
    damaged = db.read_bytes()
    graph, cp = compiled(w.pause_graph(w.MemoryRecorder()), db)
    try:
        assert isinstance(raised(lambda: graph.get_state("t")), CorruptCheckpointError)
        e = raised(lambda: graph.invoke(None, thread_id="t", resume=w.ANSWER))
        assert isinstance(e, CorruptCheckpointError)
    finally:
        close(cp)
    assert db.read_bytes() == damaged  # nothing was "repaired" or overwritten


@pytest.fixture(scope="module")
def running_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file holding thread ``t`` stopped mid-step (a crash would leave the same): head at
    ``a``'s checkpoint, ``b``'s completed record and ``c``'s memo committed, ``c`` not."""
    db = tmp_path_factory.mktemp("corrupt") / "running.db"
    _, error = _faulty_run(db, w.MemoryRecorder(), at=5, when="before", dies=True)
    assert isinstance(fault_of(error), InjectedFault)
    assert dump(db)["gf_threads"][0][1] == "running"
    return db


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(_sql("UPDATE gf_channels SET blob = x'c1' WHERE channel = 'x'"), id="channel"),
        pytest.param(_sql(f"UPDATE gf_checkpoints SET body = x'c1' WHERE id = {HEAD}"),
                     id="checkpoint"),
        pytest.param(_sql("UPDATE gf_tasks SET body = x'c1' WHERE node = 'b'"),
                     id="completed task record"),
        pytest.param(_sql("UPDATE gf_memos SET value = x'c1'"), id="memoized step"),
        pytest.param(_sql("DELETE FROM gf_channels WHERE channel = 'log' AND kind = 'append'"),
                     id="deleted channel row"),
    ],
)  # fmt: skip
def test_damage_stops_invoke_none_of_a_running_thread(
    running_store: Path, tmp_path: Path, mutate: Callable[[Path], None]
) -> None:
    db = _corrupt_copy(running_store, tmp_path, mutate)
    rec = w.MemoryRecorder()
    graph, cp = compiled(w.pause_graph(rec), db)
    try:
        e = raised(lambda: graph.invoke(None, thread_id="t"))
    finally:
        close(cp)
    assert isinstance(e, CorruptCheckpointError), repr(e)
    assert "'t'" in str(e) and e.thread_id == "t"
    assert not rec.events  # b's finished work is not redone, c does not run on bad data


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_an_unstorable_input_of_a_new_thread_is_a_serialization_error(
    tmp_path: Path, backend: str
) -> None:
    """The input commit takes the lease; a value it cannot store is reported as itself (naming
    the key and type), nothing is stored, and the same thread id starts fine afterwards."""
    from typing import TypedDict

    from checkpoints import MemoryCheckpointer, SerializationError
    from graphflow import END, START, StateGraph

    class S(TypedDict):
        x: Any

    cp = MemoryCheckpointer() if backend == "memory" else SqliteCheckpointer(tmp_path / "s.db")
    graph = (
        StateGraph(S).add_node("a", lambda s: {"x": 1}).add_edge(START, "a").add_edge("a", END)
    ).compile(checkpointer=cp)
    with pytest.raises(SerializationError, match="'x'") as info:
        graph.invoke({"x": object()}, thread_id="t")
    assert info.value.key == "x" and info.value.type_name is not None
    assert graph.list_threads() == [] and graph.get_state("t") is None
    assert graph.invoke({"x": 0}, thread_id="t").state == {"x": 1}
