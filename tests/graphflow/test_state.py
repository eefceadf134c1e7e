"""State and history: get_state, get_state_history, update_state, time travel, threads.

API.md, "State and history" and "Pauses".
"""

import itertools
from collections import Counter
from datetime import datetime
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from checkpoints import MemoryCheckpointer
from graphflow import (
    END,
    START,
    CompiledGraph,
    GraphflowError,
    InvalidUpdateError,
    NodeError,
    StateGraph,
    StateSnapshot,
    TaskInfo,
    ThreadNotFoundError,
    interrupt,
)
from graphflow.reducers import append


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class State(BaseModel):
    log: Annotated[list[str], append] = []
    count: int = 0
    mode: str = ""


def logger(name: str, calls: Counter[str]) -> Any:
    def fn(state: State) -> dict[str, Any]:
        calls[name] += 1
        return {"log": [name]}

    fn.__name__ = name
    return fn


def abc(calls: Counter[str], **compile_kwargs: Any) -> CompiledGraph:
    b = StateGraph(State)
    for n in ("a", "b", "c"):
        b.add_node(n, logger(n, calls))
    b.add_edge(START, "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", END)
    return b.compile(checkpointer=MemoryCheckpointer(), **compile_kwargs)


def prep_ask_help(calls: Counter[str]) -> CompiledGraph:
    """prep -> (asker: interrupts, helper) -> END."""

    def asker(state: State) -> dict[str, Any]:
        calls["asker"] += 1
        return {"log": [f"asker:{interrupt('why?')}"]}

    b = StateGraph(State).add_node("prep", logger("prep", calls)).add_node(asker)
    b.add_node("helper", logger("helper", calls))
    b.add_edge(START, "prep").add_edge("prep", "asker").add_edge("prep", "helper")
    b.add_edge("asker", END).add_edge("helper", END)
    return b.compile(checkpointer=MemoryCheckpointer())


def _tasks(snap: StateSnapshot) -> dict[str, TaskInfo]:
    return {t.name: t for t in snap.tasks}


# -- get_state --------------------------------------------------------------------------------
def test_get_state_of_a_paused_thread() -> None:
    calls: Counter[str] = Counter()
    graph = prep_ask_help(calls)
    result = graph.invoke({"count": 3}, thread_id="t")
    snap = graph.get_state("t")
    assert isinstance(snap, StateSnapshot)
    # The paused step's writes are not applied: the state is the one its tasks saw.
    assert snap.values == State(log=["prep"], count=3)
    assert snap.next == ("asker", "helper")
    tasks = _tasks(snap)
    assert set(tasks) == {"asker", "helper"}
    assert tasks["asker"].status == "paused"
    assert tasks["helper"].status == "completed"
    assert tasks["asker"].pauses == tuple(result.pauses)
    assert tasks["helper"].pauses == ()
    assert tasks["helper"].attempts == 1
    assert tasks["asker"].error is None
    assert len({t.id for t in snap.tasks}) == 2
    assert snap.pauses == tuple(result.pauses)
    assert snap.checkpoint_id == result.checkpoint_id
    assert isinstance(snap.created_at, datetime)

    history = graph.get_state_history("t")
    assert history[0].checkpoint_id == snap.checkpoint_id
    assert snap.parent_checkpoint_id == history[1].checkpoint_id
    assert snap.step == history[1].step + 1
    assert history[1].next == ("prep",)
    assert _tasks(history[1])["prep"].status == "completed"


def test_get_state_of_a_finished_thread() -> None:
    calls: Counter[str] = Counter()
    graph = abc(calls)
    result = graph.invoke({}, thread_id="t")
    snap = graph.get_state("t")
    assert snap.values == State(log=["a", "b", "c"])
    assert snap.next == ()
    assert snap.tasks == ()
    assert snap.pauses == ()
    assert snap.checkpoint_id == result.checkpoint_id


