"""``graphflow.worker.Worker`` in one process (API.md, "Worker"); processes and signals are
``test_worker_processes.py``.

What is runnable (answered threads, deferred calls once due, threads a dead or expired owner
left running) and what is not (unanswered, held, another graph's); what ``run_once``
reports; ``concurrency``, ``lease_seconds``, a stop between steps; bad arguments.
"""

from __future__ import annotations

import itertools
import socket
import subprocess
import sys
import time
from collections import Counter
from typing import Annotated, Any, TypedDict

import anyio
import anyio.to_thread
import pytest

from checkpoints import MemoryCheckpointer, SqliteCheckpointer
from checkpoints.lease import new_owner
from checkpoints.models import ThreadId
from graphflow import END, START, CompiledGraph, InvalidArgumentError, StateGraph, interrupt
from graphflow.agents import Agent, AgentNode, Message, MessagesState, ModelResponse, ToolCall
from graphflow.agents import tool as make_tool
from graphflow.auth import Policy, Rule
from graphflow.reducers import append
from graphflow.worker import Worker, WorkerResult

pytestmark = pytest.mark.anyio


REMOTE = "some-other-host:4242:abc"  # never known dead: its lease must expire


class S(TypedDict):
    log: Annotated[list[str], append]


class Counted:
    """Node functions that count their runs."""

    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()

    def plain(self, name: str) -> Any:
        def node(state: S) -> dict[str, Any]:
            self.runs[name] += 1
            return {"log": [name]}

        node.__name__ = name
        return node

    def asking(self, name: str) -> Any:
        def node(state: S) -> dict[str, Any]:
            self.runs[name] += 1
            return {"log": [f"{name}:{interrupt(name)}"]}

        node.__name__ = name
        return node


def chain(
    c: Counted, *nodes: Any, store: Any = None, name: str | None = "g", **kw: Any
) -> CompiledGraph:
    b = StateGraph(S)
    for fn in nodes:
        b.add_node(fn)
    names = [fn.__name__ for fn in nodes]
    b.add_edge(START, names[0])
    for x, y in itertools.pairwise(names):
        b.add_edge(x, y)
    b.add_edge(names[-1], END)
    return b.compile(checkpointer=store or MemoryCheckpointer(), name=name, **kw)


def statuses(results: list[WorkerResult]) -> dict[str, str]:
    return {r.thread_id: r.status for r in results}


async def test_run_once_resumes_answered_threads_only() -> None:
    c = Counted()
    g = chain(c, c.plain("a"), c.asking("ask"), c.plain("b"))
    for t in ("t1", "t2", "t3"):
        assert (await g.ainvoke({"log": []}, thread_id=t)).status == "paused"
    await g.asubmit("t1", resume="yes")
    await g.asubmit("t2", resume="sure")
    worker = Worker(g)
    found = await worker.run_once()
    assert [(r.thread_id, r.status, r.error, r.graph_name, r.reason) for r in found] == [
        ("t1", "done", None, "g", "answered"),
        ("t2", "done", None, "g", "answered"),
    ]
    assert found[0].to_dict() == {
        "thread_id": "t1", "status": "done", "error": None, "graph_name": "g",
        "reason": "answered",
    }  # fmt: skip
    state = await g.aget_state("t1")
    assert state is not None and state.values["log"] == ["a", "ask:yes", "b"]
    assert c.runs == Counter({"a": 3, "ask": 5, "b": 2})  # finished work was not redone
    assert await worker.run_once() == []  # nothing runnable any more
    assert [t.status for t in await g.alist_threads("paused")] == ["paused"]  # t3 waits


async def test_submit_marks_a_thread_runnable_once_every_pending_pause_is_answered() -> None:
    c = Counted()
    b = StateGraph(S).add_node(c.asking("x")).add_node(c.asking("y"))
    b.add_edge(START, "x").add_edge(START, "y").add_edge("x", END).add_edge("y", END)
    store = MemoryCheckpointer()
    g = b.compile(checkpointer=store, name="g")
    paused = await g.ainvoke({"log": []}, thread_id="t")
    px, py = sorted(paused.pauses, key=lambda p: p.node)
    await g.asubmit("t", resume={px.id: 1})
    assert await store.list_runnable() == []  # y still waits: not runnable
    assert await Worker(g).run_once() == []
    await g.asubmit("t", resume={py.id: 2})
    [mark] = await store.list_runnable()
    assert (mark.thread_id, mark.reason, mark.graph_name) == ("t", "answered", "g")
    assert statuses(await Worker(g).run_once()) == {"t": "done"}
    assert await store.list_runnable() == []


