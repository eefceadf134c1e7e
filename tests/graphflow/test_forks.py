"""Forks: running a thread again from any checkpoint its history lists (API.md, "Running":
``checkpoint_id``), on both backends, leaves every branch of the thread readable.

A fork shares the stored values of the checkpoint it starts from; list channels are stored
as chains of appended items, and two branches must never extend one chain.
"""

import pathlib
from collections.abc import Iterator
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel

from checkpoints import MemoryCheckpointer, SqliteCheckpointer
from graphflow import END, START, CompiledGraph, Send, StateGraph
from graphflow.reducers import append


class State(BaseModel):
    log: Annotated[list[str], append] = []
    items: Annotated[list[str], append] = []
    count: int = 0


def build() -> StateGraph:
    """START -> (a -> a2, b) -> join j -> Send fan-out to w (x3) -> z -> END.

    ``b`` finishes a step before ``a2``, so one checkpoint holds a half-filled join barrier.
    """
    b = StateGraph(State)
    b.add_node("a", lambda s: {"log": ["a"], "count": s.count + 1})
    b.add_node("a2", lambda s: {"log": ["a2"]})
    b.add_node("b", lambda s: {"log": ["b"]})
    b.add_node("j", lambda s: {"log": ["j"]})
    b.add_node("w", lambda arg: {"items": [f"w{arg['n']}"]})
    b.add_node("z", lambda s: {"log": ["z"], "count": s.count * 10})
    b.add_edge(START, "a").add_edge(START, "b").add_edge("a", "a2")
    b.add_edge(["a2", "b"], "j")
    b.add_conditional_edges("j", lambda s: [Send("w", {"n": i}) for i in (1, 2, 3)])
    return b.add_edge("w", "z").add_edge("z", END)


FINAL = State(log=["in", "a", "b", "a2", "j", "z"], items=["w1", "w2", "w3"], count=20)


@pytest.fixture(params=["memory", "sqlite"])
def graph(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[CompiledGraph]:
    if request.param == "memory":
        yield build().compile(checkpointer=MemoryCheckpointer())
        return
    cp = SqliteCheckpointer(tmp_path / "forks.db")
    yield build().compile(checkpointer=cp)
    anyio.run(cp.close)


def _readable(graph: CompiledGraph, tid: str) -> dict[str, Any]:
    """Every snapshot of the thread loads; return checkpoint id -> values."""
    head = graph.get_state(tid)
    assert head is not None
    history = graph.get_state_history(tid)
    assert history[0].checkpoint_id == head.checkpoint_id
    return {h.checkpoint_id: h.values for h in history}


def test_a_fork_from_every_checkpoint_runs_to_the_end_and_keeps_the_thread_readable(
    graph: CompiledGraph,
) -> None:
    assert graph.invoke({"log": ["in"], "count": 1}, thread_id="t").state == FINAL
    original = graph.get_state_history("t")
    assert len(original) == 6  # input, after (a, b), (a2), (j), (w x3), (z)
    assert original[-1].step == -1
    assert any(h.next == ("a2",) for h in original)  # the half-filled join barrier
    assert any(h.next == ("w", "w", "w") for h in original)
    before = {h.checkpoint_id: h.values for h in original}

    for snap in reversed(original):  # the first checkpoint first: it broke the thread for good
        result = graph.invoke(None, thread_id="t", checkpoint_id=snap.checkpoint_id)
        assert result.status == "done"
        assert result.state == FINAL, snap.next
        values = _readable(graph, "t")
        assert graph.get_state("t").values == FINAL
        for ck, v in before.items():  # older checkpoints are intact
            assert values[ck] == v

        # The same checkpoint forked again, with a new input (a new run from START on its
        # state): the same end as a new thread given that state as its input.
        old = snap.values
        fresh = f"fresh-{snap.step}-{len(values)}"
        seed = {"log": [*old.log, "again"], "items": old.items, "count": old.count}
        expected = graph.invoke(seed, thread_id=fresh).state
        again = graph.invoke({"log": ["again"]}, thread_id="t", checkpoint_id=snap.checkpoint_id)
        assert again.state == expected
        values = _readable(graph, "t")
        for ck, v in before.items():
            assert values[ck] == v

    # The thread takes new input and continues its latest branch.
    last = graph.invoke({"log": ["more"]}, thread_id="t")
    assert last.status == "done"
    assert last.state.log[-6:] == ["more", "a", "b", "a2", "j", "z"]
    _readable(graph, "t")


def test_an_update_fork_from_every_checkpoint_keeps_the_thread_readable(
    graph: CompiledGraph,
) -> None:
    """``update_state(..., checkpoint_id=...)`` forks with modified state; the step of
    (a, b) had two writers, so that checkpoint needs ``as_node``."""
    graph.invoke({"log": ["in"], "count": 1}, thread_id="t")
    original = graph.get_state_history("t")
    before = {h.checkpoint_id: h.values for h in original}
    for snap in reversed(original):
        as_node = "b" if snap.next == ("a2",) else None  # b's edge: only the join, half full
        new_id = graph.update_state(
            "t", {"count": 100}, as_node=as_node, checkpoint_id=snap.checkpoint_id
        )
        head = graph.get_state("t")
        assert (head.checkpoint_id, head.parent_checkpoint_id) == (new_id, snap.checkpoint_id)
        assert head.values == snap.values.model_copy(update={"count": 100})
        assert head.next == (() if as_node else snap.next)
        values = _readable(graph, "t")
        if as_node:
            continue
        done = graph.invoke(None, thread_id="t")
        count = 100 + ("a" not in snap.values.log)
        count *= 10 if "z" not in snap.values.log else 1
        assert done.state == FINAL.model_copy(update={"count": count})
        values = _readable(graph, "t")
        for ck, v in before.items():
            assert values[ck] == v
