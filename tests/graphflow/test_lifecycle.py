"""A thread's lifecycle around errors, and arguments checked before anything is written."""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any, TypedDict

import anyio
import pytest

from checkpoints import (
    Checkpointer,
    CorruptCheckpointError,
    MemoryCheckpointer,
    SerializationError,
    SqliteCheckpointer,
    StorePathError,
)
from graphflow import (
    END,
    START,
    InvalidArgumentError,
    NodeError,
    RecursionLimitError,
    StateGraph,
    ThreadBusyError,
    ThreadCancelledError,
    ThreadFinishedError,
    ThreadNotFoundError,
    interrupt,
)


class S(TypedDict, total=False):
    x: Any
    n: int


def _chain(store: Checkpointer | None, second: Any) -> Any:
    b = StateGraph(S).add_node("a", lambda s: {"n": 1}).add_node("b", second)
    b.add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
    return b.compile(checkpointer=store)


def _status(g: Any, thread: str) -> str:
    (info,) = [t for t in g.list_threads() if t.thread_id == thread]
    return str(info.status)


# -- a run that stops on an error leaves the thread failed, never running ---------------------
def test_an_unstorable_node_write_leaves_the_thread_failed(store: Checkpointer) -> None:
    g = _chain(store, lambda s: {"x": threading.Lock()})
    with pytest.raises(SerializationError, match="'x'"):
        g.invoke({}, thread_id="t")
    assert _status(g, "t") == "failed"
    assert g.get_state("t").next == ("b",)  # the last committed checkpoint is kept


def test_an_unstorable_interrupt_value_leaves_the_thread_failed(store: Checkpointer) -> None:
    def ask(state: S) -> dict[str, Any]:
        interrupt(threading.Lock())
        return {}

    g = _chain(store, ask)
    with pytest.raises(SerializationError):
        g.invoke({}, thread_id="t")
    assert _status(g, "t") == "failed" and g.pending_pauses("t") == []


def test_the_recursion_limit_leaves_the_thread_failed_and_a_larger_one_continues(
    store: Checkpointer,
) -> None:
    b = StateGraph(S).add_node("a", lambda s: {"n": s.get("n", 0) + 1})
    b.add_edge(START, "a").add_conditional_edges("a", lambda s: END if s["n"] >= 5 else "a")
    g = b.compile(checkpointer=store)
    with pytest.raises(RecursionLimitError):
        g.invoke({"n": 0}, thread_id="t", recursion_limit=2)
    assert _status(g, "t") == "failed"
    res = g.invoke(None, thread_id="t", recursion_limit=10)
    assert res.status == "done" and res.state["n"] == 5 and _status(g, "t") == "done"


def test_a_failed_resume_leaves_a_paused_thread_paused(store: Checkpointer) -> None:
    g = _chain(store, lambda s: {"x": interrupt("ok?")})
    g.invoke({}, thread_id="t")
    with pytest.raises(SerializationError):
        g.invoke(None, thread_id="t", resume=threading.Lock())
    assert _status(g, "t") == "paused" and len(g.pending_pauses("t")) == 1


# -- cancel -----------------------------------------------------------------------------------
def test_cancel_refuses_a_finished_an_unknown_and_a_cancelled_thread(store: Checkpointer) -> None:
    g = _chain(store, lambda s: {"x": 1})
    g.invoke({}, thread_id="t")
    with pytest.raises(ThreadFinishedError, match="'t' is done"):
        g.cancel("t", reason="x")
    assert _status(g, "t") == "done"
    with pytest.raises(ThreadNotFoundError):
        g.cancel("nope", reason="x")
    p = _chain(store, lambda s: {"x": interrupt("?")})
    p.invoke({}, thread_id="p")
    p.cancel("p", reason="no longer needed")
    assert _status(p, "p") == "cancelled"
    with pytest.raises(ThreadCancelledError):
        p.cancel("p", reason="again")


def test_a_cancelled_threads_state_has_nothing_pending(store: Checkpointer) -> None:
    p = _chain(store, lambda s: {"x": interrupt("?")})
    p.invoke({}, thread_id="p")
    [pause] = p.pending_pauses("p")
    p.cancel("p", reason="no longer needed", by="ops")
    snap = p.get_state("p")
    assert (snap.next, snap.tasks, snap.pauses) == ((), (), ())  # as pending_pauses says
    assert p.pending_pauses("p") == []
    assert snap.metadata["source"] == "cancel"
    assert snap.metadata["cancelled"]["pauses"] == [pause.id]
    before = p.get_state_history("p")[1]  # the checkpoint it waited at keeps its pause
    assert before.next and [q.id for q in before.pauses] == [pause.id]


# -- arguments are checked before anything is written ---------------------------------------
@pytest.mark.parametrize("ttl", [0, -1, math.nan, math.inf, "5", True, None])
def test_a_lease_ttl_that_is_not_a_positive_number_is_refused_at_compile(ttl: Any) -> None:
    b = StateGraph(S).add_node("a", lambda s: {}).add_edge(START, "a").add_edge("a", END)
    with pytest.raises(InvalidArgumentError, match="lease_ttl"):
        b.compile(checkpointer=MemoryCheckpointer(), lease_ttl=ttl)


@pytest.mark.parametrize("limit", ["5", None, 0, -3, True, 2.5])
def test_a_bad_recursion_limit_is_refused_before_anything_is_written(
    store: Checkpointer, limit: Any
) -> None:
    g = _chain(store, lambda s: {})
    with pytest.raises(InvalidArgumentError, match="recursion_limit"):
        g.invoke({}, thread_id="t", recursion_limit=limit)
    with pytest.raises(InvalidArgumentError, match="recursion_limit"):
        list(g.stream({}, thread_id="t", recursion_limit=limit))
    assert g.list_threads() == []