def test_get_state_task_status_failed() -> None:
    calls: Counter[str] = Counter()

    def flaky(state: State) -> dict[str, Any]:
        calls["flaky"] += 1
        raise ValueError("flaky broke")

    b = StateGraph(State).add_node(flaky).add_node("ok", logger("ok", calls))
    b.add_edge(START, "ok").add_edge(START, "flaky").add_edge("ok", END).add_edge("flaky", END)
    graph = b.compile(checkpointer=MemoryCheckpointer())
    # The error type itself is tested in test_run.py / test_interrupts.py.
    with pytest.raises((NodeError, BaseExceptionGroup)):
        graph.invoke({}, thread_id="t")
    tasks = _tasks(graph.get_state("t"))
    assert tasks["ok"].status == "completed"
    assert tasks["flaky"].status == "failed"
    assert tasks["flaky"].attempts == 1
    assert tasks["flaky"].error is not None
    assert "ValueError" in tasks["flaky"].error
    assert "flaky broke" in tasks["flaky"].error
    assert tasks["ok"].error is None
    assert graph.get_state("t").pauses == ()
    assert [t.status for t in graph.list_threads()] == ["failed"]

    with pytest.raises((NodeError, BaseExceptionGroup)):
        graph.invoke(None, thread_id="t")
    tasks = _tasks(graph.get_state("t"))
    assert (tasks["flaky"].status, tasks["flaky"].attempts) == ("failed", 2)
    assert (tasks["ok"].status, tasks["ok"].attempts) == ("completed", 1)
    assert calls == {"ok": 1, "flaky": 2}


def test_get_state_task_status_pending_after_update_as_node() -> None:
    calls: Counter[str] = Counter()
    graph = prep_ask_help(calls)
    graph.update_state("fresh", {"count": 1}, as_node="prep")
    snap = graph.get_state("fresh")
    assert snap.next == ("asker", "helper")
    assert {t.name: (t.status, t.attempts) for t in snap.tasks} == {
        "asker": ("pending", 0),
        "helper": ("pending", 0),
    }
    assert calls == {}


def test_get_state_of_unknown_thread_is_none() -> None:
    graph = abc(Counter())
    assert graph.get_state("nobody") is None
    graph.invoke({}, thread_id="somebody")
    assert graph.get_state("nobody") is None


def test_get_state_at_an_older_checkpoint() -> None:
    graph = abc(Counter())
    graph.invoke({}, thread_id="t")
    history = graph.get_state_history("t")
    for snap in history:
        old = graph.get_state("t", checkpoint_id=snap.checkpoint_id)
        assert old.values == snap.values
        assert old.next == snap.next
        assert old.checkpoint_id == snap.checkpoint_id


@pytest.mark.anyio
async def test_async_state_api() -> None:
    graph = abc(Counter())
    await graph.ainvoke({}, thread_id="t")
    snap = await graph.aget_state("t")
    assert snap.values.log == ["a", "b", "c"]
    history = await graph.aget_state_history("t")
    assert [h.next for h in history] == [(), ("c",), ("b",), ("a",)]
    assert history[0].checkpoint_id == snap.checkpoint_id
    threads = await graph.alist_threads()
    assert [(t.thread_id, t.status) for t in threads] == [("t", "done")]


# -- history ----------------------------------------------------------------------------------
def test_history_is_newest_first_with_parent_links() -> None:
    graph = abc(Counter())
    result = graph.invoke({"count": 1}, thread_id="t")
    history = graph.get_state_history("t")
    assert len(history) == 4  # input, after a, after b, after c
    assert history[0].checkpoint_id == result.checkpoint_id
    assert [h.next for h in history] == [(), ("c",), ("b",), ("a",)]
    assert [h.values.log for h in history] == [["a", "b", "c"], ["a", "b"], ["a"], []]
    for newer, older in itertools.pairwise(history):
        assert newer.parent_checkpoint_id == older.checkpoint_id
        assert newer.step > older.step
        assert newer.created_at >= older.created_at
    assert history[-1].parent_checkpoint_id is None
    assert len({h.checkpoint_id for h in history}) == 4

    assert [h.checkpoint_id for h in graph.get_state_history("t", limit=2)] == [
        history[0].checkpoint_id,
        history[1].checkpoint_id,
    ]


def test_history_spans_runs_of_a_thread() -> None:
    graph = abc(Counter())
    graph.invoke({}, thread_id="t")
    first = graph.get_state_history("t")
    graph.invoke({"count": 2}, thread_id="t")
    second = graph.get_state_history("t")
    assert len(second) == 2 * len(first)
    assert [h.checkpoint_id for h in second[len(first) :]] == [h.checkpoint_id for h in first]
    assert second[len(first) - 1].parent_checkpoint_id == first[0].checkpoint_id
    assert second[0].values.log == ["a", "b", "c", "a", "b", "c"]


