"""Interrupts, resume and durability (API.md "Running", "Pauses"; DESIGN.md promises 1, 7, 8).

The most important durability tests run on both ``MemoryCheckpointer`` and
``SqliteCheckpointer``; on SQLite every resume uses a new checkpointer object and a newly
compiled graph on the same file, as a restarted process would.
"""

import pathlib
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel

from checkpoints import MemoryCheckpointer, SqliteCheckpointer
from graphflow import (
    END,
    START,
    AmbiguousResumeError,
    CompiledGraph,
    GraphflowError,
    GraphMismatchError,
    NodeContext,
    NodeError,
    NothingToResumeError,
    Pause,
    Send,
    StateGraph,
    ThreadCancelledError,
    ThreadNotFoundError,
    ThreadPausedError,
    UnknownPauseError,
    interrupt,
)
from graphflow.reducers import append


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class State(BaseModel):
    log: Annotated[list[str], append] = []
    count: int = 0


class Backend:
    """A checkpoint store; ``graph()`` compiles a fresh graph on a fresh checkpointer object."""

    def __init__(self, kind: str, path: pathlib.Path):
        self.kind = kind
        self.path = path
        self._memory = MemoryCheckpointer()
        self._opened: list[SqliteCheckpointer] = []

    def checkpointer(self) -> Any:
        if self.kind == "memory":
            return self._memory
        cp = SqliteCheckpointer(self.path)
        self._opened.append(cp)
        return cp

    def graph(self, make: Callable[[], StateGraph], **kwargs: Any) -> CompiledGraph:
        return make().compile(checkpointer=self.checkpointer(), **kwargs)

    def close(self) -> None:
        for cp in self._opened:
            anyio.run(cp.close)


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    b = Backend(request.param, tmp_path / "gf.db")
    yield b
    b.close()


@pytest.fixture
def memory() -> Iterator[Backend]:
    b = Backend("memory", pathlib.Path("unused"))
    yield b
    b.close()


def logger(name: str, calls: Counter[str]) -> Callable[[State], dict[str, Any]]:
    def fn(state: State) -> dict[str, Any]:
        calls[name] += 1
        return {"log": [name]}

    fn.__name__ = name
    return fn


def ask_graph(calls: Counter[str], *, use_ctx: bool = False) -> Callable[[], StateGraph]:
    """first -> ask (interrupts once) -> last."""

    def ask(state: State, ctx: NodeContext) -> dict[str, Any]:
        calls["ask"] += 1
        question = {"question": "proceed?", "count": state.count}
        answer = ctx.interrupt(question) if use_ctx else interrupt(question)
        calls["ask_answered"] += 1
        return {"log": [f"ask:{answer!r}"]}

    def make() -> StateGraph:
        b = StateGraph(State)
        b.add_node("first", logger("first", calls)).add_node(ask)
        b.add_node("last", logger("last", calls))
        b.add_edge(START, "first").add_edge("first", "ask").add_edge("ask", "last")
        return b.add_edge("last", END)

    return make


def parallel_ask_graph(calls: Counter[str]) -> Callable[[], StateGraph]:
    """START -> (left, right, sibling) -> join; left (sync) and right (async) interrupt."""

    def left(state: State) -> dict[str, Any]:
        calls["left"] += 1
        return {"log": [f"left:{interrupt('left?')}"]}

    async def right(state: State) -> dict[str, Any]:
        calls["right"] += 1
        return {"log": [f"right:{interrupt('right?')}"]}

    def make() -> StateGraph:
        b = StateGraph(State).add_node(left).add_node(right)
        b.add_node("sibling", logger("sibling", calls)).add_node("join", logger("join", calls))
        for n in ("left", "right", "sibling"):
            b.add_edge(START, n)
        b.add_edge(["left", "right", "sibling"], "join")
        return b.add_edge("join", END)

    return make


# -- interrupt and resume -----------------------------------------------------------------------
@pytest.mark.parametrize("use_ctx", [False, True], ids=["interrupt", "ctx.interrupt"])
def test_interrupt_pauses_and_resume_by_value_answers_it(backend: Backend, use_ctx: bool) -> None:
    calls: Counter[str] = Counter()
    make = ask_graph(calls, use_ctx=use_ctx)
    result = backend.graph(make).invoke({"count": 4}, thread_id="t1")
    assert result.status == "paused"
    assert result.thread_id == "t1"
    assert result.state.log == ["first"]
    [pause] = result.pauses
    assert isinstance(pause, Pause)
    assert pause.kind == "interrupt"
    assert pause.node == "ask"
    assert pause.value == {"question": "proceed?", "count": 4}
    assert pause.thread_id == "t1"
    assert pause.checkpoint_id == result.checkpoint_id
    assert isinstance(pause.id, str) and pause.id
    assert calls == {"first": 1, "ask": 1}

    graph = backend.graph(make)
    assert graph.pending_pauses("t1") == [pause]
    done = graph.invoke(None, thread_id="t1", resume="yes")
    assert done.status == "done"
    assert done.pauses == []
    assert done.state.log == ["first", "ask:'yes'", "last"]
    assert calls == {"first": 1, "ask": 2, "ask_answered": 1, "last": 1}
    assert graph.pending_pauses("t1") == []


