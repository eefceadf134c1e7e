"""Tool authorization: RBAC, a YAML policy and confirmations, approved in another process.

    python examples/approval_policy.py

A support agent looks up an order, then proposes a refund of 250 and an email to the
customer. The policy (``approval_policy.yaml``) escalates refunds over 100 to ``finance`` and
asks a human before email leaves the company; RBAC lets ``support`` call every tool. The
thread pauses with both calls; a second process (this file, ``approve THREAD``) plays the
approvers: bob (support) approves the refund, which is refused because he lacks ``finance``;
carol (finance) approves it; bob approves the email. Each call then runs exactly once.

Each run uses a new thread of ``approval_policy.db`` (in the current directory), so running
it twice prints the same lines.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from checkpoints import SqliteCheckpointer
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
from graphflow.auth import AccessControl, Decision, Policy, Role

DB = "approval_policy.db"
POLICY = Path(__file__).with_name("approval_policy.yaml")
RAN = Path("approval_policy.ran")  # one line per tool execution, to show each ran once


def record(line: str) -> None:
    with RAN.open("a") as f:
        f.write(line + "\n")


@tool(risk="low")
def look_up_order(order: str) -> dict[str, Any]:
    """Look an order up."""
    return {"order": order, "total": 250, "customer": "dana@customer.org"}


@tool(risk="high", category="financial", describe=lambda a: {"amount": a["amount"]})
def issue_refund(order: str, amount: int) -> str:
    """Refund an order."""
    record(f"refund {order} {amount}")
    return f"refunded {amount} on {order}"


@tool(
    risk="high",
    category="external_communication",
    describe=lambda a: {"destination": {"domain": a["to"].rsplit("@", 1)[-1]}},
)
def send_email(to: str, body: str) -> str:
    """Send an email."""
    record(f"email {to}")
    return f"sent to {to}"


MODEL = ScriptedModel(
    [
        ModelResponse(
            tool_calls=[ToolCall(id="lookup", name="look_up_order", args={"order": "A-1001"})]
        ),
        ModelResponse(
            tool_calls=[
                ToolCall(id="refund", name="issue_refund", args={"order": "A-1001", "amount": 250}),
                ToolCall(id="email", name="send_email",
                         args={"to": "dana@customer.org", "body": "Your refund is on its way."}),
            ]
        ),
        "Refunded 250 on A-1001 and told the customer.",
    ]
)  # fmt: skip


def build() -> Any:
    agent = Agent(
        "support",
        MODEL,
        [look_up_order, issue_refund, send_email],
        instruction="You handle refunds.",
        access_control=AccessControl(
            [Role("support", allow=["*"]), Role("finance", allow=["issue_refund"])],
            {"alice": ["support"], "bob": ["support"], "carol": ["finance"]},
        ),
        policy=Policy.from_yaml(POLICY),
    )
    b = StateGraph(MessagesState)
    b.add_node(AgentNode(agent))
    b.add_edge(START, "support").add_edge("support", END)
    return b.compile(checkpointer=SqliteCheckpointer(DB))


def show(res: Any) -> None:
    print(res.status)
    for p in res.pauses:
        r = p.request
        why = f" refused: {p.value['refused']}" if "refused" in p.value else ""
        role = f", needs {r.required_role}" if r.required_role else ""
        print(f"  {r.function_call_id}: {r.tool_name} {r.args} ({r.policy_decision}{role}){why}")


def request(thread: str) -> None:
    RAN.unlink(missing_ok=True)
    graph = build()
    ask = {"messages": [{"role": "user", "content": "Refund order A-1001, it arrived broken."}]}
    show(graph.invoke(ask, thread_id=thread, principal="alice"))
    # the approvers work in another process, as a worker or the CLI would
    subprocess.run([sys.executable, __file__, "approve", thread], check=True)
    print("decisions:")
    for d in graph.list_decisions(thread):
        print(f"  {d.call_id} {d.verdict} by {d.by}: {'applied' if d.applied else d.note}")
    print("ran:", RAN.read_text().split("\n")[:-1])


def approve(thread: str) -> None:
    graph = build()
    show(graph.invoke(None, thread_id=thread, decisions={"refund": Decision.approve(by="bob")}))
    decisions = {"refund": Decision.approve(by="carol"), "email": Decision.approve(by="bob")}
    res = graph.invoke(None, thread_id=thread, decisions=decisions)
    show(res)
    print(" ", res.state.messages[-1].content)


if __name__ == "__main__":
    if sys.argv[1:2] == ["approve"]:
        approve(sys.argv[2])
    else:
        request(f"refund-{uuid.uuid4().hex[:8]}")
