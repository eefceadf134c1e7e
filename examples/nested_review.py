"""A tool confirmation inside a subgraph, decided at the parent in another process.

    python examples/nested_review.py

The parent graph runs ``triage``, then ``cleanup`` (a compiled subgraph: ``plan``, then the
``file_manager`` agent), then ``report``. The agent (a scripted model) proposes
``delete_file``, which needs confirmation, so the whole parent pauses with the dotted node
path ``cleanup.file_manager``. A second process (this file, ``approve THREAD``) gives the
decision to the parent, keyed by the call id; it reaches the agent inside the subgraph,
which deletes the file (a pretend delete that records itself in ``nested_review.ran``) and
finishes. ``triage`` and ``plan`` are not run again, and the model is not asked again for
the turn it already answered.

Each run uses a new thread of ``nested_review.db`` (in the current directory), so running it
twice prints the same lines.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel

from checkpoints import SqliteCheckpointer
from graphflow import END, START, CompiledGraph, NodeContext, StateGraph, ToolConfirmationPause
from graphflow.agents import (
    Agent,
    AgentNode,
    Message,
    ModelResponse,
    ScriptedModel,
    ToolCall,
    tool,
)
from graphflow.auth import Decision
from graphflow.reducers import add_messages, append

DB = "nested_review.db"
RAN = Path("nested_review.ran")  # one line per execution of a node or the tool


class State(BaseModel):  # the parent's and the subgraph's: they share both keys
    messages: Annotated[list[Message], add_messages] = []
    log: Annotated[list[str], append] = []


def ran(what: str) -> None:
    with RAN.open("a") as f:
        f.write(what + "\n")


@tool
def delete_file(path: str) -> dict[str, str]:
    """Delete a file."""
    ran(f"delete_file {path}")
    return {"deleted": path}


MODEL = ScriptedModel(
    [
        ModelResponse(
            tool_calls=[ToolCall(id="call_1", name="delete_file", args={"path": "cache/old.log"})]
        ),
        "Deleted cache/old.log.",
    ]
)


def step(name: str) -> Any:
    """A plain node that logs its dotted path (``cleanup.plan`` inside the subgraph)."""

    def node(state: State, ctx: NodeContext) -> dict[str, list[str]]:
        ran(ctx.node)
        return {"log": [ctx.node]}

    node.__name__ = name
    return node


def build() -> CompiledGraph:
    agent = Agent("file_manager", MODEL, [delete_file], require_confirmation=["delete_file"])
    sub = StateGraph(State).add_node(step("plan")).add_node(AgentNode(agent))
    sub.add_edge(START, "plan").add_edge("plan", "file_manager").add_edge("file_manager", END)

    parent = StateGraph(State)
    parent.add_node(step("triage")).add_node("cleanup", sub.compile()).add_node(step("report"))
    parent.add_edge(START, "triage").add_edge("triage", "cleanup")
    parent.add_edge("cleanup", "report").add_edge("report", END)
    # Only the parent has a checkpointer: the subgraph keeps its state in the parent's thread.
    return parent.compile(checkpointer=SqliteCheckpointer(DB))


def request(thread: str) -> None:
    RAN.unlink(missing_ok=True)
    graph = build()
    ask = {"messages": [{"role": "user", "content": "Clear the old cache log."}]}
    result = graph.invoke(ask, thread_id=thread)
    print(result.status)
    for p in result.pauses:
        assert isinstance(p, ToolConfirmationPause) and p.request is not None
        r = p.request
        print(f"  {p.kind} at {p.node}: {r.tool_name} {r.args} (call {r.function_call_id})")
    # The approver works in another process and knows only the thread and the call id.
    subprocess.run([sys.executable, __file__, "approve", thread], check=True)
    print("ran:", RAN.read_text().splitlines())


def approve(thread: str) -> None:
    graph = build()
    decisions = {"call_1": Decision.approve(by="alice")}
    result = graph.invoke(None, thread_id=thread, decisions=decisions)
    print(result.status, result.state.log)
    for m in result.state.messages:
        calls = [f"{c.name}({c.args})" for c in m.tool_calls]
        print(f"  {m.role}: {m.content or ', '.join(calls)}")
    # One request, for the last answer: the turn that proposed the call was committed
    # before the pause, so the model is not asked it again.
    print("model requests in this process:", len(MODEL.calls))


if __name__ == "__main__":
    if sys.argv[1:2] == ["approve"]:
        approve(sys.argv[2])
    else:
        request(f"review-{uuid.uuid4().hex[:8]}")
