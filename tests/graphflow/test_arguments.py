"""Text the API stores (thread ids, reasons, actors) is checked before anything is read or
written: a lone surrogate (what a terminal that is not UTF-8 hands over), a control
character in a thread id, the wrong type. Each is an ``InvalidArgumentError`` naming the
argument, and neither the store nor the evidence log changes."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import pytest

from checkpoints import SqliteCheckpointer
from graphflow import END, START, InvalidArgumentError, StateGraph, interrupt
from graphflow.auth import Decision

BAD = "bad\udcff"  # (sys.argv's form of the byte 0xff)


class State(TypedDict, total=False):
    answer: str


def build(path: Path) -> Any:
    g = StateGraph(State).add_node("ask", lambda s: {"answer": str(interrupt("ok?"))})
    return (
        g.add_edge(START, "ask").add_edge("ask", END).compile(checkpointer=SqliteCheckpointer(path))
    )


@pytest.fixture
def graph(tmp_path: Path) -> Any:
    g = build(tmp_path / "x.db")
    assert g.invoke({}, thread_id="t").status == "paused"
    return g


def files(path: Path) -> dict[str, bytes]:
    """The digest of every file of the store and its log (their WALs included; not the
    shared-memory index, which reads change)."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).digest()
        for p in sorted(path.iterdir())
        if not p.name.endswith("-shm")
    }


THREAD_CALLS: dict[str, Callable[[Any, Any], object]] = {
    "get_state": lambda g, t: g.get_state(t),
    "get_state_history": lambda g, t: g.get_state_history(t),
    "pending_pauses": lambda g, t: g.pending_pauses(t),
    "list_decisions": lambda g, t: g.list_decisions(t),
    "audit": lambda g, t: g.audit(t),
    "submit": lambda g, t: g.submit(t, resume="yes", by="alice"),
    "cancel": lambda g, t: g.cancel(t, reason="done"),
    "freeze": lambda g, t: g.freeze(t, reason="incident", by="secops"),
    "update_state": lambda g, t: g.update_state(t, {"answer": "x"}),
    "invoke": lambda g, t: g.invoke(None, thread_id=t, resume="yes"),
}


@pytest.mark.parametrize(
    "thread", [BAD, "a\nb", "x\x00", "", None, 5, "t" * 1001, "t\u202e1", "t\x9b"]
)
@pytest.mark.parametrize("call", sorted(THREAD_CALLS))
def test_a_bad_thread_id_is_refused_by_name(
    graph: Any, tmp_path: Path, call: str, thread: Any
) -> None:
    before = files(tmp_path)
    with pytest.raises(InvalidArgumentError, match="thread_id"):
        THREAD_CALLS[call](graph, thread)
    assert files(tmp_path) == before


TEXT_CALLS: dict[str, tuple[str, Callable[[Any], object]]] = {
    "cancel reason": ("reason", lambda g: g.cancel("t", reason=BAD)),
    "cancel blank reason": ("reason", lambda g: g.cancel("t", reason=" ")),
    "cancel by": ("principal", lambda g: g.cancel("t", reason="r", by=BAD)),
    "freeze reason": ("reason", lambda g: g.freeze("t", reason=BAD)),
    "freeze by": ("principal", lambda g: g.freeze("t", reason="r", by=object())),
    "submit by": ("principal", lambda g: g.submit("t", resume="yes", by=BAD)),
    "submit by of no kind": ("principal", lambda g: g.submit("t", resume="yes", by=object())),
    "submit reason": ("reason", lambda g: g.submit("t", resume="yes", reason=BAD)),
    "submit answer": ("cannot store", lambda g: g.submit("t", resume=BAD)),
    "decision by": ("by", lambda g: g.submit("t", decisions={"c": Decision.approve(by=BAD)})),
    "decision reason": (
        "reason",
        lambda g: g.submit("t", decisions={"c": Decision.deny(reason=BAD)}),
    ),
    "invoke principal": ("principal", lambda g: g.invoke(None, thread_id="t", principal=5)),
    # An approver id that would print as two lines of a trail, or that names no one
    "submit by with a newline": ("principal", lambda g: g.submit("t", resume="y", by="a\nb")),
    "submit blank by": ("principal", lambda g: g.submit("t", resume="y", by="  ")),
    "cancel by with NUL": ("principal", lambda g: g.cancel("t", reason="r", by="a\x00")),
    "invoke principal id": (
        "principal",
        lambda g: g.invoke(None, thread_id="t", resume="y", principal=BAD),
    ),
}


@pytest.mark.parametrize("case", sorted(TEXT_CALLS))
def test_text_that_cannot_be_stored_is_refused_before_anything_is_written(
    graph: Any, tmp_path: Path, case: str
) -> None:
    named, call = TEXT_CALLS[case]
    before = files(tmp_path)
    with pytest.raises(Exception, match=named) as caught:
        call(graph)
    assert type(caught.value).__name__ in ("InvalidArgumentError", "SerializationError")
    assert files(tmp_path) == before  # (no event in the log, no record in the store)
    assert graph.get_state("t").next == ("ask",)


@pytest.mark.parametrize(
    "by",
    ["  ", "bo\nb", "a\x00b", "x\t", "al\u202eice", "c1\x85", "a\u2028b", "alice\u200b",
     "ali\u200dce", "\ufeffbob"],  # (a zero-width character prints as "alice")
)  # fmt: skip
def test_a_decision_by_no_one_printable_is_refused_as_given(
    graph: Any, tmp_path: Path, by: str
) -> None:
    """Checked where a decision is given (``decisions=`` of submit and invoke), before
    anything is written; an answer stored by an earlier version is read as it was."""
    before = files(tmp_path)
    for decision in (Decision.approve(by=by), Decision.deny(reason="r", by=by)):
        with pytest.raises(InvalidArgumentError, match="decision 'c': by"):
            graph.submit("t", decisions={"c": decision})
        with pytest.raises(InvalidArgumentError, match="decision 'c': by"):
            graph.invoke(None, thread_id="t", decisions={"c": decision})
    assert files(tmp_path) == before


def test_a_thread_id_of_the_longest_length_is_taken(graph: Any) -> None:
    longest = "t" * 1000
    assert graph.invoke({}, thread_id=longest).status == "paused"
    assert longest in [t.thread_id for t in graph.list_threads()]


@pytest.mark.parametrize("limit", [-1, "x", True, 1.5])
def test_a_bad_history_limit_is_refused_by_name(graph: Any, limit: Any) -> None:
    """It was sliced as given: ``-1`` dropped the oldest snapshot, ``"x"`` a TypeError."""
    with pytest.raises(InvalidArgumentError, match="limit must be a non-negative int"):
        graph.get_state_history("t", limit=limit)


def test_a_history_limit_keeps_the_newest(graph: Any) -> None:
    every = graph.get_state_history("t")
    assert graph.get_state_history("t", limit=0) == []
    assert graph.get_state_history("t", limit=1) == every[:1]
