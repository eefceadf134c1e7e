"""A tool call is one proposal: a reused function call id is a new call (DESIGN.md promise 4).

Providers number calls per response (``call_0``, ``call_1`` ...), so a later turn, or a later
run of the thread, may propose another call under an id seen before. Its dispatch record,
decision and result belong to it alone: it is authorized and confirmed afresh, and the model
is never told another call's result.
"""

from __future__ import annotations

from typing import Any

from checkpoints import Checkpointer
from graphflow import END, START, StateGraph
from graphflow.agents import (
    Agent,
    AgentNode,
    MessagesState,
    ModelResponse,
    ScriptedModel,
    ToolCall,
    tool,
)


def _graph(store: Checkpointer, model: Any, ran: list[Any]) -> Any:
    @tool
    def delete_file(path: str) -> dict[str, str]:
        """Delete a file."""
        ran.append(("delete_file", path))
        return {"deleted": path}

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        ran.append(("add", a, b))
        return a + b

    agent = Agent(
        name="agent", model=model, tools=[delete_file, add], require_confirmation=["delete_file"]
    )
    b = StateGraph(MessagesState).add_node(AgentNode(agent))
    b.add_edge(START, "agent").add_edge("agent", END)
    return b.compile(checkpointer=store)


def _call(call_id: str, name: str, **args: Any) -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall(id=call_id, name=name, args=args)])


def _tool_results(state: Any) -> list[tuple[str | None, str]]:
    return [(m.tool_call_id, m.content) for m in state.messages if m.role == "tool"]


def test_a_reused_call_id_with_other_arguments_pauses_again_and_never_gets_the_old_result(
    store: Checkpointer,
) -> None:
    ran: list[Any] = []
    model = ScriptedModel(
        [
            _call("call_1", "delete_file", path="/data/scratch.txt"),
            _call("call_1", "delete_file", path="/etc/passwd"),  # a later turn, the same id
            ModelResponse(text="done"),
        ]
    )
    g = _graph(store, model, ran)
    first = g.invoke({"messages": [{"role": "user", "content": "clean up"}]}, thread_id="t")
    assert first.status == "paused"
    assert first.pauses[0].request.args == {"path": "/data/scratch.txt"}
    second = g.invoke(None, thread_id="t", decisions={"call_1": "approve"})
    # The new proposal under the old id waits for its own decision; it did not run.
    assert second.status == "paused"
    assert [p.request.args for p in second.pauses] == [{"path": "/etc/passwd"}]
    assert second.pauses[0].id != first.pauses[0].id
    assert ran == [("delete_file", "/data/scratch.txt")]
    final = g.invoke(None, thread_id="t", decisions={"call_1": "deny"})
    assert final.status == "done"
    assert ran == [("delete_file", "/data/scratch.txt")]  # the denied call never ran
    results = _tool_results(final.state)
    assert results[0] == ("call_1", '{"deleted": "/data/scratch.txt"}')
    assert results[1][0] == "call_1" and "denied" in results[1][1]


def test_a_reused_call_id_of_a_tool_without_confirmation_runs_with_its_own_arguments(
    store: Checkpointer,
) -> None:
    ran: list[Any] = []
    model = ScriptedModel(
        [
            _call("call_0", "add", a=1, b=2),
            _call("call_0", "add", a=40, b=2),
            ModelResponse(text="42"),
        ]
    )
    res = _graph(store, model, ran).invoke(
        {"messages": [{"role": "user", "content": "sums"}]}, thread_id="t"
    )
    assert res.status == "done"
    assert ran == [("add", 1, 2), ("add", 40, 2)]
    assert _tool_results(res.state) == [("call_0", "3"), ("call_0", "42")]


def test_a_call_id_reused_by_a_later_run_of_the_thread_is_a_new_call(store: Checkpointer) -> None:
    ran: list[Any] = []
    model = ScriptedModel(
        [
            _call("call_0", "add", a=1, b=2),
            ModelResponse(text="3"),
            _call("call_0", "add", a=2, b=2),
            ModelResponse(text="4"),
        ]
    )
    g = _graph(store, model, ran)
    g.invoke({"messages": [{"role": "user", "content": "1+2"}]}, thread_id="t")
    res = g.invoke({"messages": [{"role": "user", "content": "2+2"}]}, thread_id="t")
    assert ran == [("add", 1, 2), ("add", 2, 2)]
    assert _tool_results(res.state) == [("call_0", "3"), ("call_0", "4")]


def test_an_approval_of_one_proposal_does_not_approve_a_later_one_under_the_same_id(
    store: Checkpointer,
) -> None:
    """The decision submitted for the first proposal is consumed by it; the second waits."""
    ran: list[Any] = []
    model = ScriptedModel(
        [
            _call("call_1", "delete_file", path="/tmp/a"),
            _call("call_1", "delete_file", path="/tmp/a"),  # same id, same arguments
            ModelResponse(text="done"),
        ]
    )
    g = _graph(store, model, ran)
    g.invoke({"messages": [{"role": "user", "content": "x"}]}, thread_id="t")
    g.submit("t", decisions={"call_1": "approve"}, by="alice")
    res = g.invoke(None, thread_id="t")
    assert res.status == "paused" and ran == [("delete_file", "/tmp/a")]
    res = g.invoke(None, thread_id="t", decisions={"call_1": "approve"})
    assert res.status == "done" and ran == [("delete_file", "/tmp/a")] * 2
