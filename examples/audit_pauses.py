"""An audit report of pause checkpoints: who asked what, who answered, what ran.

    python examples/audit_pauses.py

A payments workflow: ``review`` asks a manager (an ``interrupt``), then the ``payments``
agent proposes ``wire_funds``, which needs a human's confirmation. Three invoices go
through it: one approved at both pauses, one whose wire is denied, and one still waiting for
its manager. The answers are recorded as an approver's tool would (``graph.submit``, with
``by``), and a later run applies them.

The report is built only from what the store and the evidence log keep: for each thread,
every pause (from ``graph.audit``: the checkpoint it was made at, as a step of the thread's
history), what it asked, who asked it, every answer with who gave it and whether it was
applied, and what ran after. The threads are new on each run of ``audit_pauses.db`` (in the
current directory), so running it twice prints the same report.
"""

from __future__ import annotations

import uuid
from typing import Any

from checkpoints import SqliteCheckpointer
from graphflow import END, START, CompiledGraph, StateGraph, interrupt
from graphflow.agents import Agent, AgentNode, ModelResponse, ScriptedModel, ToolCall, tool
from graphflow.auth import Decision
from graphflow.messages import MessagesState

DB = "audit_pauses.db"


class Invoice(MessagesState):
    vendor: str = ""
    amount: int = 0
    manager_ok: bool = False


@tool(risk="high", category="financial")
def wire_funds(vendor: str, amount: int) -> str:
    """Wire ``amount`` to ``vendor``."""
    return f"wired {amount} to {vendor}"


def review(state: Invoice) -> dict[str, Any]:
    answer = interrupt({"question": f"Pay {state.vendor} {state.amount}?"})
    ok = answer == "yes"
    ask = f"Pay the invoice of {state.vendor}: {state.amount}."
    return {"manager_ok": ok, "messages": [{"role": "user", "content": ask}] if ok else []}


def build(vendor: str, amount: int) -> CompiledGraph:
    call = ToolCall(id="wire", name="wire_funds", args={"vendor": vendor, "amount": amount})
    model = ScriptedModel([ModelResponse(tool_calls=[call]), "Done."])
    agent = Agent("payments", model, [wire_funds], require_confirmation=["wire_funds"])
    b = StateGraph(Invoice)
    b.add_node(review).add_node(AgentNode(agent))
    b.add_edge(START, "review")
    b.add_conditional_edges("review", lambda s: "payments" if s.manager_ok else END)
    b.add_edge("payments", END)
    return b.compile(checkpointer=SqliteCheckpointer(DB), name="payments")


def run_invoice(vendor: str, amount: int, answers: list[tuple[str, Any]]) -> tuple[Any, str]:
    """Start a thread for the invoice, then give each answer as an approver would."""
    graph = build(vendor, amount)
    thread = f"invoice-{uuid.uuid4().hex[:8]}"
    result = graph.invoke({"vendor": vendor, "amount": amount}, thread_id=thread,
                          principal="ap-clerk")  # fmt: skip
    for who, answer in answers:
        pause = result.pauses[0]
        if pause.kind == "tool_confirmation":
            graph.submit(thread, decisions={"wire": answer}, by=who)
        else:
            graph.submit(thread, resume={pause.id: answer}, by=who)
        result = graph.invoke(None, thread_id=thread)
    return graph, thread


def asked(graph: CompiledGraph, thread: str, checkpoint_id: str, pause_id: str) -> str:
    """What the pause asked, read back from its checkpoint (any pause can be audited from the
    checkpoint id its evidence names)."""
    snapshot = graph.get_state(thread, checkpoint_id=checkpoint_id)
    assert snapshot is not None
    for p in snapshot.pauses:
        if p.id == pause_id:
            request = getattr(p, "request", None)
            if request is not None:
                return f"run {request.tool_name} {request.args}"
            return str(p.value["question"])
    return "?"


def report(title: str, graph: CompiledGraph, thread: str) -> None:
    steps = {s.checkpoint_id: s.step for s in graph.get_state_history(thread)}
    state = graph.get_state(thread)
    assert state is not None
    waiting = f", waiting at {len(state.pauses)} pause(s)" if state.pauses else ""
    print(f"{title}: {state.values.vendor} {state.values.amount}{waiting}")
    for e in graph.audit(thread):
        at = f"step {steps.get(e.checkpoint_id or '', '?')}"
        if e.stage in ("interrupt", "pause") and e.pause_id and e.checkpoint_id:
            what = asked(graph, thread, e.checkpoint_id, e.pause_id)
            kind = "an interrupt" if e.stage == "interrupt" else "a tool confirmation"
            print(f"  {kind} paused at the checkpoint of {at}, asked by {e.actor}")
            print(f"    {what} ({e.detail})")
        elif e.stage in ("resume", "decision"):
            verdict = e.decision if e.applied else f"{e.decision}, NOT APPLIED"
            why = f" ({e.detail})" if e.detail and e.stage == "decision" else ""
            print(f"    answered: {verdict} by {e.actor}{why}")
        elif e.stage == "result":
            print(f"  {e.event_type.removeprefix('agentic_action_')}: {e.tool} (call {e.call_id})")


if __name__ == "__main__":
    deny = Decision.deny(reason="duplicate invoice")
    cases = [
        ("invoice 1", "ACME", 9_500, [("maria", "yes"), ("carol", Decision.approve())]),
        ("invoice 2", "Globex", 1_200, [("maria", "yes"), ("carol", deny)]),
        ("invoice 3", "Initech", 700, []),
    ]
    for title, vendor, amount, answers in cases:
        report(title, *run_invoice(vendor, amount, answers))
