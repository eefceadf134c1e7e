"""A call decided once stays decided: a rerun of its node (resumed by another principal,
after an approval expired, to answer a sibling's pause) never judges it again, and a freeze
by one task stops every later dispatch of the run, a sibling task's too.

Outside-in findings: a call refused by access control for one principal ran, unreviewed,
when another principal resumed the thread to answer a different pause; a call that had run
was recorded as denied (and the model told so) on such a rerun, or paused again once its
approval expired; an agent running beside a task that froze the thread went on dispatching.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from checkpoints import SqliteCheckpointer
from graphflow import END, START, StateGraph, ThreadFrozenError
from graphflow.agents import (
    Agent,
    AgentNode,
    MessagesState,
    ModelResponse,
    ScriptedModel,
    ToolCall,
    tool,
)
from graphflow.agents.tools import Tool
from graphflow.auth import AccessControl, Decision, Policy, Principal, Role, Rule
from graphflow.compiled import CompiledGraph

USER = {"messages": [{"role": "user", "content": "go"}]}


def _tools(ran: list[tuple[str, Any]]) -> list[Tool]:
    @tool(risk="low")
    def delete_file(path: str) -> dict[str, str]:
        """Delete a file."""
        ran.append(("delete_file", path))
        return {"deleted": path}

    @tool(risk="high")
    def issue_refund(order_id: str, amount: float) -> dict[str, bool]:
        """Refund an order."""
        ran.append(("issue_refund", order_id))
        return {"ok": True}

    return [delete_file, issue_refund]


def _graph(tmp_path: Path, ran: list[tuple[str, Any]]) -> CompiledGraph:
    """An agent proposing ``delete_file`` (alice may, bob may not) and ``issue_refund`` (a
    human confirms it) in one turn."""
    access = AccessControl(
        roles=[
            Role("analyst", allow=["issue_refund"], deny=["delete_file"]),
            Role("admin", allow=["*"]),
        ],
        assignments={"alice": ["admin"], "bob": ["analyst"]},
    )
    calls = [
        ToolCall(id="c_del", name="delete_file", args={"path": "/etc/x"}),
        ToolCall(id="c_ref", name="issue_refund", args={"order_id": "o1", "amount": 5.0}),
    ]
    model = ScriptedModel([ModelResponse(tool_calls=calls), "done"])
    agent = Agent(
        "ag", model, _tools(ran), access_control=access, require_confirmation=["issue_refund"]
    )
    b = StateGraph(MessagesState).add_node(AgentNode(agent))
    b.add_edge(START, "ag").add_edge("ag", END)
    return b.compile(checkpointer=SqliteCheckpointer(str(tmp_path / "t.db")))


def _tool_texts(graph: CompiledGraph, thread: str) -> dict[str, str]:
    state = graph.get_state(thread)
    assert state is not None
    return {m.tool_call_id: m.content for m in state.values.messages if m.role == "tool"}


def _stages(graph: CompiledGraph, thread: str, call_id: str) -> list[tuple[str, Any]]:
    return [(e.stage, e.decision) for e in graph.audit(thread) if e.call_id == call_id]


def test_a_call_refused_for_one_principal_does_not_run_when_another_resumes(
    tmp_path: Path,
) -> None:
    ran: list[tuple[str, Any]] = []
    graph = _graph(tmp_path, ran)
    res = graph.invoke(USER, thread_id="t", principal="bob")
    assert res.status == "paused" and ran == []
    for _ in range(2):  # alice's first approval is for bob's digest: it pauses again
        res = graph.invoke(
            None, thread_id="t", principal="alice",
            decisions={"c_ref": Decision.approve(by="alice")},
        )  # fmt: skip
    assert res.status == "done"
    assert ran == [("issue_refund", "o1")]  # never delete_file, refused for bob
    assert "access denied" in _tool_texts(graph, "t")["c_del"]
    assert [s for s, _ in _stages(graph, "t", "c_del")] == ["proposal", "access"]


def test_a_call_that_ran_is_not_judged_again_by_a_later_principal(tmp_path: Path) -> None:
    ran: list[tuple[str, Any]] = []
    graph = _graph(tmp_path, ran)
    res = graph.invoke(USER, thread_id="t", principal="alice")
    assert res.status == "paused" and ran == [("delete_file", "/etc/x")]
    res = graph.invoke(None, thread_id="t", principal="bob")  # answers nothing
    assert res.status == "paused"
    while res.status == "paused":
        res = graph.invoke(
            None, thread_id="t", principal="bob",
            decisions={p.id: Decision.approve(by="bob") for p in res.pauses},
        )  # fmt: skip
    assert ran == [("delete_file", "/etc/x"), ("issue_refund", "o1")]
    assert _tool_texts(graph, "t")["c_del"] == '{"deleted": "/etc/x"}'
    assert "deny" not in [d for _, d in _stages(graph, "t", "c_del")]


def test_a_call_that_ran_is_not_paused_again_once_its_approval_expired(
    tmp_path: Path,
) -> None:
    ran: list[tuple[str, Any]] = []

    @tool(risk="high")
    def wire(to: str) -> dict[str, str]:
        """Send money."""
        ran.append(("wire", to))
        return {"sent": to}

    policy = Policy([Rule("wire", "requires_human_approval", match={"tool": "wire"},
                          expires_in=0.2)])  # fmt: skip
    calls = [ToolCall(id="w1", name="wire", args={"to": "a"}),
             ToolCall(id="w2", name="wire", args={"to": "b"})]  # fmt: skip
    model = ScriptedModel([ModelResponse(tool_calls=calls), "done"])
    agent = Agent("ag", model, [wire], policy=policy)
    b = StateGraph(MessagesState).add_node(AgentNode(agent))
    graph = (
        b.add_edge(START, "ag")
        .add_edge("ag", END)
        .compile(checkpointer=SqliteCheckpointer(str(tmp_path / "t.db")))
    )
    alice = Principal("alice", roles=("admin",))
    res = graph.invoke(USER, thread_id="t", principal=alice)
    res = graph.invoke(None, thread_id="t", principal=alice,
                       decisions={"w1": Decision.approve(by="alice")})  # fmt: skip
    assert ran == [("wire", "a")]
    assert [p.request.function_call_id for p in res.pauses] == ["w2"]
    time.sleep(0.3)  # both approvals' windows are over now: w1's no longer matters
    res = graph.invoke(None, thread_id="t", principal=alice)
    assert [p.request.function_call_id for p in res.pauses] == ["w2"]
    res = graph.invoke(None, thread_id="t", principal=alice,
                       decisions={p.id: Decision.deny(by="alice") for p in res.pauses})  # fmt: skip
    assert res.status == "done" and ran == [("wire", "a")]
    texts = _tool_texts(graph, "t")
    assert texts["w1"] == '{"sent": "a"}' and "denied" in texts["w2"]
    assert [applied for e in graph.audit("t") if e.call_id == "w1"
            for applied in [e.applied] if e.stage == "decision"] == [True]  # fmt: skip


def test_no_sibling_dispatches_after_a_task_froze_the_thread(tmp_path: Path) -> None:
    ran: list[tuple[str, Any]] = []
    froze = threading.Event()

    async def stop(state: Any, ctx: Any) -> dict[str, Any]:
        try:
            ctx.freeze("incident")
        finally:
            froze.set()  # (after the freeze is noted: the exception is on its way)

    async def after_the_freeze(tctx: Any) -> None:
        with anyio.fail_after(30):
            while not froze.is_set():
                await anyio.sleep(0.005)

    @tool(risk="low")
    def send(x: str) -> str:
        """Send."""
        ran.append(("send", x))
        return "sent"

    call = ToolCall(id="s1", name="send", args={"x": "1"})
    model = ScriptedModel([ModelResponse(tool_calls=[call]), "done"])
    agent = Agent("b", model, [send], before_tool=[after_the_freeze])
    g = StateGraph(MessagesState).add_node("a", stop).add_node(AgentNode(agent))
    g.add_edge(START, "a").add_edge(START, "b").add_edge("a", END).add_edge("b", END)
    graph = g.compile(checkpointer=SqliteCheckpointer(str(tmp_path / "t.db")))
    with pytest.raises(ThreadFrozenError, match="incident"):
        graph.invoke(USER, thread_id="t")
    assert ran == []
    assert [s for s, _ in _stages(graph, "t", "s1")] == ["proposal", "policy"]