def test_resume_by_pause_id_mapping(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = ask_graph(calls, use_ctx=True)
    [pause] = backend.graph(make).invoke({}, thread_id="t").pauses
    done = backend.graph(make).invoke(None, thread_id="t", resume={pause.id: 42})
    assert done.status == "done"
    assert done.state.log == ["first", "ask:42", "last"]
    assert calls["ask"] == 2


@pytest.mark.parametrize("answer", [None, {"approved": True, "note": "ok"}, ["a", 1]])
def test_any_value_is_an_answer(memory: Backend, answer: Any) -> None:
    calls: Counter[str] = Counter()
    graph = memory.graph(ask_graph(calls))
    graph.invoke({}, thread_id="t")
    done = graph.invoke(None, thread_id="t", resume=answer)
    assert done.status == "done"
    assert done.state.log == ["first", f"ask:{answer!r}", "last"]


def test_two_interrupts_in_one_node_are_answered_in_order_across_two_resumes(
    backend: Backend,
) -> None:
    calls: Counter[str] = Counter()

    def two(state: State) -> dict[str, Any]:
        calls["two"] += 1
        first = interrupt("q1")
        second = interrupt("q2")
        return {"log": [first, second]}

    def make() -> StateGraph:
        return StateGraph(State).add_node(two).add_edge(START, "two").add_edge("two", END)

    r1 = backend.graph(make).invoke({}, thread_id="t")
    [p1] = r1.pauses
    assert p1.value == "q1"
    r2 = backend.graph(make).invoke(None, thread_id="t", resume="A")
    assert r2.status == "paused"
    [p2] = r2.pauses
    assert p2.value == "q2"
    assert p2.id != p1.id
    r3 = backend.graph(make).invoke(None, thread_id="t", resume="B")
    assert r3.status == "done"
    assert r3.state.log == ["A", "B"]
    assert calls["two"] == 3


def test_bare_resume_with_two_pending_pauses_is_ambiguous(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = parallel_ask_graph(calls)
    result = backend.graph(make).invoke({}, thread_id="t")
    assert result.status == "paused"
    assert sorted((p.node, p.value) for p in result.pauses) == [
        ("left", "left?"),
        ("right", "right?"),
    ]
    assert calls == {"left": 1, "right": 1, "sibling": 1}

    graph = backend.graph(make)
    with pytest.raises(AmbiguousResumeError) as info:
        graph.invoke(None, thread_id="t", resume="both?")
    assert set(info.value.pause_ids) == {p.id for p in result.pauses}
    assert calls == {"left": 1, "right": 1, "sibling": 1}
    assert {p.id for p in graph.pending_pauses("t")} == {p.id for p in result.pauses}

    by_node = {p.node: p.id for p in result.pauses}
    done = graph.invoke(None, thread_id="t", resume={by_node["left"]: "L", by_node["right"]: "R"})
    assert done.status == "done"
    assert done.state.log == ["left:L", "right:R", "sibling", "join"]
    assert calls == {"left": 2, "right": 2, "sibling": 1, "join": 1}


def test_answering_one_of_two_pauses_leaves_the_other_pending(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = parallel_ask_graph(calls)
    result = backend.graph(make).invoke({}, thread_id="t")
    by_node = {p.node: p for p in result.pauses}

    partial = backend.graph(make).invoke(None, thread_id="t", resume={by_node["left"].id: "L"})
    assert partial.status == "paused"
    assert [p.id for p in partial.pauses] == [by_node["right"].id]
    assert calls["left"] == 2
    assert calls["join"] == 0

    # The remaining pause is now the only one: a bare value answers it.
    done = backend.graph(make).invoke(None, thread_id="t", resume="R")
    assert done.status == "done"
    assert done.state.log == ["left:L", "right:R", "sibling", "join"]
    assert calls["left"] == 2
    assert calls["sibling"] == 1
    assert calls["join"] == 1


def test_resume_that_answers_no_pause_executes_nothing(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = parallel_ask_graph(calls)
    first = backend.graph(make).invoke({}, thread_id="t")
    before = dict(calls)

    again = backend.graph(make).invoke(None, thread_id="t")
    assert again.status == "paused"
    assert again.pauses == first.pauses
    assert again.checkpoint_id == first.checkpoint_id
    assert dict(calls) == before

    events = list(backend.graph(make).stream(None, thread_id="t", mode="debug"))
    assert [e.type for e in events if e.type in ("task_start", "done")] == []
    assert [e.data for e in events if e.type == "pause"] == first.pauses
    assert events[-1].type == "paused"
    assert dict(calls) == before
    assert len(backend.graph(make).get_state_history("t")) == 1


def test_resume_on_a_thread_with_nothing_pending(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = ask_graph(calls)
    graph = backend.graph(make)
    graph.invoke({}, thread_id="t")
    graph.invoke(None, thread_id="t", resume="yes")
    before = dict(calls)
    with pytest.raises(NothingToResumeError) as info:
        backend.graph(make).invoke(None, thread_id="t", resume="again")
    assert info.value.thread_id == "t"
    assert "'t'" in str(info.value)
    assert dict(calls) == before


def test_resume_with_unknown_pause_id(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = ask_graph(calls)
    graph = backend.graph(make)
    [mine] = graph.invoke({}, thread_id="mine").pauses
    [other] = graph.invoke({}, thread_id="other").pauses
    assert other.id != mine.id
    before = dict(calls)

    with pytest.raises(UnknownPauseError) as info:
        backend.graph(make).invoke(None, thread_id="mine", resume={other.id: "wrong thread"})
    assert info.value.unknown == (other.id,)
    assert other.id in str(info.value)
    assert dict(calls) == before
    assert backend.graph(make).pending_pauses("mine") == [mine]

    done = backend.graph(make).invoke(None, thread_id="mine", resume={mine.id: "right"})
    assert done.state.log == ["first", "ask:'right'", "last"]


def test_new_input_on_a_paused_thread_raises_thread_paused_error(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = ask_graph(calls)
    [pause] = backend.graph(make).invoke({}, thread_id="t").pauses
    before = dict(calls)
    with pytest.raises(ThreadPausedError) as info:
        backend.graph(make).invoke({"count": 1}, thread_id="t")
    assert info.value.pause_ids == (pause.id,)
    assert "'t'" in str(info.value)
    assert dict(calls) == before
    graph = backend.graph(make)
    assert graph.pending_pauses("t") == [pause]
    assert graph.get_state("t").values.count == 0


def test_input_and_resume_together_are_rejected(memory: Backend) -> None:
    calls: Counter[str] = Counter()
    graph = memory.graph(ask_graph(calls))
    graph.invoke({}, thread_id="t")
    with pytest.raises(GraphflowError):
        graph.invoke({"count": 1}, thread_id="t", resume="x")
    assert calls == {"first": 1, "ask": 1}


def test_cancel_then_continue_raises_and_new_input_starts_a_new_run(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = ask_graph(calls)
    backend.graph(make).invoke({"count": 1}, thread_id="t")
    graph = backend.graph(make)
    graph.cancel("t", reason="not needed")
    assert [(t.thread_id, t.status) for t in graph.list_threads()] == [("t", "cancelled")]
    assert graph.pending_pauses("t") == []

    with pytest.raises(ThreadCancelledError) as info:
        backend.graph(make).invoke(None, thread_id="t")
    assert info.value.thread_id == "t"
    with pytest.raises(ThreadCancelledError):
        backend.graph(make).invoke(None, thread_id="t", resume="late")
    assert calls == {"first": 1, "ask": 1}

    fresh = backend.graph(make).invoke({"count": 2}, thread_id="t")
    assert fresh.status == "paused"
    assert calls == {"first": 2, "ask": 2}
    assert fresh.state.log == ["first", "first"]  # state carried over, run from START
    assert fresh.state.count == 2
    done = backend.graph(make).invoke(None, thread_id="t", resume="ok")
    assert done.state.log == ["first", "first", "ask:'ok'", "last"]


def test_cancel_unknown_thread(memory: Backend) -> None:
    graph = memory.graph(ask_graph(Counter()))
    with pytest.raises(ThreadNotFoundError):
        graph.cancel("nope", reason="x")


# -- static interrupts --------------------------------------------------------------------------
def _abc(calls: Counter[str]) -> Callable[[], StateGraph]:
    def make() -> StateGraph:
        b = StateGraph(State)
        for n in ("a", "b", "c"):
            b.add_node(n, logger(n, calls))
        return b.add_edge(START, "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", END)

    return make


def test_interrupt_before(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = _abc(calls)
    result = backend.graph(make, interrupt_before=["b"]).invoke({}, thread_id="t")
    assert result.status == "paused"
    [pause] = result.pauses
    assert (pause.kind, pause.node) == ("before", "b")
    assert calls == {"a": 1}
    assert result.state.log == ["a"]
    assert backend.graph(make, interrupt_before=["b"]).get_state("t").next == ("b",)

    done = backend.graph(make, interrupt_before=["b"]).invoke(None, thread_id="t")
    assert done.status == "done"
    assert done.state.log == ["a", "b", "c"]
    assert calls == {"a": 1, "b": 1, "c": 1}


def test_interrupt_before_every_node_with_a_star_or_one_node_by_its_name(memory: Backend) -> None:
    """``"*"`` gates every node, as in LangGraph; a single name is that node (a string was
    taken as a sequence of one-letter names: "unknown node 'b'" for ``"b2"``)."""
    calls: Counter[str] = Counter()
    make = _abc(calls)
    graph = memory.graph(make, interrupt_before="*")
    seen = []
    result = graph.invoke({}, thread_id="t")
    while result.status == "paused":
        seen.append(result.pauses[0].node)
        result = graph.invoke(None, thread_id="t")
    assert seen == ["a", "b", "c"] and result.state.log == ["a", "b", "c"]
    one = memory.graph(make, interrupt_after="b").invoke({}, thread_id="u")
    assert (one.status, one.pauses[0].kind, one.pauses[0].node) == ("paused", "after", "b")


def test_interrupt_after(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = _abc(calls)
    result = backend.graph(make, interrupt_after=["b"]).invoke({}, thread_id="t")
    assert result.status == "paused"
    [pause] = result.pauses
    assert (pause.kind, pause.node) == ("after", "b")
    assert calls == {"a": 1, "b": 1}
    assert result.state.log == ["a", "b"]  # b's step is committed before the pause
    snap = backend.graph(make, interrupt_after=["b"]).get_state("t")
    assert (snap.next, snap.checkpoint_id) == (("c",), pause.checkpoint_id)

    done = backend.graph(make, interrupt_after=["b"]).invoke(None, thread_id="t")
    assert done.status == "done"
    assert done.state.log == ["a", "b", "c"]  # b's writes applied once
    assert calls == {"a": 1, "b": 1, "c": 1}  # b not rerun


def test_interrupt_before_and_after_each_pause_once_per_run(memory: Backend) -> None:
    calls: Counter[str] = Counter()
    graph = memory.graph(_abc(calls), interrupt_before=["a", "c"], interrupt_after=["a", "b"])
    kinds = []
    result = graph.invoke({}, thread_id="t")
    while result.status == "paused":
        kinds += [(p.kind, p.node) for p in result.pauses]
        result = graph.invoke(None, thread_id="t")
    assert kinds == [("before", "a"), ("after", "a"), ("after", "b"), ("before", "c")]
    assert result.state.log == ["a", "b", "c"]
    assert calls == {"a": 1, "b": 1, "c": 1}


# -- finished work is not redone (promise 1) ------------------------------------------------------
def test_step_once_results_are_replayed_after_a_pause(backend: Backend) -> None:
    calls: Counter[str] = Counter()

    def fetch(x: int) -> int:
        calls["fetch"] += 1
        return x * 100 + calls["fetch"]

    async def afetch(x: int) -> str:
        calls["afetch"] += 1
        return f"async-{x}-{calls['afetch']}"

    async def worker(state: State, ctx: NodeContext) -> dict[str, Any]:
        calls["worker"] += 1
        a = await ctx.step_once("fetch", fetch, 3)
        b = await ctx.step_once("afetch", afetch, 4)
        loop = [await ctx.step_once("loop", fetch, i) for i in range(2)]
        answer = ctx.interrupt({"a": a, "b": b})
        return {"log": [f"{a}|{b}|{loop}|{answer}"]}

    def make() -> StateGraph:
        return StateGraph(State).add_node(worker).add_edge(START, "worker").add_edge("worker", END)

    result = backend.graph(make).invoke({}, thread_id="t")
    assert result.pauses[0].value == {"a": 301, "b": "async-4-1"}
    assert calls == {"worker": 1, "fetch": 3, "afetch": 1}

    done = backend.graph(make).invoke(None, thread_id="t", resume="go")
    assert done.status == "done"
    assert done.state.log == ["301|async-4-1|[2, 103]|go"]
    assert calls == {"worker": 2, "fetch": 3, "afetch": 1}


def test_completed_parallel_siblings_are_not_rerun_on_resume(backend: Backend) -> None:
    calls: Counter[str] = Counter()

    async def slow_sibling(state: State) -> dict[str, Any]:
        calls["slow_sibling"] += 1
        await anyio.sleep(0.02)
        return {"log": ["slow"], "count": state.count + 10}

    def fast_sibling(state: State) -> dict[str, Any]:
        calls["fast_sibling"] += 1
        return {"log": ["fast"]}

    def asker(state: State) -> dict[str, Any]:
        calls["asker"] += 1
        return {"log": [f"asker:{interrupt('?')}:{state.count}"]}

    def make() -> StateGraph:
        b = StateGraph(State).add_node(slow_sibling).add_node(fast_sibling).add_node(asker)
        for n in ("slow_sibling", "fast_sibling", "asker"):
            b.add_edge(START, n).add_edge(n, END)
        return b

    result = backend.graph(make).invoke({"count": 1}, thread_id="t")
    assert result.status == "paused"
    assert calls == {"slow_sibling": 1, "fast_sibling": 1, "asker": 1}

    done = backend.graph(make).invoke(None, thread_id="t", resume="x")
    assert done.status == "done"
    assert calls == {"slow_sibling": 1, "fast_sibling": 1, "asker": 2}
    # The resumed node saw the state of its step (promise 7); siblings' writes applied once.
    assert done.state.log == ["asker:x:1", "fast", "slow"]
    assert done.state.count == 11


def test_failed_node_is_retried_alone_and_completed_siblings_are_not_rerun(
    backend: Backend,
) -> None:
    calls: Counter[str] = Counter()
    broken = {"on": True}

    def flaky(state: State) -> dict[str, Any]:
        calls["flaky"] += 1
        if broken["on"]:
            raise ConnectionError("service down")
        return {"log": ["flaky"]}

    def make() -> StateGraph:
        b = StateGraph(State).add_node(flaky)
        b.add_node("ok", logger("ok", calls)).add_node("after", logger("after", calls))
        b.add_edge(START, "ok").add_edge(START, "flaky").add_edge(["ok", "flaky"], "after")
        return b.add_edge("after", END)

    with pytest.raises(NodeError) as info:
        backend.graph(make).invoke({}, thread_id="t")
    assert info.value.node == "flaky"
    assert isinstance(info.value.__cause__, ConnectionError)
    assert calls == {"ok": 1, "flaky": 1}
    graph = backend.graph(make)
    assert [(t.thread_id, t.status) for t in graph.list_threads()] == [("t", "failed")]

    # Still broken: only the failed node runs again.
    with pytest.raises(NodeError):
        backend.graph(make).invoke(None, thread_id="t")
    assert calls == {"ok": 1, "flaky": 2}

    broken["on"] = False
    done = backend.graph(make).invoke(None, thread_id="t")
    assert done.status == "done"
    assert done.state.log == ["flaky", "ok", "after"]
    assert calls == {"ok": 1, "flaky": 3, "after": 1}


def test_invoke_none_on_unknown_thread(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    graph = backend.graph(ask_graph(calls))
    with pytest.raises(ThreadNotFoundError) as info:
        graph.invoke(None, thread_id="ghost")
    assert info.value.thread_id == "ghost"
    assert isinstance(info.value, LookupError)
    with pytest.raises(ThreadNotFoundError):
        graph.invoke(None, thread_id="ghost", resume="x")
    assert calls == {}
    assert graph.get_state("ghost") is None


def test_submit_records_the_answer_and_a_later_run_applies_it(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = ask_graph(calls)
    [pause] = backend.graph(make).invoke({}, thread_id="t").pauses
    backend.graph(make).submit("t", resume="via inbox", by="alice", reason="looks fine")
    assert calls == {"first": 1, "ask": 1}
    graph = backend.graph(make)
    assert graph.get_state("t").values.log == ["first"]
    assert [t.status for t in graph.list_threads()] == ["paused"]
    [pending] = graph.pending_pauses("t")  # (still pending, and answered: not applied yet)
    assert (pending.id, pending.answered, pending.answer) == (pause.id, True, "via inbox")
    assert (pending.answered_by, pending.answer_reason) == ("alice", "looks fine")

    done = backend.graph(make).invoke(None, thread_id="t")
    assert done.status == "done"
    assert done.state.log == ["first", "ask:'via inbox'", "last"]
    assert calls == {"first": 1, "ask": 2, "ask_answered": 1, "last": 1}


def test_submit_by_pause_id(memory: Backend) -> None:
    calls: Counter[str] = Counter()
    graph = memory.graph(parallel_ask_graph(calls))
    pauses = {p.node: p.id for p in graph.invoke({}, thread_id="t").pauses}
    graph.submit("t", resume={pauses["left"]: "L", pauses["right"]: "R"})
    done = graph.invoke(None, thread_id="t")
    assert done.state.log == ["left:L", "right:R", "sibling", "join"]


def test_submit_errors(memory: Backend) -> None:
    calls: Counter[str] = Counter()
    graph = memory.graph(ask_graph(calls))
    with pytest.raises(ThreadNotFoundError):
        graph.submit("ghost", resume="x")
    graph.invoke({}, thread_id="t")
    graph.invoke(None, thread_id="t", resume="y")
    with pytest.raises(NothingToResumeError):
        graph.submit("t", resume="again")

    two = memory.graph(parallel_ask_graph(calls))
    two.invoke({}, thread_id="p")
    with pytest.raises(AmbiguousResumeError):
        two.submit("p", resume="bare")


def test_submit_with_unknown_pause_id_is_reported(memory: Backend) -> None:
    calls: Counter[str] = Counter()
    graph = memory.graph(ask_graph(calls))
    [mine] = graph.invoke({}, thread_id="mine").pauses
    [other] = graph.invoke({}, thread_id="other").pauses
    with pytest.raises(UnknownPauseError):
        graph.submit("mine", resume={other.id: "wrong thread"})
    # Nothing was recorded: continuing the thread still waits for its pause.
    again = graph.invoke(None, thread_id="mine")
    assert again.status == "paused"
    assert again.pauses == [mine]


def test_pause_and_resume_change_nothing(backend: Backend) -> None:
    """Promise 7: a paused-and-resumed run ends in the same state as an uninterrupted one."""
    calls: Counter[str] = Counter()

    def make_with(pausing: bool) -> Callable[[], StateGraph]:
        def ask(state: State) -> dict[str, Any]:
            answer = interrupt("n?") if pausing else 5
            return {"count": state.count + answer, "log": [f"ask{state.count}"]}

        def make() -> StateGraph:
            b = StateGraph(State).add_node(ask)
            for n in ("pre1", "pre2", "post"):
                b.add_node(n, logger(n, calls))
            b.add_edge(START, "pre1").add_edge(START, "pre2").add_edge(START, "ask")
            b.add_edge(["pre1", "pre2", "ask"], "post")
            return b.add_edge("post", END)

        return make

    straight = backend.graph(make_with(False)).invoke({"count": 1}, thread_id="straight")
    backend.graph(make_with(True)).invoke({"count": 1}, thread_id="paused")
    resumed = backend.graph(make_with(True)).invoke(None, thread_id="paused", resume=5)
    assert resumed.status == straight.status == "done"
    assert resumed.state == straight.state
    assert straight.state == State(log=["ask1", "pre1", "pre2", "post"], count=6)


def test_step_once_result_is_replayed_when_a_failed_node_is_retried(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    broken = {"on": True}

    def charge(amount: int) -> str:
        calls["charge"] += 1
        return f"receipt-{amount}-{calls['charge']}"

    async def pay(state: State, ctx: NodeContext) -> dict[str, Any]:
        calls["pay"] += 1
        receipt = await ctx.step_once("charge", charge, 12)
        if broken["on"]:
            raise TimeoutError("mail server down")
        return {"log": [receipt]}

    def make() -> StateGraph:
        return StateGraph(State).add_node(pay).add_edge(START, "pay").add_edge("pay", END)

    with pytest.raises(NodeError):
        backend.graph(make).invoke({}, thread_id="t")
    assert calls == {"pay": 1, "charge": 1}
    broken["on"] = False
    done = backend.graph(make).invoke(None, thread_id="t")
    assert done.status == "done"
    assert done.state.log == ["receipt-12-1"]
    assert calls == {"pay": 2, "charge": 1}


def test_join_barrier_survives_a_pause_and_restart(backend: Backend) -> None:
    calls: Counter[str] = Counter()

    def slow_branch(state: State) -> dict[str, Any]:
        calls["slow_branch"] += 1
        return {"log": [f"slow:{interrupt('slow?')}"]}

    def make() -> StateGraph:
        b = StateGraph(State).add_node(slow_branch)
        for n in ("quick", "pre", "joined"):
            b.add_node(n, logger(n, calls))
        # quick finishes in step 1; slow_branch (after pre) pauses in step 2.
        b.add_edge(START, "quick").add_edge(START, "pre").add_edge("pre", "slow_branch")
        b.add_edge(["quick", "slow_branch"], "joined")
        return b.add_edge("joined", END)

    result = backend.graph(make).invoke({}, thread_id="t")
    assert result.status == "paused"
    assert calls == {"quick": 1, "pre": 1, "slow_branch": 1}
    done = backend.graph(make).invoke(None, thread_id="t", resume="ok")
    assert done.status == "done"
    assert done.state.log == ["pre", "quick", "slow:ok", "joined"]
    assert calls == {"quick": 1, "pre": 1, "slow_branch": 2, "joined": 1}


def test_send_tasks_pause_and_resume_by_pause_id(backend: Backend) -> None:
    calls: Counter[str] = Counter()

    def worker(arg: dict[str, Any]) -> dict[str, Any]:
        calls[f"worker{arg['n']}"] += 1
        if arg["n"] == 2:
            return {"log": [f"w2:{interrupt({'n': 2})}"]}
        return {"log": [f"w{arg['n']}"]}

    def make() -> StateGraph:
        b = StateGraph(State).add_node(worker)
        b.add_conditional_edges(START, lambda s: [Send("worker", {"n": i}) for i in (1, 2, 3)])
        return b.add_edge("worker", END)

    result = backend.graph(make).invoke({}, thread_id="t")
    [pause] = result.pauses
    assert (pause.node, pause.value) == ("worker", {"n": 2})
    done = backend.graph(make).invoke(None, thread_id="t", resume={pause.id: "yes"})
    assert done.status == "done"
    assert sorted(done.state.log) == ["w1", "w2:yes", "w3"]
    assert calls == {"worker1": 1, "worker2": 2, "worker3": 1}


def test_continuing_a_finished_thread_runs_nothing(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = _abc(calls)
    first = backend.graph(make).invoke({}, thread_id="t")
    again = backend.graph(make).invoke(None, thread_id="t")
    assert again.status == "done"
    assert again.state == first.state
    assert again.checkpoint_id == first.checkpoint_id
    assert calls == {"a": 1, "b": 1, "c": 1}


@pytest.mark.parametrize("parallel", [False, True], ids=["one task", "two tasks"])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_pause_leaves_no_reference_cycle(
    tmp_path: pathlib.Path, kind: str, parallel: bool
) -> None:
    """A pause is control flow: when ``invoke`` returns, the paused run's objects are freed
    by reference counting, not left in a cycle for the garbage collector (the interrupt's
    traceback held the frame that caught it: some 35 objects, the whole run, per pause)."""
    import gc

    def ask(state: State) -> dict[str, Any]:
        return {"log": [str(interrupt("ok?"))]}

    builder = StateGraph(State).add_node("ask", ask).add_edge(START, "ask").add_edge("ask", END)
    if parallel:  # a step of two sync tasks: they run in worker threads
        builder.add_node("other", lambda s: {"count": 1}).add_edge(START, "other").add_edge(
            "other", END
        )
    store = MemoryCheckpointer() if kind == "memory" else SqliteCheckpointer(tmp_path / "s.db")
    graph = builder.compile(checkpointer=store)
    assert graph.invoke({}, thread_id="warm").status == "paused"  # caches filled
    gc.collect()
    flags = gc.get_debug()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds is kept in gc.garbage
    try:
        assert graph.invoke({}, thread_id="t").status == "paused"
        gc.collect()
        found = [type(o).__name__ for o in gc.garbage]
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
        gc.enable()
    assert found == []
    if kind == "sqlite":
        anyio.run(store.close)


# -- gates hold steps: interrupt_after commits, interrupt_before holds the whole step -------------
class XState(BaseModel):
    log: Annotated[list[str], append] = []
    x: str = ""


def _xgraph(calls: Counter[str], seen: list[str]) -> Callable[[], StateGraph]:
    """a (writes x) -> b (reads x) -> c."""

    def a(state: XState) -> dict[str, Any]:
        calls["a"] += 1
        return {"log": ["a"], "x": "a"}

    def b(state: XState) -> dict[str, Any]:
        calls["b"] += 1
        seen.append(state.x)
        return {"log": ["b"]}

    def make() -> StateGraph:
        g = StateGraph(XState).add_node(a).add_node(b).add_node("c", logger("c", calls))
        return g.add_edge(START, "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", END)

    return make


def test_interrupt_after_commits_the_step_and_pauses_at_the_next_checkpoint(
    backend: Backend,
) -> None:
    calls: Counter[str] = Counter()
    seen: list[str] = []
    make = _xgraph(calls, seen)
    result = backend.graph(make, interrupt_after=["a"]).invoke({}, thread_id="t")
    assert result.status == "paused"
    [pause] = result.pauses
    assert (pause.kind, pause.node) == ("after", "a")
    assert (result.state.x, result.state.log) == ("a", ["a"])

    graph = backend.graph(make, interrupt_after=["a"])
    snap = graph.get_state("t")
    assert snap.next == ("b",)  # the node that ran is behind, its writes are in the state
    assert snap.values.x == "a"
    assert snap.checkpoint_id == result.checkpoint_id == pause.checkpoint_id
    assert [t.status for t in graph.list_threads()] == ["paused"]
    assert graph.pending_pauses("t") == [pause]

    # An edit made during the pause is what the next node sees (LangGraph: "fixed").
    graph.update_state("t", {"x": "fixed"})
    done = backend.graph(make, interrupt_after=["a"]).invoke(None, thread_id="t")
    assert done.status == "done"
    assert done.state.x == "fixed"
    assert done.state.log == ["a", "b", "c"]
    assert seen == ["fixed"]
    assert calls == {"a": 1, "b": 1, "c": 1}


def test_an_after_gate_of_the_last_step_pauses_and_continuing_ends_the_run(
    backend: Backend,
) -> None:
    """As LangGraph: the step is committed, the thread pauses with nothing next; continuing
    ends the run (done) without running anything again."""
    calls: Counter[str] = Counter()
    graph = backend.graph(_abc(calls), interrupt_after=["c"])
    result = graph.invoke({}, thread_id="t")
    assert result.status == "paused" and [p.kind for p in result.pauses] == ["after"]
    assert result.state.log == ["a", "b", "c"]
    snap = graph.get_state("t")
    assert snap.next == () and snap.values.log == ["a", "b", "c"]
    assert [t.status for t in graph.list_threads()] == ["paused"]
    done = graph.invoke(None, thread_id="t")
    assert (done.status, done.pauses, done.state.log) == ("done", [], ["a", "b", "c"])
    assert [t.status for t in graph.list_threads()] == ["done"]
    assert graph.pending_pauses("t") == []
    assert calls == {"a": 1, "b": 1, "c": 1}


def test_answering_one_of_two_after_gates_keeps_the_step_held(backend: Backend) -> None:
    calls: Counter[str] = Counter()

    def make() -> StateGraph:
        b = StateGraph(State)
        for n in ("a", "b", "c"):
            b.add_node(n, logger(n, calls))
        b.add_edge(START, "a").add_edge(START, "b").add_edge(["a", "b"], "c")
        return b.add_edge("c", END)

    result = backend.graph(make, interrupt_after=["a", "b"]).invoke({}, thread_id="t")
    gates = {p.node: p for p in result.pauses}
    assert sorted(gates) == ["a", "b"] and {p.kind for p in result.pauses} == {"after"}
    assert result.state.log == ["a", "b"]

    partial = backend.graph(make, interrupt_after=["a", "b"]).invoke(
        None, thread_id="t", resume={gates["a"].id: "seen"}
    )
    assert partial.status == "paused"
    assert partial.pauses == [gates["b"]]
    assert calls == {"a": 1, "b": 1}

    done = backend.graph(make, interrupt_after=["a", "b"]).invoke(None, thread_id="t")
    assert done.status == "done"
    assert done.state.log == ["a", "b", "c"]
    assert calls == {"a": 1, "b": 1, "c": 1}


@pytest.mark.parametrize("gated", ["s1", "s2"], ids=["mid-child", "last-of-child"])
def test_an_after_gate_in_a_subgraph_holds_until_it_is_answered(
    backend: Backend, gated: str
) -> None:
    calls: Counter[str] = Counter()

    def asker(state: State) -> dict[str, Any]:
        calls["asker"] += 1
        return {"log": [f"asker:{interrupt('?')}"]}

    def make() -> StateGraph:
        c = StateGraph(State).add_node("s1", logger("s1", calls))
        c.add_node("s2", logger("s2", calls))
        c.add_edge(START, "s1").add_edge("s1", "s2").add_edge("s2", END)
        child = c.compile(interrupt_after=[gated])
        p = StateGraph(State).add_node("sub", child).add_node(asker)
        p.add_node("z", logger("z", calls))
        p.add_edge(START, "sub").add_edge(START, "asker").add_edge(["sub", "asker"], "z")
        return p.add_edge("z", END)

    result = backend.graph(make).invoke({}, thread_id="t")
    kinds = {p.kind: p for p in result.pauses}
    assert sorted(kinds) == ["after", "interrupt"]
    assert kinds["after"].node == f"sub.{gated}"
    ran = {"s1": 1} if gated == "s1" else {"s1": 1, "s2": 1}

    # The interrupt alone is answered: the child's gate still holds the subgraph task.
    partial = backend.graph(make).invoke(None, thread_id="t", resume={kinds["interrupt"].id: "x"})
    assert partial.status == "paused"
    assert partial.pauses == [kinds["after"]]
    assert calls == {"asker": 2, **ran}

    done = backend.graph(make).invoke(None, thread_id="t")
    assert done.status == "done"
    assert sorted(done.state.log) == ["asker:x", "s1", "s2", "z"]
    assert calls == {"asker": 2, "s1": 1, "s2": 1, "z": 1}


def test_interrupt_before_holds_the_whole_step(backend: Backend) -> None:
    calls: Counter[str] = Counter()

    def make() -> StateGraph:
        b = StateGraph(State)
        for n in ("gated", "sibling", "after"):
            b.add_node(n, logger(n, calls))
        b.add_edge(START, "gated").add_edge(START, "sibling")
        return b.add_edge(["gated", "sibling"], "after").add_edge("after", END)

    result = backend.graph(make, interrupt_before=["gated"]).invoke({}, thread_id="t")
    assert result.status == "paused"
    assert [(p.kind, p.node) for p in result.pauses] == [("before", "gated")]
    assert calls == {}  # the sibling waits with the gated node (LangGraph holds the superstep)
    snap = backend.graph(make, interrupt_before=["gated"]).get_state("t")
    assert {t.name: t.status for t in snap.tasks} == {"gated": "paused", "sibling": "pending"}
    assert snap.values.log == []

    done = backend.graph(make, interrupt_before=["gated"]).invoke(None, thread_id="t")
    assert done.status == "done"
    assert done.state.log == ["gated", "sibling", "after"]
    assert calls == {"gated": 1, "sibling": 1, "after": 1}


def test_interrupt_before_in_a_subgraph_holds_the_childs_step_and_continue_releases_all(
    backend: Backend,
) -> None:
    calls: Counter[str] = Counter()

    def make() -> StateGraph:
        c = StateGraph(State).add_node("x", logger("x", calls)).add_node("y", logger("y", calls))
        c.add_edge(START, "x").add_edge(START, "y").add_edge("x", END).add_edge("y", END)
        child = c.compile(interrupt_before=["x"])
        p = StateGraph(State).add_node("one", child).add_node("two", child)
        p.add_node("sib", logger("sib", calls)).add_node("z", logger("z", calls))
        for n in ("one", "two", "sib"):
            p.add_edge(START, n)
        return p.add_edge(["one", "two", "sib"], "z").add_edge("z", END)

    result = backend.graph(make).invoke({}, thread_id="t")
    assert result.status == "paused"
    assert sorted((p.kind, p.node) for p in result.pauses) == [
        ("before", "one.x"),
        ("before", "two.x"),
    ]
    # Each child's step is held whole (y waits with x); the parent's own sibling ran.
    assert calls == {"sib": 1}

    done = backend.graph(make).invoke(None, thread_id="t")  # every gate, nested ones too
    assert done.status == "done"
    assert sorted(done.state.log) == ["sib", "x", "x", "y", "y", "z"]
    assert calls == {"sib": 1, "x": 2, "y": 2, "z": 1}


def test_a_thread_of_another_graph_is_refused_before_anything_runs(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    backend.graph(ask_graph(calls)).invoke({}, thread_id="t")

    def other() -> StateGraph:
        b = StateGraph(State).add_node("elsewhere", logger("elsewhere", calls))
        return b.add_edge(START, "elsewhere").add_edge("elsewhere", END)

    stranger = backend.graph(other)
    before = stranger.get_state("t")
    with pytest.raises(GraphMismatchError, match="node 'ask', which this graph does not") as e:
        stranger.invoke(None, thread_id="t", resume="yes")
    assert (e.value.thread_id, e.value.nodes) == ("t", ("ask",))
    assert calls == {"first": 1, "ask": 1} and stranger.get_state("t") == before
    assert [t.status for t in stranger.list_threads()] == ["paused"]
    done = backend.graph(ask_graph(calls)).invoke(None, thread_id="t", resume="yes")
    assert done.state.log == ["first", "ask:'yes'", "last"]


def test_a_thread_of_another_named_graph_is_refused_naming_both(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    backend.graph(ask_graph(calls), name="asker").invoke({}, thread_id="t")

    def other() -> StateGraph:
        b = StateGraph(State).add_node("elsewhere", logger("elsewhere", calls))
        return b.add_edge(START, "elsewhere").add_edge("elsewhere", END)

    with pytest.raises(GraphMismatchError) as e:
        backend.graph(other, name="other").invoke(None, thread_id="t", resume="yes")
    assert str(e.value) == (
        "thread 't' is of graph 'asker' and waits on node 'ask', which this graph ('other') "
        "does not have: resume it with graph 'asker'"
    )
    assert (e.value.thread_graph, e.value.graph) == ("asker", "other")
    # A graph of another name with the thread's nodes: refused too, the name kept.
    with pytest.raises(GraphMismatchError, match=r"'asker', not of this graph \('asker2'\)"):
        backend.graph(ask_graph(calls), name="asker2").invoke(None, thread_id="t", resume="y")
    # An unnamed graph with the thread's nodes: refused (a worker refuses it too).
    with pytest.raises(GraphMismatchError) as e:
        backend.graph(ask_graph(calls)).invoke(None, thread_id="t", resume="y")
    assert str(e.value) == (
        "thread 't' is of graph 'asker', not of this graph (unnamed): resume it with graph "
        "'asker' (workers match threads by this name)"
    )
    [info] = backend.graph(ask_graph(calls), name="asker").list_threads()
    assert (info.graph_name, info.status) == ("asker", "paused")
    assert calls == {"first": 1, "ask": 1}
    done = backend.graph(ask_graph(calls), name="asker").invoke(None, thread_id="t", resume="y")
    assert done.status == "done"
