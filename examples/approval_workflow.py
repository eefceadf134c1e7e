"""An approval workflow as a graph, no LLM: a purchase request with manager and finance review.

    python examples/approval_workflow.py

The graph::

    intake -> manager_review --(over 1,000)--> finance_review --> place_order -> notify
                             --(1,000 or less)----------------> place_order
                             --(denied)---------------------------------------> notify
                                                finance_review --(denied)-----> notify

``intake`` checks the request and computes its amount; each review is an ``interrupt`` whose
payload says who asks, for what and how much. ``place_order`` is the side effect: it runs
through ``ctx.dispatch_once``, which claims the call in the store before it runs and records
its outcome after, so a rerun of the node (after a crash, or time travel as below) gets the
recorded order instead of ordering again. Each order placed appends a line to
``approval_workflow.orders``, so the count can be checked.

Thread 1 (3 laptops, 1,350): it pauses at manager review; a second process (this file,
``manager THREAD``) approves by thread id and the thread pauses again at finance review;
finance's answer is recorded with ``graph.submit`` (nothing runs), then
``graph.invoke(None, ...)`` continues to the end. Running it again from the checkpoint before
``place_order`` places no second order. Thread 2 (2 monitors, 240): the manager says no, the
workflow ends with a rejection and ``place_order`` never runs.

Each run uses new threads of ``approval_workflow.db`` (in the current directory), so running
it twice prints the same lines.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel

from checkpoints import SqliteCheckpointer
from graphflow import END, START, CompiledGraph, NodeContext, RunResult, StateGraph, interrupt
from graphflow.reducers import append

DB = "approval_workflow.db"
ORDERS = Path("approval_workflow.orders")  # one line per order placed: "<thread> <item>"
FINANCE_LIMIT = 1_000  # amounts over this also need finance's approval


class Purchase(BaseModel):
    requester: str
    item: str
    quantity: int
    unit_price: int
    amount: int = 0
    status: str = "new"
    order: str | None = None
    log: Annotated[list[str], append] = []


def intake(state: Purchase) -> dict[str, Any]:
    if state.quantity < 1 or state.unit_price < 1:
        raise ValueError(f"quantity and unit price must be positive: {state}")
    amount = state.quantity * state.unit_price
    return {"amount": amount, "status": "in review", "log": [f"intake: {amount}"]}


def review(state: Purchase, who: str) -> dict[str, Any]:
    """Ask ``who`` to approve; the answer is ``{"approved": bool, "by": name}``."""
    answer = interrupt(
        {
            "review": who,
            "requester": state.requester,
            "item": f"{state.quantity} x {state.item}",
            "amount": state.amount,
            "question": f"approve {state.amount} for {state.requester}?",
        }
    )
    verdict = "approved" if answer["approved"] else "denied"
    update: dict[str, Any] = {"log": [f"{who}: {verdict} by {answer['by']}"]}
    if not answer["approved"]:
        update["status"] = f"rejected by {who}"
    return update


def manager_review(state: Purchase) -> dict[str, Any]:
    return review(state, "manager")


def finance_review(state: Purchase) -> dict[str, Any]:
    return review(state, "finance")


def after_manager(state: Purchase) -> str:
    if state.status.startswith("rejected"):
        return "notify"
    return "finance_review" if state.amount > FINANCE_LIMIT else "place_order"


def after_finance(state: Purchase) -> str:
    return "notify" if state.status.startswith("rejected") else "place_order"


async def place_order(state: Purchase, ctx: NodeContext) -> dict[str, Any]:
    async def order() -> str:
        with ORDERS.open("a") as f:
            f.write(f"{ctx.thread_id} {state.item}\n")
        return f"PO for {state.quantity} x {state.item}"

    # A thread is one purchase request, so the key "order" is claimed once per thread: a
    # rerun of this node gets the recorded outcome (a failure too) and never orders twice.
    # "unknown" means a crash came between the claim and the outcome.
    outcome = await ctx.dispatch_once("order", "place_order", None, order)
    if outcome.status != "succeeded":
        raise RuntimeError(f"the order did not go through ({outcome.status}): {outcome.error}")
    return {"order": outcome.result, "status": "ordered", "log": ["order placed"]}


def notify(state: Purchase) -> dict[str, Any]:
    return {"log": [f"notified {state.requester}: {state.status}"]}


def build() -> CompiledGraph:
    b = StateGraph(Purchase)
    for node in (intake, manager_review, finance_review, place_order, notify):
        b.add_node(node)
    b.add_edge(START, "intake").add_edge("intake", "manager_review")
    b.add_conditional_edges(
        "manager_review", after_manager, ["finance_review", "place_order", "notify"]
    )
    b.add_conditional_edges("finance_review", after_finance, ["place_order", "notify"])
    b.add_edge("place_order", "notify").add_edge("notify", END)
    return b.compile(checkpointer=SqliteCheckpointer(DB))


def show_pause(graph: CompiledGraph, thread: str) -> None:
    for p in graph.pending_pauses(thread):
        print(f"paused at {p.node}: {p.value}")


def show_result(result: RunResult) -> None:
    print(result.status, result.state.model_dump(exclude={"log"}))
    for line in result.state.log:
        print("  " + line)


def orders_of(thread: str) -> int:
    lines = ORDERS.read_text().splitlines() if ORDERS.exists() else []
    return sum(line.split(" ")[0] == thread for line in lines)


def main() -> None:
    graph = build()

    # Thread 1: over the finance limit, approved by both.
    thread = f"po-{uuid.uuid4().hex[:8]}"
    request = {"requester": "dana", "item": "laptop", "quantity": 3, "unit_price": 450}
    print(graph.invoke(request, thread_id=thread).status)
    show_pause(graph, thread)
    # The manager answers from another process, knowing only the thread id.
    subprocess.run([sys.executable, __file__, "manager", thread], check=True)
    show_pause(graph, thread)
    # Finance's answer is recorded durably; nothing runs until the thread is invoked.
    graph.submit(thread, resume={"approved": True, "by": "frank"}, by="frank")
    snap = graph.get_state(thread)
    assert snap is not None
    answered = [f"{p.node} answered by {p.answered_by}" for p in snap.pauses if p.answered]
    print(f"after submit (nothing ran yet): next {list(snap.next)}, {answered}")
    result = graph.invoke(None, thread_id=thread)
    show_result(result)
    # Time travel: run again from the checkpoint before place_order. The node runs again,
    # but dispatch_once returns the order it recorded instead of ordering a second time.
    before = next(s for s in graph.get_state_history(thread) if s.next == ("place_order",))
    replay = graph.invoke(None, thread_id=thread, checkpoint_id=before.checkpoint_id)
    print("replayed from before place_order:", replay.status, replay.state.order)
    print("history (oldest first):")
    for snap in reversed(graph.get_state_history(thread)):
        answers = [f"{p.node} answered by {p.answered_by}" for p in snap.pauses]
        print(f"  step {snap.step}: {snap.metadata['source']}, next {list(snap.next)} {answers}")
    print("orders placed:", orders_of(thread))

    # Thread 2: under the limit, the manager says no.
    thread = f"po-{uuid.uuid4().hex[:8]}"
    request = {"requester": "sam", "item": "monitor", "quantity": 2, "unit_price": 120}
    graph.invoke(request, thread_id=thread)
    show_pause(graph, thread)
    answer = {"approved": False, "by": "maria"}
    result = graph.invoke(None, thread_id=thread, resume=answer, principal="maria")
    show_result(result)
    print("orders placed:", orders_of(thread))


def manager(thread: str) -> None:
    graph = build()
    answer = {"approved": True, "by": "maria"}
    result = graph.invoke(None, thread_id=thread, resume=answer, principal="maria")
    print("manager approved (second process):", result.status)


if __name__ == "__main__":
    if sys.argv[1:2] == ["manager"]:
        manager(sys.argv[2])
    else:
        main()
