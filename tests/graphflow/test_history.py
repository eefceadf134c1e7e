"""History keeps what happened (API.md "State and history", "Pauses"): every snapshot holds
the pauses raised at it (nested ones too) with their answers, what made the checkpoint
(``metadata["source"]``) and each task's update (``TaskInfo.result``). Damage found while
reading any of it is a ``CorruptCheckpointError`` naming the thread.
"""

import pathlib
import shutil
import sqlite3
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel

from checkpoints import CorruptCheckpointError, MemoryCheckpointer, SqliteCheckpointer
from graphflow import (
    END,
    START,
    CompiledGraph,
    StateGraph,
    StateSnapshot,
    ToolConfirmationPause,
    interrupt,
)
from graphflow.agents import (
    Agent,
    AgentNode,
    MessagesState,
    ModelResponse,
    ScriptedModel,
    ToolCall,
    tool,
)
from graphflow.reducers import append, merge


class State(BaseModel):
    log: Annotated[list[str], append] = []
    tags: Annotated[dict[str, str], merge] = {}
    n: int = 0


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryCheckpointer()
        return
    cp = SqliteCheckpointer(tmp_path / "h.db")
    yield cp
    anyio.run(cp.close)


def ask_graph(store: Any, **kw: Any) -> CompiledGraph:
    """first -> ask (interrupts) -> last."""

    def ask(state: State) -> dict[str, Any]:
        return {"log": [f"ask:{interrupt('proceed?')}"]}

    b = StateGraph(State).add_node("first", lambda s: {"log": ["first"], "n": s.n + 1})
    b.add_node("ask", ask).add_node("last", lambda s: {"log": ["last"]})
    b.add_edge(START, "first").add_edge("first", "ask").add_edge("ask", "last")
    return b.add_edge("last", END).compile(checkpointer=store, **kw)


def by_next(history: list[StateSnapshot], *nodes: str) -> StateSnapshot:
    [snap] = [h for h in history if h.next == nodes]
    return snap


def test_history_keeps_an_answered_interrupt_with_its_answer(store: Any) -> None:
    graph = ask_graph(store)
    [pause] = graph.invoke({}, thread_id="t").pauses
    graph.invoke(None, thread_id="t", resume="yes", principal="alice")

    history = graph.get_state_history("t")
    at = by_next(history, "ask")
    assert at.checkpoint_id == pause.checkpoint_id  # where the interrupt fired
    [task] = at.tasks
    [kept] = task.pauses
    assert at.pauses == (kept,)
    assert (kept.id, kept.kind, kept.node, kept.value) == (pause.id, "interrupt", "ask", "proceed?")
    assert kept.answered and kept.answer == "yes" and kept.answered_by == "alice"
    assert isinstance(kept.answered_at, datetime) and kept.answered_at >= kept.created_at
    assert task.status == "completed"
    assert all(h.pauses == () for h in history if h.checkpoint_id != at.checkpoint_id)
    assert graph.get_state("t", checkpoint_id=at.checkpoint_id).pauses == (kept,)
    assert not pause.answered  # what the paused run returned


def test_submitted_answers_and_released_gates_are_kept(store: Any) -> None:
    graph = ask_graph(store, interrupt_before=["last"])
    assert len(graph.invoke({}, thread_id="t").pauses) == 1
    graph.submit("t", resume="via inbox", by="bob", reason="looks fine")
    # Answered but not applied yet: still pending, the answer already shows.
    [task] = graph.get_state("t").tasks
    assert task.status == "paused"
    assert (task.pauses[0].answer, task.pauses[0].answer_reason) == ("via inbox", "looks fine")
    [gate] = graph.invoke(None, thread_id="t").pauses
    graph.invoke(None, thread_id="t")
    [released] = by_next(graph.get_state_history("t"), "last").pauses
    assert (released.id, released.kind) == (gate.id, "before")
    assert released.answered and released.answer is None
    assert released.answer_reason == "continued"


def test_history_keeps_a_subgraphs_pause(store: Any) -> None:
    def deep(state: State) -> dict[str, Any]:
        return {"log": [f"deep:{interrupt('deep?')}"]}

    child = StateGraph(State).add_node("deep", deep).add_edge(START, "deep").add_edge("deep", END)
    b = StateGraph(State).add_node("sub", child.compile()).add_edge(START, "sub")
    graph = b.add_edge("sub", END).compile(checkpointer=store)
    [pause] = graph.invoke({}, thread_id="t").pauses
    graph.invoke(None, thread_id="t", resume=42)
    at = by_next(graph.get_state_history("t"), "sub")
    [task] = at.tasks
    [kept] = task.pauses
    assert (kept.id, kept.node, kept.answer) == (pause.id, "sub.deep", 42)
    assert at.pauses == (kept,)


def test_history_keeps_a_tool_confirmation_and_its_decision(store: Any) -> None:
    @tool
    def delete_file(path: str) -> dict[str, str]:
        """Delete a file."""
        return {"deleted": path}

    call = ToolCall(id="call_1", name="delete_file", args={"path": "/x"})
    model = ScriptedModel([ModelResponse(text="", tool_calls=[call]), "done"])
    agent = Agent(name="fm", model=model, tools=[delete_file], require_confirmation=True)
    b = StateGraph(MessagesState).add_node(AgentNode(agent)).add_edge(START, "fm")
    graph = b.add_edge("fm", END).compile(checkpointer=store)
    graph.invoke({"messages": [{"role": "user", "content": "hi"}]}, thread_id="t")
    graph.invoke(None, thread_id="t", decisions={"call_1": "approve"}, principal="carol")

    [kept] = by_next(graph.get_state_history("t"), "fm").pauses
    assert isinstance(kept, ToolConfirmationPause)
    assert kept.request is not None and kept.request.function_call_id == "call_1"
    assert kept.answered and kept.answered_by == "carol"
    assert "approve" in str(kept.answer)