async def test_a_thread_of_a_graph_the_worker_lacks_is_reported_and_left_alone() -> None:
    c = Counted()
    store = MemoryCheckpointer()
    mine = chain(c, c.asking("ask"), store=store, name="mine")
    other = chain(c, c.asking("ask"), store=store, name="other")
    await other.ainvoke({"log": []}, thread_id="theirs")
    await other.asubmit("theirs", resume="ok")
    before = await store.get_thread(ThreadId("theirs"))
    [r] = await Worker(mine).run_once()
    assert (r.thread_id, r.status, r.graph_name) == ("theirs", "failed", "other")
    assert r.error is not None and "'other'" in r.error and "'mine'" in r.error
    assert await store.get_thread(ThreadId("theirs")) == before  # untouched, lease free
    assert len(await store.list_runnable()) == 1  # still runnable, for a worker that has it
    assert statuses(await Worker([mine, other]).run_once()) == {"theirs": "done"}
    # A thread of an unnamed graph, a worker of named ones: named in words, not as None
    unnamed = chain(c, c.asking("ask"), store=store, name=None)
    await unnamed.ainvoke({"log": []}, thread_id="plain")
    await unnamed.asubmit("plain", resume="ok")
    [r] = await Worker(mine).run_once()
    assert r.error == (
        "thread 'plain' is of an unnamed graph, which this worker does not have (it has "
        "graph 'mine'): left as it is"
    )


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_thread_of_another_unnamed_graph_is_left_runnable_for_it(
    kind: str, tmp_path: Any
) -> None:
    c = Counted()
    store = MemoryCheckpointer() if kind == "memory" else SqliteCheckpointer(tmp_path / "x.db")
    theirs = chain(c, c.asking("ask"), store=store, name=None)
    mine = chain(c, c.plain("other"), store=store, name=None)
    await theirs.ainvoke({"log": []}, thread_id="t")
    await theirs.asubmit("t", resume="ok")
    [r] = await Worker(mine).run_once()
    assert (r.thread_id, r.status) == ("t", "failed") and c.runs == Counter({"ask": 1})
    assert r.error is not None and "this graph does not have" in r.error and "left as" in r.error
    th = await store.get_thread(ThreadId("t"))
    assert th is not None and (th.status, th.lease_owner) == ("paused", None)
    assert len(await store.list_runnable()) == 1  # still runnable, for the graph it is of
    assert statuses(await Worker(theirs).run_once()) == {"t": "done"}
    await store.close()


async def test_a_thread_held_by_a_live_run_is_busy_and_untouched() -> None:
    c = Counted()
    g = chain(c, c.asking("ask"))
    store = g.checkpointer
    assert store is not None
    await g.ainvoke({"log": []}, thread_id="t")
    await g.asubmit("t", resume="ok")
    holder = new_owner()  # this process: alive
    await store.acquire_lease(ThreadId("t"), holder, 30.0)
    [r] = await Worker(g).run_once()
    assert r.status == "busy" and r.error is not None and holder in r.error
    th = await store.get_thread(ThreadId("t"))
    assert th is not None and th.status == "paused" and th.lease_owner == holder
    await store.release_lease(ThreadId("t"), holder)
    assert statuses(await Worker(g).run_once()) == {"t": "done"}


class Crash(BaseException):
    """Stands for the process dying: no handler of the engine's catches it."""


def crashing(c: Counted, name: str, once: list[bool]) -> Any:
    def node(state: S) -> dict[str, Any]:
        c.runs[name] += 1
        if once:
            once.pop()
            raise Crash
        return {"log": [name]}

    node.__name__ = name
    return node


async def left_running(owner: str, ttl: float) -> tuple[Counted, CompiledGraph]:
    """A thread ``t`` whose run died after step ``a``; its lease then held by ``owner``."""
    c = Counted()
    g = chain(c, c.plain("a"), crashing(c, "b", [True]))
    with pytest.raises(Crash):
        await g.ainvoke({"log": []}, thread_id="t")
    store = g.checkpointer
    assert store is not None
    th = await store.get_thread(ThreadId("t"))
    assert th is not None and th.status == "running"
    await store.acquire_lease(ThreadId("t"), owner, ttl)
    return c, g


