"""A run keeps its thread's lease for as long as it runs (DESIGN.md promise 3).

Renewals come from the lease keeper's thread, so a sync node that runs inline on the event
loop (the sync API's single-task steps) keeps the lease however long it works.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import anyio
import pytest

from checkpoints import MemoryCheckpointer, SqliteCheckpointer
from checkpoints.errors import LeaseHeldError
from checkpoints.keeper import LeaseKeeper, keeper
from checkpoints.lease import new_owner
from checkpoints.models import ThreadId
from graphflow import END, START, NodeError, StateGraph, ThreadBusyError, interrupt
from graphflow.engine.committer import Committer
from graphflow.reducers import append


class S(TypedDict):
    n: int


def _try_to_take(path: Path, thread_id: str) -> str:
    """Another runner's attempt at the lease, through its own connection and event loop."""
    other = SqliteCheckpointer(path)
    out: list[str] = []

    def attempt() -> None:
        async def go() -> None:
            try:
                await other.acquire_lease(ThreadId(thread_id), "elsewhere:1:x", 60.0)
                out.append("taken")
            except LeaseHeldError:
                out.append("busy")
            finally:
                await other.close()

        anyio.run(go)

    t = threading.Thread(target=attempt)
    t.start()
    t.join()
    return out[0]


def test_a_sync_node_longer_than_the_ttl_keeps_the_lease(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    seen: list[str] = []

    def slow(state: S) -> dict[str, Any]:
        time.sleep(1.5)  # 3 TTLs, blocking the event loop's thread the whole time
        seen.append(_try_to_take(db, "t"))
        return {"n": state["n"] + 1}

    b = StateGraph(S)
    b.add_node("slow", slow)
    b.add_edge(START, "slow")
    b.add_edge("slow", END)
    graph = b.compile(checkpointer=SqliteCheckpointer(db), lease_ttl=0.5)
    result = graph.invoke({"n": 0}, thread_id="t")
    assert result.status == "done" and result.state["n"] == 1
    assert seen == ["busy"]
    assert _try_to_take(db, "t") == "taken"  # the run's last commit gave it up
    assert keeper().held() == 0


def test_runs_stop_being_kept_when_they_end_even_by_failing() -> None:
    def boom(state: S) -> dict[str, Any]:
        raise ValueError("no")

    b = StateGraph(S)
    b.add_node("boom", boom)
    b.add_edge(START, "boom")
    b.add_edge("boom", END)
    graph = b.compile(checkpointer=MemoryCheckpointer())
    with pytest.raises(NodeError):
        graph.invoke({"n": 0}, thread_id="t")
    assert keeper().held() == 0


def test_the_keeper_renews_until_dropped_and_forgets_a_lost_lease() -> None:
    store = MemoryCheckpointer()
    k = LeaseKeeper()

    async def take(tid: str) -> None:
        await store.acquire_lease(ThreadId(tid), "me:1:a", 0.3)

    async def expiry(tid: str) -> float:
        th = await store.get_thread(ThreadId(tid))
        assert th is not None and th.lease_expires_at is not None
        return th.lease_expires_at

    def wait_for(check: Any) -> None:
        deadline = time.time() + 5
        while not check() and time.time() < deadline:
            time.sleep(0.02)
        assert check()

    anyio.run(take, "kept")
    anyio.run(take, "lost")
    first = anyio.run(expiry, "kept")
    kept = k.hold(store, "kept", "me:1:a", 0.3)
    k.hold(store, "lost", "me:1:a", 0.3)
    anyio.run(store.release_lease, ThreadId("lost"), "me:1:a")
    wait_for(lambda: k.held() == 1)  # the released lease was dropped at its first renewal
    wait_for(lambda: anyio.run(expiry, "kept") > first)  # renewed
    k.drop(kept)
    assert k.held() == 0
    time.sleep(0.2)  # a renewal already under way when it was dropped lands first
    last = anyio.run(expiry, "kept")
    time.sleep(0.5)  # several renewal periods
    assert anyio.run(expiry, "kept") == last  # no longer renewed


def _resumable_after(interrupting: Any) -> StateGraph:
    """``a`` (interrupting on its first call) then ``b``."""
    calls: list[str] = []

    async def a(state: S) -> dict[str, Any]:
        calls.append("a")
        if len(calls) == 1:
            await interrupting()
        return {"n": state["n"] + 1}

    b = StateGraph(S)
    b.add_node("a", a)
    b.add_edge(START, "a")
    b.add_edge("a", END)
    return b


@pytest.mark.parametrize("where", ["in a node", "while the loop waits"])
def test_ctrl_c_during_invoke_gives_the_lease_up(where: str) -> None:
    """KeyboardInterrupt reaches the caller; the run's cleanup ran (its lease is free, so
    the thread can be run again at once) and the thread's loop still works."""

    async def raise_it() -> None:
        raise KeyboardInterrupt

    async def signal_it() -> None:
        import os
        import signal

        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
        await anyio.sleep(10)

    graph = _resumable_after(raise_it if where == "in a node" else signal_it).compile(
        checkpointer=MemoryCheckpointer()
    )
    with pytest.raises(KeyboardInterrupt):
        graph.invoke({"n": 0}, thread_id="t")
    assert keeper().held() == 0
    result = graph.invoke(None, thread_id="t")  # not ThreadBusyError: the lease was given up
    assert result.status == "done" and result.state["n"] == 1


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_an_input_to_a_thread_held_elsewhere_is_refused_before_any_node(
    kind: str, tmp_path: Path
) -> None:
    """A new input commits against no head without reading the thread first: a thread that
    exists (with or without a checkpoint) and is leased elsewhere still gets ThreadBusyError,
    and one that exists and is free gets the input applied to its state."""
    store = MemoryCheckpointer() if kind == "memory" else SqliteCheckpointer(tmp_path / "s.db")
    calls: list[int] = []

    def count(state: S) -> dict[str, Any]:
        calls.append(state["n"])
        return {"n": state["n"] + 1}

    b = StateGraph(S)
    b.add_node("count", count)
    b.add_edge(START, "count")
    b.add_edge("count", END)
    graph = b.compile(checkpointer=store)
    elsewhere = "another-host:1:x"  # never known dead: its lease must expire

    anyio.run(store.acquire_lease, ThreadId("bare"), elsewhere, 60.0)  # a row, no checkpoint
    with pytest.raises(ThreadBusyError):
        graph.invoke({"n": 0}, thread_id="bare")
    assert graph.invoke({"n": 5}, thread_id="t").state["n"] == 6
    anyio.run(store.acquire_lease, ThreadId("t"), elsewhere, 60.0)
    with pytest.raises(ThreadBusyError):
        graph.invoke({"n": 0}, thread_id="t")
    assert calls == [5]
    anyio.run(store.release_lease, ThreadId("t"), elsewhere)
    assert graph.invoke({}, thread_id="t").state["n"] == 7  # the state carried over
    assert calls == [5, 6]


def test_a_router_at_start_sees_an_existing_threads_state_once() -> None:
    seen: list[int] = []

    def route(state: S) -> str:
        seen.append(state["n"])
        return "inc"

    b = StateGraph(S)
    b.add_node("inc", lambda s: {"n": s["n"] + 1})
    b.add_conditional_edges(START, route)
    b.add_edge("inc", END)
    graph = b.compile(checkpointer=MemoryCheckpointer())
    graph.invoke({"n": 1}, thread_id="t")
    graph.invoke({}, thread_id="t")
    assert seen == [1, 2]


def test_the_keeper_retries_a_renewal_that_failed(caplog: pytest.LogCaptureFixture) -> None:
    """A store that fails to renew (busy, briefly unreachable) is tried again at the next
    due time; the lease stays registered, and the failure is logged."""
    store = MemoryCheckpointer()
    calls: list[str] = []
    real = store.renew_lease

    async def flaky(thread_id: ThreadId, owner: str, ttl: float) -> None:
        calls.append(owner)
        if len(calls) == 1:
            raise RuntimeError("database is locked")
        await real(thread_id, owner, ttl)

    store.renew_lease = flaky  # type: ignore[method-assign]
    anyio.run(store.acquire_lease, ThreadId("t"), "me:1:a", 0.3)
    k = LeaseKeeper()
    key = k.hold(store, "t", "me:1:a", 0.3)
    deadline = time.time() + 5
    while len(calls) < 3 and time.time() < deadline:
        time.sleep(0.02)
    assert len(calls) >= 3 and k.held() == 1
    assert "renewing thread 't'" in caplog.text
    k.drop(key)


_NO_LOOP_SCRIPT = """
import sys, time
from checkpoints.blocking import inline_io
from checkpoints.keeper import keeper
from checkpoints.models import ThreadId
from checkpoints.sqlite import SqliteCheckpointer

def run(coroutine):  # a store call with inline I/O never suspends
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("suspended")

store = SqliteCheckpointer(sys.argv[1])  # opened here: the keeper's thread starts
print("opened:", "asyncio" in sys.modules, "logging" in sys.modules)
inline_io.set(True)
run(store.acquire_lease(ThreadId("t"), "me:1:a", 0.3))
first = run(store.get_thread(ThreadId("t"))).lease_expires_at
keeper().hold(store, "t", "me:1:a", 0.3)
deadline = time.time() + 5
while run(store.get_thread(ThreadId("t"))).lease_expires_at == first and time.time() < deadline:
    time.sleep(0.02)
print("renewed:", run(store.get_thread(ThreadId("t"))).lease_expires_at > first)
"""


def test_opening_a_store_imports_no_asyncio_and_the_keeper_imports_it_when_due(
    tmp_path: Path,
) -> None:
    """The keeper's thread starts as a store opens, but imports asyncio (and logging) only
    for its first renewal: a process that only reads a store (``graphflow threads``) pays
    for neither (~20 ms)."""
    done = subprocess.run(
        [sys.executable, "-c", _NO_LOOP_SCRIPT, str(tmp_path / "store.db")],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert done.stdout.splitlines() == ["opened: False False", "renewed: True"]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_threads_of_a_server_running_one_thread_at_once_run_its_node_once(
    store: str, tmp_path: Path
) -> None:
    """Four threads call the sync API for one thread id at once: one runs the node, the
    others get ThreadBusyError while it runs (the node waits until they have). Python
    switches threads every microsecond meanwhile (the memory store took a lease in
    several steps and let two runs in)."""
    cp: Any = MemoryCheckpointer() if store == "memory" else SqliteCheckpointer(tmp_path / "x.db")
    entered: list[int] = []
    refused = threading.Semaphore(0)

    def node(state: S) -> S:
        entered.append(threading.get_ident())
        for _ in range(3):  # every other caller was refused (or 5 s went by)
            refused.acquire(timeout=5)
        return {"n": state["n"] + 1}

    graph = StateGraph(S).add_node("a", node).add_edge(START, "a").add_edge("a", END)
    compiled = graph.compile(checkpointer=cp)
    barrier = threading.Barrier(4)
    outcomes: list[str] = []

    def call(thread_id: str) -> None:
        barrier.wait()
        try:
            outcomes.append(compiled.invoke({"n": 0}, thread_id=thread_id).status)
        except ThreadBusyError:
            outcomes.append("busy")
            refused.release()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for i in range(10):
            entered.clear()
            outcomes.clear()
            threads = [threading.Thread(target=call, args=(f"shared-{i}",)) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(entered) == 1 and sorted(outcomes) == ["busy"] * 3 + ["done"], outcomes
    finally:
        sys.setswitchinterval(interval)


def _watched(kind: str, path: Path, seen: Callable[[Any], None]) -> Any:
    """A store of ``kind`` whose ``get_thread`` hands each record it returns to ``seen``
    first, in the thread that asked (outside the store's lock)."""
    base: Any = MemoryCheckpointer if kind == "memory" else SqliteCheckpointer

    class Watched(base):  # type: ignore[misc, valid-type]
        async def get_thread(self, thread_id: ThreadId) -> Any:
            rec = await super().get_thread(thread_id)
            seen(rec)
            return rec

    return Watched() if kind == "memory" else Watched(path)


class _StalledInput:
    """Run B: an input to thread ``"t"`` on a thread of its own, whose read of the thread
    (found running) waits until ``finish``; ``outcome``: its status, or its ThreadBusyError."""

    def __init__(self) -> None:
        self.read, self._go = threading.Event(), threading.Event()
        self._mine = threading.local()
        self.outcome: Any = None
        self._thread: threading.Thread | None = None

    def seen(self, rec: Any) -> None:
        if getattr(self._mine, "is_b", False) and rec is not None and rec.status == "running":
            self.read.set()
            assert self._go.wait(10)

    def start(self, graph: Any) -> None:
        def run() -> None:
            self._mine.is_b = True
            try:
                self.outcome = graph.invoke({}, thread_id="t").status
            except ThreadBusyError as e:
                self.outcome = e

        self._thread = threading.Thread(target=run)
        self._thread.start()

    def finish(self) -> None:
        self._go.set()
        assert self._thread is not None
        self._thread.join(20)


def _draft_then_review(store: Any, entered: list[str], hold: Callable[[], object]) -> Any:
    """draft -> review, where review (the last node before the pause) calls ``hold`` the
    first time it runs."""

    class Log(TypedDict):
        log: Annotated[list[str], append]

    def draft(state: Log) -> dict[str, Any]:
        entered.append("draft")
        return {"log": ["drafted"]}

    def review(state: Log) -> dict[str, Any]:
        if "review" not in entered:
            entered.append("review")
            hold()
        return {"log": [f"review: {interrupt('publish?')}"]}

    b = StateGraph(Log).add_node(draft).add_node(review)
    b.add_edge(START, "draft").add_edge("draft", "review").add_edge("review", END)
    return b.compile(checkpointer=store)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_an_input_that_read_the_thread_running_is_refused_though_that_run_pauses_first(
    kind: str, tmp_path: Path
) -> None:
    """Run B reads the thread while run A holds it in its last node; A then pauses (a
    pause changes no head) and gives the lease up before B's first commit, which finds the
    head it read and the lease free: B is refused, not put on top of the pause. (Before,
    B's input was committed on the paused thread and its first node ran again.) B is
    refused as soon as it reads the live lease; its first commit would refuse it too, as
    the status it read changed (``CommitBatch.expected_status``)."""
    b = _StalledInput()
    entered: list[str] = []
    graph = _draft_then_review(
        _watched(kind, tmp_path / "s.db", b.seen), entered, lambda: b.read.wait(10)
    )
    ran_a: list[Any] = []
    a = threading.Thread(target=lambda: ran_a.append(graph.invoke({}, thread_id="t")))
    a.start()
    while "review" not in entered:  # A holds the lease, in its last node
        time.sleep(0.001)
    b.start(graph)
    a.join(20)  # A pauses while B waits (B's read let it go on)
    b.finish()
    assert [r.status for r in ran_a] == ["paused"]
    assert isinstance(b.outcome, ThreadBusyError), b.outcome
    assert b.outcome.owner is not None  # refused as it read A's lease, before any commit
    assert entered == ["draft", "review"]
    state = graph.get_state("t")
    assert state.values["log"] == ["drafted"] and len(state.pauses) == 1
    done = graph.invoke(None, thread_id="t", resume="ok")
    assert done.state["log"] == ["drafted", "review: ok"]


@pytest.mark.anyio
async def test_a_run_that_never_held_the_lease_marks_nothing_failed() -> None:
    """A run whose first commit (the one to take the lease) did not happen, and which then
    fails, leaves the thread as the run that holds it (or held it) left it: here paused.
    (Before, its ``failed`` commit took the lease that run had given up and wrote
    ``failed`` over the pause, which then could not be answered.)"""
    store = MemoryCheckpointer()
    graph = _draft_then_review(store, [], lambda: None)
    assert (await graph.ainvoke({}, thread_id="t")).status == "paused"
    loser = Committer(store, ThreadId("t"), new_owner(), 30.0)
    loser.take_lease = True  # as for a new input, before its first commit
    assert await loser.mark_failed(None) is False
    th = await store.get_thread(ThreadId("t"))
    assert th is not None and th.status == "paused" and len(th.pending_pause_ids) == 1
    assert th.lease_owner is None


def test_an_input_whose_first_commit_found_the_file_locked_releases_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first commit (which was to take the lease) waited ``busy_timeout`` for another
    writer's lock and failed: the run held no lease, so it gives none up (a release would
    wait for that lock all over again, and fail the same way)."""
    import sqlite3

    from checkpoints import StoreLockedError

    store = SqliteCheckpointer(tmp_path / "x.db", busy_timeout=0.05)
    b = StateGraph(S).add_node("inc", lambda s: {"n": s["n"] + 1})
    graph = b.add_edge(START, "inc").add_edge("inc", END).compile(checkpointer=store)
    released: list[str] = []
    real = store.release_lease

    async def spy(thread_id: Any, owner: str) -> None:
        released.append(str(thread_id))
        await real(thread_id, owner)

    monkeypatch.setattr(store, "release_lease", spy)
    holder = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(StoreLockedError):
        graph.invoke({"n": 0}, thread_id="t")
    holder.execute("ROLLBACK")
    holder.close()
    assert released == [] and graph.get_state("t") is None
    assert graph.invoke({"n": 0}, thread_id="t").state["n"] == 1  # the same call, later
    anyio.run(store.close)


_CRASHING_REVIEW = """
import pathlib, sys, time
from typing import Annotated, TypedDict
from checkpoints import SqliteCheckpointer
from graphflow import END, START, StateGraph, interrupt
from graphflow.reducers import append

class Log(TypedDict):
    log: Annotated[list[str], append]

def draft(state):
    return {"log": ["drafted"]}

def review(state):
    pathlib.Path(sys.argv[2]).touch()
    time.sleep(60)  # killed here, holding the thread
    return {"log": [interrupt("publish?")]}

b = StateGraph(Log).add_node(draft).add_node(review)
b.add_edge(START, "draft").add_edge("draft", "review").add_edge("review", END)
b.compile(checkpointer=SqliteCheckpointer(sys.argv[1])).invoke({}, thread_id="t")
"""


def test_an_input_that_read_a_dead_runners_thread_is_refused_if_another_run_paused_it(
    tmp_path: Path,
) -> None:
    """A runner is killed in its last node (the thread stays running under a dead owner's
    lease). Run B reads it, free to take over; run A resumes it first and pauses it (no new
    head). B's first commit then finds the status it read changed: refused, not put on top
    of A's pause (the store compares the status, ``CommitBatch.expected_status``)."""
    db, marker = tmp_path / "s.db", tmp_path / "in-review"
    script = tmp_path / "crashing.py"
    script.write_text(_CRASHING_REVIEW)
    child = subprocess.Popen([sys.executable, str(script), str(db), str(marker)])
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.01)
    child.kill()
    child.wait()
    assert marker.exists()

    b = _StalledInput()
    graph = _draft_then_review(_watched("sqlite", db, b.seen), [], lambda: None)
    b.start(graph)
    assert b.read.wait(10)
    assert graph.invoke(None, thread_id="t").status == "paused"  # run A takes over
    b.finish()
    assert isinstance(b.outcome, ThreadBusyError), b.outcome
    state = graph.get_state("t")
    assert state.values["log"] == ["drafted"] and len(state.pauses) == 1
    assert graph.invoke(None, thread_id="t", resume="ok").state["log"] == ["drafted", "review: ok"]
