"""A job that resumes answered threads with the worker, no LLM.

    python examples/resume_job.py

Three refund requests run until the agent proposes ``issue_refund``, which needs a person's
confirmation: each thread pauses. An approver answers two of them with ``graph.submit``, as
a separate approver process (the CLI's ``graphflow approve``, a web inbox) would: nothing
runs, but the store marks each answered thread runnable in the same transaction. Then the
job, ``Worker(graph).run_once()``, finds them in that index, claims each under its lease and
resumes it: the approved refund is issued (once), the denied one is not. The unanswered
request is not runnable and stays paused.

The same job from a shell, on the same file, would be::

    graphflow worker --graph examples.resume_job:graph --db resume_job.db --once

(or without ``--once``, a worker that polls until SIGINT/SIGTERM).

Each run uses new threads of ``resume_job.db`` (in the current directory), so running it
twice prints the same lines.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio

from checkpoints import SqliteCheckpointer
from graphflow import END, START, CompiledGraph, StateGraph
from graphflow.agents import Agent, AgentNode, Message, MessagesState, ModelResponse, ToolCall
from graphflow.agents import tool as make_tool
from graphflow.worker import Worker

DB = "resume_job.db"
NAME = "refunds"
ISSUED: list[str] = []  # the side effect: refunds issued by this process


@make_tool(risk="high", category="financial")
def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund an order."""
    ISSUED.append(order_id)
    return {"refunded": amount, "order_id": order_id}


class RefundClerk:
    """A scripted model that resumes correctly in any process: it proposes one refund for
    the order named in the request, then reports what the tool said."""

    async def generate(self, messages: list[Message], tools: Any) -> ModelResponse:
        results = [m for m in messages if m.role == "tool"]
        if results:
            denied = "denied" in str(results[-1].content).lower()
            return ModelResponse(text="The refund was not issued." if denied else "Refunded.")
        order, amount = next(m.content for m in messages if m.role == "user").split()
        call = ToolCall(id="call_refund", name="issue_refund",
                        args={"order_id": order, "amount": float(amount)})  # fmt: skip
        return ModelResponse(tool_calls=[call])


def builder() -> StateGraph:
    clerk = Agent(name="clerk", model=RefundClerk(), tools=[issue_refund],
                  require_confirmation=["issue_refund"])  # fmt: skip
    b = StateGraph(MessagesState).add_node(AgentNode(clerk))
    return b.add_edge(START, "clerk").add_edge("clerk", END)


graph = builder().compile(name=NAME)  # for `graphflow worker --graph examples.resume_job:graph`


def main() -> None:
    app = CompiledGraph(graph.spec, SqliteCheckpointer(DB))
    run = uuid.uuid4().hex[:8]
    threads = {f"refund-{i}": f"refund-{i}-{run}" for i in (1, 2, 3)}
    label = {tid: name for name, tid in threads.items()}
    orders = {"refund-1": "A-1 40", "refund-2": "A-2 900", "refund-3": "A-3 15"}
    started = [
        app.invoke({"messages": [{"role": "user", "content": orders[name]}]}, thread_id=tid)
        for name, tid in threads.items()
    ]
    print("started 3 refund requests:", ", ".join(r.status for r in started))

    # The approver answers two, knowing only thread and call ids; nothing runs yet.
    app.submit(threads["refund-1"], decisions={"call_refund": "approve"}, by="alice")
    app.submit(threads["refund-2"], decisions={"call_refund": "deny"}, by="alice",
               reason="over the limit")  # fmt: skip
    print("approved refund-1, denied refund-2; refund-3 waits")

    # The job: resume whatever is runnable now, two threads at a time.
    results = anyio.run(Worker(app, concurrency=2).run_once)
    ours = sorted((label[r.thread_id], r) for r in results if r.thread_id in label)
    print(f"worker resumed {len(ours)} threads:")
    for name, r in ours:
        print(f"  {name}: {r.status} ({r.reason})")
    for name in ("refund-1", "refund-2"):
        snap = app.get_state(threads[name])
        assert snap is not None
        print(f"{name}: {snap.values.messages[-1].content}")
    waiting = app.pending_pauses(threads["refund-3"])
    print("refund-3:", ", ".join(f"paused on {p.value['request']['tool_name']}" for p in waiting))
    print("refunds issued:", ISSUED)


if __name__ == "__main__":
    main()