def test_history_of_unknown_thread_is_empty() -> None:
    assert abc(Counter()).get_state_history("nobody") == []


# -- update_state -----------------------------------------------------------------------------
def test_update_state_without_as_node_applies_reducers_and_keeps_next() -> None:
    calls: Counter[str] = Counter()
    graph = abc(calls, interrupt_before=["b"])
    paused = graph.invoke({}, thread_id="t")
    old_head = graph.get_state("t").checkpoint_id
    assert old_head == paused.checkpoint_id

    new_id = graph.update_state("t", {"log": ["patched"], "count": 9})
    snap = graph.get_state("t")
    assert isinstance(new_id, str)
    assert snap.checkpoint_id == new_id
    assert snap.parent_checkpoint_id == old_head
    assert snap.values == State(log=["a", "patched"], count=9)
    assert snap.next == ("b",)
    assert calls == {"a": 1}
    history = graph.get_state_history("t")
    assert history[0].checkpoint_id == new_id
    assert history[1].checkpoint_id == old_head


def test_update_state_then_continue_runs_with_the_new_values() -> None:
    calls: Counter[str] = Counter()
    seen: list[int] = []

    def b(state: State) -> dict[str, Any]:
        seen.append(state.count)
        return {"log": ["b"]}

    builder = StateGraph(State).add_node("a", logger("a", calls)).add_node(b)
    builder.add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
    graph = builder.compile(checkpointer=MemoryCheckpointer(), interrupt_before=["b"])
    graph.invoke({}, thread_id="t")
    graph.update_state("t", {"count": 5})
    result = graph.invoke(None, thread_id="t")
    assert result.status == "done"
    assert result.state == State(log=["a", "b"], count=5)
    assert seen == [5]
    assert calls == {"a": 1}


def test_update_state_at_a_before_gate_then_one_continue_runs_the_node() -> None:
    calls: Counter[str] = Counter()
    graph = abc(calls, interrupt_before=["b"])
    graph.invoke({}, thread_id="t")
    graph.update_state("t", {"count": 5})
    result = graph.invoke(None, thread_id="t")
    assert result.status == "done"
    assert result.state == State(log=["a", "b", "c"], count=5)
    assert calls == {"a": 1, "b": 1, "c": 1}


def test_update_state_as_node_follows_that_nodes_edges() -> None:
    calls: Counter[str] = Counter()
    graph = abc(calls)
    graph.invoke({}, thread_id="t")
    assert calls == {"a": 1, "b": 1, "c": 1}
    graph.update_state("t", {"log": ["manual"]}, as_node="a")
    snap = graph.get_state("t")
    assert snap.next == ("b",)
    assert snap.values.log == ["a", "b", "c", "manual"]
    assert snap.metadata.get("as_node") == "a"

    result = graph.invoke(None, thread_id="t")
    assert result.status == "done"
    assert result.state.log == ["a", "b", "c", "manual", "b", "c"]
    assert calls == {"a": 1, "b": 2, "c": 2}


def test_update_state_as_last_node_finishes_the_thread() -> None:
    graph = abc(Counter(), interrupt_before=["c"])
    graph.invoke({}, thread_id="t")
    graph.update_state("t", {"log": ["c-by-hand"]}, as_node="c")
    snap = graph.get_state("t")
    assert snap.next == ()
    assert snap.values.log == ["a", "b", "c-by-hand"]
    assert [t.status for t in graph.list_threads()] == ["done"]


def test_update_state_rejects_unknown_keys_and_nodes() -> None:
    graph = abc(Counter())
    graph.invoke({}, thread_id="t")
    head = graph.get_state("t").checkpoint_id
    with pytest.raises(InvalidUpdateError) as info:
        graph.update_state("t", {"bogus": 1})
    assert info.value.key == "bogus"
    with pytest.raises(GraphflowError, match="nope"):
        graph.update_state("t", {"count": 1}, as_node="nope")
    assert graph.get_state("t").checkpoint_id == head