async def test_a_thread_left_running_is_recovered_once_its_lease_expired() -> None:
    c, g = await left_running(REMOTE, 0.3)
    worker = Worker(g)
    assert await worker.run_once() == []  # its owner may be alive: not before expiry
    await anyio.sleep(0.35)
    [r] = await worker.run_once()
    assert (r.thread_id, r.status, r.reason) == ("t", "done", "recovery")
    assert c.runs == Counter({"a": 1, "b": 2})  # a's committed step was not redone
    state = await g.aget_state("t")
    assert state is not None and state.values["log"] == ["a", "b"]


async def test_a_thread_left_running_by_a_dead_process_is_recovered_at_once() -> None:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = f"{socket.gethostname()}:{int(proc.stdout)}:x"
    c, g = await left_running(dead, 300.0)
    [r] = await Worker(g).run_once()  # its lease has 300 s left, but its owner is gone
    assert (r.status, r.reason) == ("done", "recovery")
    assert c.runs == Counter({"a": 1, "b": 2})


async def test_concurrency_runs_that_many_threads_at_once() -> None:
    now_in = [0]
    most = [0]

    async def slow(state: S) -> dict[str, Any]:
        now_in[0] += 1
        most[0] = max(most[0], now_in[0])
        await anyio.sleep(0.02)
        now_in[0] -= 1
        return {"log": ["slow"]}

    c = Counted()
    g = chain(c, c.asking("ask"), slow)
    for n in (1, 3):
        most[0] = 0
        for i in range(6):
            await g.ainvoke({"log": []}, thread_id=f"t{n}-{i}")
            await g.asubmit(f"t{n}-{i}", resume="ok")
        found = await Worker(g, concurrency=n).run_once()
        assert [r.status for r in found] == ["done"] * 6
        assert most[0] == n


async def test_lease_seconds_sets_the_lease_of_the_threads_it_runs() -> None:
    store = MemoryCheckpointer()
    seen: list[float] = []

    async def probe(state: S) -> dict[str, Any]:
        th = await store.get_thread(ThreadId("t"))
        assert th is not None and th.lease_expires_at is not None
        seen.append(th.lease_expires_at - th.updated_at)
        return {"log": ["probe"]}

    c = Counted()
    g = chain(c, c.asking("ask"), probe, store=store, lease_ttl=60.0)
    await g.ainvoke({"log": []}, thread_id="t")
    await g.asubmit("t", resume="ok")
    assert statuses(await Worker(g, lease_seconds=5.0).run_once()) == {"t": "done"}
    assert len(seen) == 1 and 0 < seen[0] <= 5.0 + 1  # 5 s from the claim, not 60


async def test_stop_ends_runs_between_steps_and_leaves_them_runnable() -> None:
    c = Counted()
    holder: list[Worker] = []

    def b(state: S) -> dict[str, Any]:
        c.runs["b"] += 1
        holder[0].stop()  # as SIGTERM would, while b runs
        return {"log": ["b"]}

    g = chain(c, c.asking("ask"), b, c.plain("c"))
    await g.ainvoke({"log": []}, thread_id="t")
    await g.asubmit("t", resume="ok")
    holder.append(Worker(g))
    [r] = await holder[0].run_once()
    assert r.status == "paused" and r.error is not None and "stopped between steps" in r.error
    store = g.checkpointer
    assert store is not None
    th = await store.get_thread(ThreadId("t"))  # not "running" with no one running it
    assert th is not None and th.status == "paused" and th.lease_owner is None
    assert th.pending_pause_ids == ()
    assert c.runs["c"] == 0
    [mark] = await store.list_runnable()
    assert mark.reason == "recovery"
    assert statuses(await Worker(g).run_once()) == {"t": "done"}
    assert c.runs == Counter({"ask": 2, "b": 1, "c": 1})  # b's committed step not redone