def test_a_thread_id_that_is_not_valid_text_is_refused(store: Checkpointer) -> None:
    g = _chain(store, lambda s: {})
    with pytest.raises(InvalidArgumentError, match="thread_id"):
        g.invoke({}, thread_id="bad\udc80id")
    assert g.list_threads() == []


def test_list_threads_refuses_an_unknown_status(store: Checkpointer) -> None:
    g = _chain(store, lambda s: {})
    with pytest.raises(InvalidArgumentError, match="'bogus'"):
        g.list_threads(status="bogus")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'bogus'"):
        g.count_threads(status="bogus")  # type: ignore[arg-type]


def _asking(store: Checkpointer) -> Any:
    b = StateGraph(S).add_node("ask", lambda s: {"x": interrupt("ok?")})
    return b.add_edge(START, "ask").add_edge("ask", END).compile(checkpointer=store)


def test_threads_are_paged_in_thread_id_order_and_counted(store: Checkpointer) -> None:
    g = _asking(store)
    ids = ["t5", "t1", "t10", "a", "t3", "b2", "t2"]
    for tid in ids:
        assert g.invoke({}, thread_id=tid).status == "paused"
    g.cancel("t3", reason="not needed")
    assert [t.thread_id for t in g.list_threads()][:2] == ["t3", "t2"]  # newest first, as before
    pages = [g.list_threads(limit=3)]
    while len(pages[-1]) == 3:
        pages.append(g.list_threads(limit=3, after=pages[-1][-1].thread_id))
    assert [[t.thread_id for t in page] for page in pages] == [
        ["a", "b2", "t1"], ["t10", "t2", "t3"], ["t5"],
    ]  # fmt: skip
    assert [t.thread_id for t in g.list_threads("paused", after="t10")] == ["t2", "t5"]
    assert (g.count_threads(), g.count_threads("paused"), g.count_threads("done")) == (7, 6, 0)

    async def from_async() -> tuple[list[str], int]:
        page = await g.alist_threads("cancelled", limit=5)
        return [t.thread_id for t in page], await g.acount_threads("cancelled")

    assert anyio.run(from_async) == (["t3"], 1)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"limit": 0}, "limit"), ({"limit": -2}, "limit"), ({"limit": True}, "limit"),
        ({"limit": "10"}, "limit"), ({"after": 5}, "after"), ({"after": "bad\udc80id"}, "after"),
        ({"status": "paused", "limit": 1.5}, "limit"),
    ],
)  # fmt: skip
def test_a_bad_page_is_refused_before_the_store_is_touched(
    tmp_path: Path, arguments: dict[str, Any], named: str
) -> None:
    path = tmp_path / "not-a-store.db"
    path.write_bytes(b"not a checkpoint store " * 100)
    store = SqliteCheckpointer(path)
    g = _asking(store)
    with pytest.raises(InvalidArgumentError, match=named) as err:
        g.list_threads(**arguments)
    assert repr(arguments[named]) in str(err.value)
    with pytest.raises(StorePathError):  # what touching it would have said
        g.list_threads(limit=1)
    anyio.run(store.close)


# -- messages say what can be done here ------------------------------------------------------
def _boom(state: S) -> dict[str, Any]:
    raise ValueError("boom")


def test_node_error_advice_depends_on_whether_the_thread_is_kept(store: Checkpointer) -> None:
    with pytest.raises(NodeError) as kept:
        _chain(store, _boom).invoke({}, thread_id="t")
    assert "invoke(None, thread_id='t')" in str(kept.value)
    with pytest.raises(NodeError) as lost:
        _chain(None, _boom).invoke({})
    assert "invoke(None" not in str(lost.value) and "run the graph again" in str(lost.value)


def test_the_loser_of_a_resume_race_is_told_to_look_before_answering_again() -> None:
    e = ThreadBusyError("t", "host:1:ab", answering=True)
    assert "pending_pauses" in str(e) and "try again" not in str(e)
    assert "try again" in str(ThreadBusyError("t", "host:1:ab"))


def test_damage_found_at_setup_names_the_thread_in_every_call(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    cp = SqliteCheckpointer(db)
    g = _chain(cp, lambda s: {"x": interrupt("?")})
    g.invoke({}, thread_id="t")
    anyio.run(cp.close)
    data = bytearray(db.read_bytes())
    data[4096:] = bytes(len(data) - 4096)  # every page but the first (the schema) is zeros
    db.write_bytes(bytes(data))
    g = _chain(SqliteCheckpointer(db), lambda s: {})
    calls = {
        "get_state": lambda: g.get_state("t"),
        "pending_pauses": lambda: g.pending_pauses("t"),
        "get_state_history": lambda: g.get_state_history("t"),
        "submit": lambda: g.submit("t", resume="x"),
        "cancel": lambda: g.cancel("t", reason="x"),
        "list_decisions": lambda: g.list_decisions("t"),
        "invoke": lambda: g.invoke(None, thread_id="t", resume="x"),
    }
    for name, call in calls.items():
        with pytest.raises(CorruptCheckpointError) as err:
            call()
        assert err.value.thread_id == "t" and "'t'" in str(err.value), name


def test_a_thread_waiting_for_invoke_none_takes_a_new_input_too(store: Checkpointer) -> None:
    """After update_state(as_node=...) on a done thread, the thread has work but no pause."""
    g = _chain(store, lambda s: {"x": 1})
    g.invoke({}, thread_id="t")
    g.update_state("t", {"n": 5}, as_node="a")
    assert g.pending_pauses("t") == [] and g.get_state("t").next == ("b",)
    assert g.invoke({"n": 7}, thread_id="t").state == {"n": 1, "x": 1}