def test_after_gate_shows_at_the_checkpoint_it_holds(store: Any) -> None:
    graph = ask_graph(store, interrupt_after=["first"])
    [gate] = graph.invoke({}, thread_id="t").pauses
    head = graph.get_state("t")
    assert head.next == ("ask",) and head.pauses == (gate,)


def test_metadata_source_says_what_made_each_checkpoint(store: Any) -> None:
    graph = ask_graph(store)
    graph.invoke({}, thread_id="t")
    graph.invoke(None, thread_id="t", resume="y")
    sources = [h.metadata["source"] for h in graph.get_state_history("t")]
    assert sources == ["loop", "loop", "loop", "input"]
    first = graph.get_state_history("t")[-1].checkpoint_id
    graph.invoke(None, thread_id="t", checkpoint_id=first)  # a fork: it pauses again
    graph.update_state("t", {"n": 5})
    sources = [h.metadata["source"] for h in graph.get_state_history("t")]
    assert sources[:3] == ["update", "loop", "fork"]


def test_task_results(store: Any) -> None:
    def tag(state: State) -> dict[str, Any]:
        return {"tags": {"k": "v"}}

    def asker(state: State) -> dict[str, Any]:
        return {"log": [f"asker:{interrupt('?')}"]}

    b = StateGraph(State).add_node("a", lambda s: {"log": ["a", "a2"], "n": 3})
    b.add_node("p", lambda s: {"log": ["p"]}).add_node("q", lambda s: {"n": 9})
    b.add_node("tag", tag).add_node("asker", asker)
    b.add_edge(START, "a").add_edge("a", "p").add_edge("a", "q")
    b.add_edge(["p", "q"], "tag").add_edge("tag", "asker").add_edge("asker", END)
    b.add_edge("tag", "p2").add_node("p2", lambda s: {"log": ["p2"]}).add_edge("p2", END)
    graph = b.compile(checkpointer=store)
    graph.invoke({}, thread_id="t")

    head = graph.get_state("t")  # the paused step: the completed sibling's record
    tasks = {t.name: t for t in head.tasks}
    assert tasks["p2"].result == {"log": ["p2"]}
    assert tasks["asker"].result is None
    history = graph.get_state_history("t")
    # Steps a later checkpoint applied: derived from the values before and after.
    [a] = by_next(history, "a").tasks
    assert a.result == {"log": ["a", "a2"], "n": 3}
    assert [t.result for t in by_next(history, "p", "q").tasks] == [None, None]  # two tasks
    [t] = by_next(history, "tag").tasks
    assert t.result is None  # a merge reducer: its update cannot be told from the values
    assert by_next(history, "asker", "p2").tasks == head.tasks

    graph.invoke(None, thread_id="t", resume="ok")
    tasks = {t.name: t for t in by_next(graph.get_state_history("t"), "asker", "p2").tasks}
    assert tasks["asker"].result is None  # two tasks, no records kept
    assert tasks["asker"].status == tasks["p2"].status == "completed"


# -- damage names the thread ------------------------------------------------------------------
def _paused_file(tmp_path: pathlib.Path) -> pathlib.Path:
    db = tmp_path / "ok.db"
    cp = SqliteCheckpointer(db)
    graph = ask_graph(cp)
    graph.invoke({}, thread_id="t")
    anyio.run(cp.close)
    return db


def _delete_a_list_row(db: pathlib.Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(
            "DELETE FROM gf_channels WHERE channel = 'log' AND version ="
            " (SELECT max(version) FROM gf_channels WHERE channel = 'log')"
        )


def _damaged_pages(db: pathlib.Path) -> None:
    """Every page but the first (the header and schema) overwritten: our file, damaged."""
    data = bytearray(db.read_bytes())
    data[4096:] = bytes(range(256)) * ((len(data) - 4096) // 256 + 1)
    db.write_bytes(bytes(data[: db.stat().st_size]))


@pytest.mark.parametrize("damage", [_delete_a_list_row, _damaged_pages], ids=["row", "file"])
def test_damage_read_by_the_state_api_names_the_thread(tmp_path: pathlib.Path, damage: Any) -> None:
    good = _paused_file(tmp_path)
    db = tmp_path / "damaged.db"
    shutil.copy(good, db)
    for suffix in ("-wal", "-shm"):
        if pathlib.Path(f"{good}{suffix}").exists():
            shutil.copy(f"{good}{suffix}", f"{db}{suffix}")
    damage(db)
    calls = [
        lambda g: g.get_state("t"),
        lambda g: g.get_state_history("t"),
        lambda g: g.update_state("t", {"n": 1}),
    ]
    for call in calls:
        cp = SqliteCheckpointer(db)
        try:
            with pytest.raises(CorruptCheckpointError) as info:
                call(ask_graph(cp))
        finally:
            anyio.run(cp.close)
        assert info.value.thread_id == "t" and "'t'" in str(info.value), str(info.value)
        if damage is _delete_a_list_row:
            assert info.value.checkpoint_id is not None, str(info.value)