# -- time travel and forks --------------------------------------------------------------------
def test_invoke_from_an_older_checkpoint_reruns_from_there_and_keeps_history() -> None:
    calls: Counter[str] = Counter()
    graph = abc(calls)
    graph.invoke({"count": 1}, thread_id="t")
    original = graph.get_state_history("t")
    [at_b] = [h for h in original if h.next == ("b",)]

    result = graph.invoke(None, thread_id="t", checkpoint_id=at_b.checkpoint_id)
    assert result.status == "done"
    assert result.state == State(log=["a", "b", "c"], count=1)
    assert calls == {"a": 1, "b": 2, "c": 2}

    after = graph.get_state_history("t")
    after_ids = [h.checkpoint_id for h in after]
    assert set(h.checkpoint_id for h in original) <= set(after_ids)
    assert after[0].checkpoint_id == result.checkpoint_id
    # The new head descends from the forked checkpoint.
    by_id = {h.checkpoint_id: h for h in after}
    lineage, cur = [], after[0]
    while cur.parent_checkpoint_id is not None:
        lineage.append(cur.parent_checkpoint_id)
        cur = by_id[cur.parent_checkpoint_id]
    assert at_b.checkpoint_id in lineage
    # Older checkpoints are intact.
    old = graph.get_state("t", checkpoint_id=at_b.checkpoint_id)
    assert old.values == State(log=["a"], count=1)
    assert old.next == ("b",)
    assert graph.get_state("t", checkpoint_id=original[0].checkpoint_id).values.log == [
        "a",
        "b",
        "c",
    ]


def test_fork_with_new_input_from_an_older_checkpoint() -> None:
    calls: Counter[str] = Counter()
    graph = abc(calls)
    graph.invoke({"count": 1}, thread_id="t")
    [at_b] = [h for h in graph.get_state_history("t") if h.next == ("b",)]
    # A new input starts a new run from START on the state of that checkpoint.
    result = graph.invoke({"count": 7}, thread_id="t", checkpoint_id=at_b.checkpoint_id)
    assert result.status == "done"
    assert result.state.count == 7
    assert result.state.log == ["a", "a", "b", "c"]
    assert calls == {"a": 2, "b": 2, "c": 2}
    assert graph.get_state("t", checkpoint_id=at_b.checkpoint_id).values.log == ["a"]


def test_time_travel_to_before_a_pause_replays_the_pause() -> None:
    calls: Counter[str] = Counter()
    graph = prep_ask_help(calls)
    graph.invoke({}, thread_id="t")
    done = graph.invoke(None, thread_id="t", resume="first")
    assert done.state.log == ["prep", "asker:first", "helper"]
    [at_split] = [h for h in graph.get_state_history("t") if h.next == ("asker", "helper")]
    again = graph.invoke(None, thread_id="t", checkpoint_id=at_split.checkpoint_id)
    assert again.status == "paused"
    assert [p.node for p in again.pauses] == ["asker"]
    done2 = graph.invoke(None, thread_id="t", resume="second")
    assert done2.state.log == ["prep", "asker:second", "helper"]


def test_unknown_checkpoint_id_is_an_error() -> None:
    graph = abc(Counter())
    graph.invoke({}, thread_id="t")
    with pytest.raises(GraphflowError, match="no-such-checkpoint"):
        graph.get_state("t", checkpoint_id="no-such-checkpoint")


# -- threads and pending pauses ---------------------------------------------------------------
def _router_graph(calls: Counter[str]) -> CompiledGraph:
    def ask1(state: State) -> dict[str, Any]:
        calls["ask1"] += 1
        return {"log": [f"ask1:{interrupt('1?')}"]}

    def ask_l(state: State) -> dict[str, Any]:
        return {"log": [f"L:{interrupt('L?')}"]}

    def ask_r(state: State) -> dict[str, Any]:
        return {"log": [f"R:{interrupt('R?')}"]}

    def fail(state: State) -> dict[str, Any]:
        raise RuntimeError("always")

    def route(state: State) -> Any:
        return {"done": "noop", "one": "ask1", "two": ["ask_l", "ask_r"], "fail": "fail"}[
            state.mode
        ]

    b = StateGraph(State).add_node(ask1).add_node(ask_l).add_node(ask_r).add_node(fail)
    b.add_node("noop", logger("noop", calls))
    b.add_conditional_edges(START, route)
    for n in ("ask1", "ask_l", "ask_r", "fail", "noop"):
        b.add_edge(n, END)
    return b.compile(checkpointer=MemoryCheckpointer())