async def test_arun_forever_resumes_until_stopped_from_another_thread() -> None:
    c = Counted()
    g = chain(c, c.asking("ask"))
    await g.ainvoke({"log": []}, thread_id="t")
    await g.asubmit("t", resume="ok")
    seen: list[WorkerResult] = []
    worker = Worker(g, poll_interval=3600, on_result=seen.append)  # idles an hour unless woken

    def stop_when_done() -> None:
        while not seen:
            time.sleep(0.01)
        worker.stop()  # from a thread that is not the worker's loop

    with anyio.fail_after(60):  # (a guard against a hang, not a timing)
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, stop_when_done)
            await worker.arun_forever(handle_signals=False)
    assert [(r.thread_id, r.status) for r in seen] == [("t", "done")]


async def test_a_frozen_thread_is_not_runnable_until_it_is_unfrozen() -> None:
    c = Counted()
    g = chain(c, c.asking("ask"))
    await g.ainvoke({"log": []}, thread_id="t")
    await g.asubmit("t", resume="ok")
    await g.afreeze("t", by="sec", reason="incident")
    assert await Worker(g).run_once() == []  # frozen: nothing runs
    await g.aunfreeze("t", by="sec", reason="over")
    assert statuses(await Worker(g).run_once()) == {"t": "done"}  # its answer applies now


async def test_a_run_that_changes_nothing_is_not_picked_up_again() -> None:
    c = Counted()
    g = chain(c, c.asking("ask"))
    store = g.checkpointer
    assert store is not None
    await g.ainvoke({"log": []}, thread_id="t")
    assert await store.mark_runnable(ThreadId("t"), reason="answered")  # but no answer
    assert statuses(await Worker(g).run_once()) == {"t": "paused"}
    assert await store.list_runnable() == []  # not again and again
    assert c.runs["ask"] == 1


GATE = {"open": False}


def _window(args: dict[str, Any]) -> dict[str, Any]:
    return {"window": "open" if GATE["open"] else "closed"}


@make_tool(risk="low", describe=_window)
def publish(text: str) -> dict[str, Any]:
    """Publish a text."""
    return {"published": text}


class OneCall:
    async def generate(self, messages: list[Message], tools: Any) -> ModelResponse:
        if any(m.role == "tool" for m in messages):
            return ModelResponse(text="done")
        return ModelResponse(tool_calls=[ToolCall(id="call_1", name="publish", args={"text": "x"})])


async def test_a_deferred_call_is_evaluated_again_once_due(tmp_path: Any) -> None:
    policy = Policy([Rule("wait", "defer", match={"tool": "publish"},
                          conditions=["window == 'closed'"])])  # fmt: skip
    agent = Agent(name="poster", model=OneCall(), tools=[publish], policy=policy)
    b = StateGraph(MessagesState).add_node(AgentNode(agent))
    b.add_edge(START, "poster").add_edge("poster", END)
    store = SqliteCheckpointer(tmp_path / "d.db")
    later = b.compile(checkpointer=store, name="p", defer_retry=3600)
    GATE["open"] = False
    user = {"messages": [{"role": "user", "content": "post"}]}
    assert (await later.ainvoke(user, thread_id="t")).status == "paused"
    [mark] = await store.list_runnable(due_by=time.time() + 7200)
    assert mark.reason == "deferred" and time.time() + 3500 < mark.due_at < time.time() + 3600
    assert await Worker(later).run_once() == []  # not due for an hour

    soon = b.compile(checkpointer=store, name="p", defer_retry=0)
    assert (await soon.ainvoke(user, thread_id="u")).status == "paused"
    [r] = await Worker(soon).run_once()  # due at once: evaluated again, still deferred
    assert (r.thread_id, r.status, r.reason) == ("u", "paused", "deferred")
    GATE["open"] = True
    try:
        [r] = await Worker(soon).run_once()
    finally:
        GATE["open"] = False
    assert (r.thread_id, r.status, r.reason) == ("u", "done", "deferred")
    await store.close()


