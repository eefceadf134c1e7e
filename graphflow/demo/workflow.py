"""The refund workflow of ``graphflow demo``: intake -> policy check -> agent -> notify.

A customer asks for a refund. ``intake`` records the request, ``policy_check`` looks the
order up and decides whether a refund may be proposed at all, the ``refunds`` agent (a
scripted model that reads the transcript, so the demo needs no network) proposes
``issue_refund`` and, once it ran, ``send_email`` to the customer, and ``notify`` closes
the case.

Authorization is the library's, not the demo's: ``issue_refund`` is a high-risk financial
tool that the policy escalates to someone holding the ``finance`` role, so the thread
pauses; ``send_email`` to the customer's own address is allowed. The model picks its next
response from the transcript, so a thread paused in one process continues correctly in any
other.

The side effects are appended to a file beside the database (``X.effects.log``), one line
per call that ran, so the demo can show each approved call ran exactly once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from checkpoints import MemoryCheckpointer
from graphflow import END, START, CompiledGraph, StateGraph
from graphflow.agents import (
    Agent,
    AgentNode,
    Message,
    MessagesState,
    ModelResponse,
    Tool,
    ToolCall,
    tool,
)
from graphflow.auth import AccessControl, Policy, Role

ORDERS = {"A-1001": {"customer": "dana@customer.example", "total": 120, "delivered": True}}
"""The order book of the demo shop."""

EFFECTS_ENV = "GRAPHFLOW_DEMO_EFFECTS"
"""Where the tools append what they did (set by the demo to ``X.effects.log``)."""


class RefundCase(MessagesState):
    """The state of one refund case: the request, what the policy check found, the outcome."""

    order: str = ""
    reason: str = ""
    customer: str = ""
    amount: int = 0
    eligible: bool = False
    outcome: str = ""


def _effect(line: str) -> None:
    path = os.environ.get(EFFECTS_ENV)
    if path:
        with Path(path).open("a", encoding="utf-8") as f:
            f.write(line + "\n")


@tool(
    risk="high",
    category="financial",
    describe=lambda a: {"amount": a["amount"], "destination": {"order": a["order"]}},
)
def issue_refund(order: str, amount: int) -> str:
    """Refund ``amount`` on ``order`` to the customer's card."""
    _effect(f"refund {order} {amount} (pid {os.getpid()})")
    return f"refunded {amount} on {order}"


@tool(
    risk="medium",
    category="external_communication",
    describe=lambda a: {"destination": {"domain": a["to"].rsplit("@", 1)[-1]}},
)
def send_email(to: str, body: str) -> str:
    """Send an email to a customer."""
    _effect(f"email {to} (pid {os.getpid()})")
    return f"sent to {to}"


POLICY = Policy.from_dict(
    {
        "policies": [
            {
                "id": "refunds-need-finance",
                "match": {"tool": "issue_refund"},
                "decision": "escalate",
                "required_role": "finance",
                "reason": "every refund is approved by someone from finance",
                "expires_in": "1h",
            },
            {
                "id": "email-the-customer",
                "match": {"tool": "send_email"},
                "conditions": ["destination.domain == 'customer.example'"],
                "decision": "allow",
                "examples": {
                    "match": [
                        {"tool": "send_email", "destination": {"domain": "customer.example"}}
                    ],
                    "not_match": [
                        {"tool": "send_email", "destination": {"domain": "elsewhere.example"}}
                    ],
                },
            },
        ]
    },
    source="graphflow demo policy",
)
"""Refunds escalate to finance; email to the customer's domain is allowed; anything else
high-risk escalates (the library's rule for an unmatched high-risk call)."""

ACCESS = AccessControl(
    [Role("support", allow=["issue_refund", "send_email"]), Role("finance", allow=[])],
    {"support-bot": ["support"], "carol": ["finance"]},
)
"""``support-bot`` (the principal the case runs as) may call both tools; ``carol`` holds
``finance``, the role the refund rule requires of its approver."""


class RefundsModel:
    """The demo's model: a fixed script that reads the transcript, so it answers the same in
    any process (no network, no memory of its own).

    It proposes the refund; once a tool result for it is in the transcript it emails the
    customer if the refund was issued, or ends with the reason it was not.
    """

    name = "demo refunds model"

    async def generate(self, messages: list[Message], tools: list[Tool]) -> ModelResponse:
        """The next response for ``messages``."""
        results = {m.tool_call_id: m.content for m in messages if m.role == "tool"}
        if "refund-1" not in results:
            args = {"order": "A-1001", "amount": 120}
            return ModelResponse(
                text="The order qualifies; proposing the refund.",
                tool_calls=[ToolCall(id="refund-1", name="issue_refund", args=args)],
            )
        if not results["refund-1"].startswith("refunded"):
            return ModelResponse(text=f"No refund was issued: {results['refund-1']}")
        if "email-1" not in results:
            args = {"to": "dana@customer.example", "body": "Your refund of 120 is on its way."}
            return ModelResponse(
                text="Refund issued; telling the customer.",
                tool_calls=[ToolCall(id="email-1", name="send_email", args=args)],
            )
        return ModelResponse(text="Refunded 120 on A-1001 and emailed the customer.")


def intake(state: RefundCase) -> dict[str, Any]:
    """Record the customer's request as the first message of the case."""
    text = f"Please refund order {state.order}: {state.reason}"
    return {"messages": [{"role": "user", "content": text}]}


def policy_check(state: RefundCase) -> dict[str, Any]:
    """Look the order up: only a delivered order of the shop may be refunded."""
    found = ORDERS.get(state.order)
    if found is None or not found["delivered"]:
        return {"eligible": False, "outcome": f"order {state.order} cannot be refunded"}
    return {"eligible": True, "customer": found["customer"], "amount": found["total"]}


def after_check(state: RefundCase) -> str:
    """Eligible cases go to the agent; the others are closed at once."""
    return "refunds" if state.eligible else "notify"


def notify(state: RefundCase) -> dict[str, Any]:
    """Close the case with the agent's last word (or the policy check's)."""
    if state.outcome:
        return {}
    last = state.messages[-1].content if state.messages else ""
    return {"outcome": str(last)}


def build(checkpointer: Any = None) -> CompiledGraph:
    """The refund workflow, compiled on ``checkpointer`` (in memory when omitted)."""
    agent = Agent(
        "refunds",
        RefundsModel(),
        [issue_refund, send_email],
        instruction="You handle refund requests.",
        access_control=ACCESS,
        policy=POLICY,
    )
    g = StateGraph(RefundCase)
    g.add_node(intake).add_node(policy_check).add_node(AgentNode(agent)).add_node(notify)
    g.add_edge(START, "intake").add_edge("intake", "policy_check")
    g.add_conditional_edges("policy_check", after_check, ["refunds", "notify"])
    g.add_edge("refunds", "notify").add_edge("notify", END)
    return g.compile(checkpointer=checkpointer or MemoryCheckpointer(), name="refund-demo")


graph = build()
"""The workflow for ``--graph graphflow.demo.workflow:graph`` (the CLI runs it on ``--db``)."""
