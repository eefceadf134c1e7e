"""Resuming a thread with a graph that did not make it, when its values cannot even be read.

A thread's values may hold types that only its own graph's process registers (an agent's
``Message``, an application's dataclass). Another graph's process meets them as unregistered
types: that is a graph mismatch, reported as ``GraphMismatchError`` (from the decoding
error), not damage of the store. The thread's own graph, in a process that lacks the type,
still gets the decoding error naming the type.
"""

from __future__ import annotations

import dataclasses
import operator
import pathlib
from typing import Annotated, Any, TypedDict

import anyio
import pytest

from checkpoints import CorruptCheckpointError, SqliteCheckpointer
from checkpoints.serde import register
from checkpoints.serde import registry as serde_registry
from graphflow import END, START, GraphMismatchError, StateGraph, interrupt


@register(name="tests.graph_mismatch.Parcel")
@dataclasses.dataclass(frozen=True)
class Parcel:
    label: str


class Shipping(TypedDict, total=False):
    parcels: Annotated[list[Any], operator.add]
    answer: str


def shipping(name: str | None) -> StateGraph:
    def pack(state: Shipping) -> Shipping:
        return {"parcels": [Parcel("A-1")]}

    def confirm(state: Shipping) -> Shipping:
        return {"answer": str(interrupt("ship?"))}

    b = StateGraph(Shipping).add_node(pack).add_node(confirm)
    return b.add_edge(START, "pack").add_edge("pack", "confirm").add_edge("confirm", END)


def elsewhere() -> StateGraph:
    b = StateGraph(Shipping).add_node("other", lambda s: {"answer": "x"})
    return b.add_edge(START, "other").add_edge("other", END)


@pytest.fixture
def paused(tmp_path: pathlib.Path) -> pathlib.Path:
    """A file with thread 't' of graph 'shipping', paused at ``confirm``, holding a Parcel."""
    path = tmp_path / "gf.db"
    cp = SqliteCheckpointer(path)
    result = (
        shipping("shipping").compile(checkpointer=cp, name="shipping").invoke({}, thread_id="t")
    )
    assert result.status == "paused"
    anyio.run(cp.close)
    return path


def compiled(make: StateGraph, path: pathlib.Path, name: str | None) -> Any:
    return make.compile(checkpointer=SqliteCheckpointer(path), name=name)


@pytest.mark.parametrize("name", [None, "other"])
def test_another_graph_meeting_an_unregistered_type_gets_a_graph_mismatch(
    paused: pathlib.Path, monkeypatch: pytest.MonkeyPatch, name: str | None
) -> None:
    monkeypatch.delitem(serde_registry.by_name, "tests.graph_mismatch.Parcel")
    graph = compiled(elsewhere(), paused, name)
    with pytest.raises(GraphMismatchError) as e:
        graph.invoke(None, thread_id="t", resume="yes")
    assert (e.value.thread_graph, e.value.graph, e.value.nodes) == ("shipping", name, ("confirm",))
    assert "resume it with graph 'shipping'" in str(e.value)
    assert isinstance(e.value.__cause__, CorruptCheckpointError)
    assert "is not registered" in str(e.value.__cause__)
    monkeypatch.undo()  # the type is back: the thread's own graph resumes it, untouched
    done = compiled(shipping("shipping"), paused, "shipping").invoke(
        None, thread_id="t", resume="yes"
    )
    assert done.status == "done" and done.state["parcels"] == [Parcel("A-1")]


def test_the_threads_own_graph_without_the_type_gets_the_decoding_error(
    paused: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(serde_registry.by_name, "tests.graph_mismatch.Parcel")
    graph = compiled(shipping("shipping"), paused, "shipping")
    with pytest.raises(CorruptCheckpointError) as e:
        graph.invoke(None, thread_id="t", resume="yes")
    assert str(e.value).startswith(
        "cannot decode channel 'parcels' of thread 't': stored type "
        "'tests.graph_mismatch.Parcel' is not registered"
    )
    [info] = graph.list_threads()
    assert info.status == "paused"  # nothing was written: the lease was not taken