def test_bad_arguments_are_refused_naming_them() -> None:
    c = Counted()
    g = chain(c, c.plain("a"))
    for kwargs, word in (
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": 1.5}, "concurrency"),
        ({"lease_seconds": 0}, "lease_seconds"),
        ({"poll_interval": -1}, "poll_interval"),
    ):
        with pytest.raises(InvalidArgumentError, match=word):
            Worker(g, **kwargs)
    with pytest.raises(InvalidArgumentError, match="compiled graph"):
        Worker([])
    with pytest.raises(InvalidArgumentError, match="no checkpointer"):
        Worker(StateGraph(S).add_node(c.plain("z")).add_edge(START, "z").add_edge("z", END)
               .compile(name="z"))  # fmt: skip
    store = MemoryCheckpointer()
    with pytest.raises(InvalidArgumentError, match="two graphs named 'g'"):
        Worker([chain(c, c.plain("a"), store=store), chain(c, c.plain("a"), store=store)])


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_thread_resumed_to_its_end_keeps_no_lease_and_no_mark(
    kind: str, tmp_path: Any
) -> None:
    """The run gives its lease up with its last commit, which also removes the thread's
    mark: nothing is left for a later worker or run to trip over."""
    store = MemoryCheckpointer() if kind == "memory" else SqliteCheckpointer(tmp_path / "w.db")
    c = Counted()
    g = chain(c, c.plain("a"), c.asking("ask"), c.plain("b"), store=store)
    await g.ainvoke({"log": []}, thread_id="t")
    await g.asubmit("t", resume="yes")
    assert len(await store.list_runnable()) == 1
    [found] = await Worker(g).run_once()
    assert found.status == "done"
    th = await store.get_thread(ThreadId("t"))
    assert th is not None and th.status == "done"
    assert th.lease_owner is None and th.lease_expires_at is None
    assert await store.list_runnable() == []
    assert (await g.ainvoke({"log": []}, thread_id="t")).status == "paused"  # free to run again
    await store.close()


async def test_a_worker_running_many_threads_shares_transactions_between_them(
    tmp_path: Any,
) -> None:
    """At concurrency 8 on SQLite, the step commits of threads resumed together share
    transactions (group commit: a savepoint per commit in one transaction); every thread
    still ends done with its own answer and each node ran as often as alone."""
    store = SqliteCheckpointer(tmp_path / "w.db")
    c = Counted()
    g = chain(c, c.plain("a"), c.asking("ask"), c.plain("b"), store=store)
    threads = [f"t{i}" for i in range(24)]
    for t in threads:
        await g.ainvoke({"log": []}, thread_id=t)
        await g.asubmit(t, resume=f"yes-{t}")
    commits = 0
    real = store.commit

    async def counted(*args: Any, **kwargs: Any) -> None:
        nonlocal commits
        commits += 1
        await real(*args, **kwargs)

    store.commit = counted  # type: ignore[method-assign]
    assert store._db.conn is not None
    seen: list[str] = []
    store._db.conn.set_trace_callback(seen.append)
    results = await Worker(g, concurrency=8).run_once()
    store._db.conn.set_trace_callback(None)
    assert statuses(results) == dict.fromkeys(threads, "done")
    groups, members = [], None  # the commits in each write transaction that had several
    for sql in seen:
        if sql == "BEGIN IMMEDIATE":
            members = 0
        elif sql == "SAVEPOINT gf_member" and members is not None:
            members += 1
        elif sql == "COMMIT" and members is not None:
            groups += [members] if members else []
            members = None
    assert groups and max(groups) >= 2, groups
    assert sum(groups) <= commits == 48  # (two commits a resume)
    assert c.runs == Counter({"a": 24, "ask": 48, "b": 24})
    for t in threads:
        state = await g.aget_state(t)
        assert state is not None and state.values["log"] == ["a", f"ask:yes-{t}", "b"]
    await store.close()


@pytest.mark.parametrize(
    ("raised", "said"), [(SystemExit(3), "sys.exit(3)"), (KeyboardInterrupt(), "KeyboardInterrupt")]
)
async def test_a_node_that_exits_fails_its_thread_and_the_worker_goes_on(
    raised: BaseException, said: str
) -> None:
    """``sys.exit()``, or a ``KeyboardInterrupt`` that is no Ctrl-C (errors.node_exit)."""
    c = Counted()

    def quits(state: S) -> dict[str, Any]:
        if state["log"] == ["ask:bad"]:
            raise raised
        return {"log": ["after"]}

    g = chain(c, c.asking("ask"), quits)
    for t in ("t1", "t2"):
        await g.ainvoke({"log": []}, thread_id=t)
    await g.asubmit("t1", resume="bad")
    await g.asubmit("t2", resume="good")
    found = await Worker(g).run_once()
    assert statuses(found) == {"t1": "failed", "t2": "done"}
    [r] = [r for r in found if r.thread_id == "t1"]
    assert r.error is not None and said in r.error
    assert [t.status for t in await g.alist_threads("failed")] == ["failed"]