def test_list_threads_by_status_with_pending_pause_counts() -> None:
    calls: Counter[str] = Counter()
    graph = _router_graph(calls)
    assert graph.list_threads() == []
    assert graph.invoke({"mode": "done"}, thread_id="d1").status == "done"
    assert len(graph.invoke({"mode": "one"}, thread_id="p1").pauses) == 1
    assert len(graph.invoke({"mode": "two"}, thread_id="p2").pauses) == 2
    with pytest.raises((NodeError, BaseExceptionGroup)):
        graph.invoke({"mode": "fail"}, thread_id="f1")
    graph.invoke({"mode": "one"}, thread_id="c1")
    graph.cancel("c1", reason="test")

    threads = {t.thread_id: t for t in graph.list_threads()}
    assert {k: t.status for k, t in threads.items()} == {
        "d1": "done",
        "p1": "paused",
        "p2": "paused",
        "f1": "failed",
        "c1": "cancelled",
    }
    assert {k: t.pending_pauses for k, t in threads.items()} == {
        "d1": 0,
        "p1": 1,
        "p2": 2,
        "f1": 0,
        "c1": 0,
    }
    assert all(isinstance(t.updated_at, datetime) for t in threads.values())

    def ids(status: Any) -> set[str]:
        return {t.thread_id for t in graph.list_threads(status=status)}

    assert ids("paused") == {"p1", "p2"}
    assert ids("done") == {"d1"}
    assert ids("failed") == {"f1"}
    assert ids("cancelled") == {"c1"}
    assert ids("running") == set()

    graph.invoke(None, thread_id="p1", resume="yes")
    assert ids("paused") == {"p2"}
    assert ids("done") == {"d1", "p1"}
    [p2] = graph.list_threads(status="paused")
    assert p2.pending_pauses == 2


def test_pending_pauses_of_a_thread() -> None:
    calls: Counter[str] = Counter()
    graph = _router_graph(calls)
    result = graph.invoke({"mode": "two"}, thread_id="p2")
    pending = graph.pending_pauses("p2")
    assert pending == result.pauses
    assert sorted(p.node for p in pending) == ["ask_l", "ask_r"]
    assert sorted(p.value for p in pending) == ["L?", "R?"]
    assert {p.thread_id for p in pending} == {"p2"}
    assert len({p.id for p in pending}) == 2

    left = next(p for p in pending if p.node == "ask_l")
    graph.invoke(None, thread_id="p2", resume={left.id: "x"})
    assert [p.node for p in graph.pending_pauses("p2")] == ["ask_r"]

    graph.invoke({"mode": "done"}, thread_id="d1")
    assert graph.pending_pauses("d1") == []
    with pytest.raises(ThreadNotFoundError):
        graph.pending_pauses("nobody")


def _extend_in_place(current: list[Any], update: list[Any]) -> list[Any]:
    current.extend(update)
    return current


def _update_in_place(current: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    current.update(update)
    return current


class InPlace(BaseModel):
    log: Annotated[list[str], _extend_in_place] = []
    seen: Annotated[dict[str, int], _update_in_place] = {}


def test_a_reducer_that_changes_the_value_in_place_loses_nothing(store: Any) -> None:
    """``a.extend(b); return a``: the run returned every item, yet the stored state (read
    in the same process or another) had lost the steps' items, and so had every snapshot
    of the history: the writes were computed against the changed value."""
    b = StateGraph(InPlace)
    b.add_node("a", lambda s: {"log": ["a"], "seen": {"a": 1}})
    b.add_node("b", lambda s: {"log": ["b"], "seen": {"b": 2}})
    graph = b.add_edge(START, "a").add_edge("a", "b").add_edge("b", END).compile(checkpointer=store)
    done = graph.invoke({"log": ["in"]}, thread_id="t")
    assert done.state.log == ["in", "a", "b"] and done.state.seen == {"a": 1, "b": 2}
    snap = graph.get_state("t")
    assert snap is not None and (snap.values.log, snap.values.seen) == (
        done.state.log,
        done.state.seen,
    )
    history = [s.values.log for s in graph.get_state_history("t")]
    assert history[:3] == [["in", "a", "b"], ["in", "a"], ["in"]]
