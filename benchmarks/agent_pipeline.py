"""The per-step cost of the full authorization pipeline, against ``require_confirmation``.

    python benchmarks/agent_pipeline.py [--reps 300] [--store memory|sqlite]

One thread per repetition: an agent node whose model proposes one low-risk tool call, which
runs, then answers in text (two model turns, one tool execution, one checkpointed step). The
two variants alternate, so both see the same machine:

- ``simple``: ``Agent(require_confirmation=["other_tool"])`` (the call needs no confirmation);
- ``full``: ``AccessControl`` (three roles), a 50-rule ``Policy``, one ``before_tool`` and
  one ``after_tool`` callback, a principal.

Prints the median time per run of each and their ratio (full / simple), paired per
repetition. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from policy_eval import build_rules

from checkpoints import MemoryCheckpointer, SqliteCheckpointer
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
from graphflow.auth import AccessControl, Policy, Role, Rule


@tool(risk="low")
def look_up(order: str) -> dict[str, Any]:
    """Look an order up."""
    return {"order": order, "status": "shipped"}


@tool(risk="high")
def other_tool(x: int) -> int:
    """Never called."""
    return x


def model() -> ScriptedModel:
    call = ToolCall(id="c1", name="look_up", args={"order": "A-1"})
    return ScriptedModel([ModelResponse(tool_calls=[call]), "It shipped."])


def build(kind: str, store: Any) -> Any:
    if kind == "simple":
        agent = Agent("a", model(), [look_up, other_tool], require_confirmation=["other_tool"])
    else:
        rules = [*build_rules(49), Rule("look-ups", "allow", match={"tool": "look_up"})]
        agent = Agent(
            "a",
            model(),
            [look_up, other_tool],
            access_control=AccessControl(
                [Role("support", allow=["*"]), Role("ro", deny=["other_tool"]), Role("x")],
                {"alice": ["support", "ro"]},
            ),
            policy=Policy(rules),
            before_tool=[lambda ctx: None],
            after_tool=[lambda ctx, result: result],
        )
    b = StateGraph(MessagesState)
    b.add_node(AgentNode(agent))
    b.add_edge(START, "a").add_edge("a", END)
    return b.compile(checkpointer=store)


async def once(graph: Any, thread: str, principal: str | None) -> float:
    inp = {"messages": [{"role": "user", "content": "where is A-1?"}]}
    start = time.perf_counter()
    res = await graph.ainvoke(inp, thread_id=thread, principal=principal)
    took = time.perf_counter() - start
    assert res.status == "done", res
    return took


async def measure(reps: int, store_kind: str) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        stores = {
            k: MemoryCheckpointer()
            if store_kind == "memory"
            else SqliteCheckpointer(Path(tmp) / f"{k}.db")
            for k in ("simple", "full")
        }
        graphs = {k: build(k, stores[k]) for k in stores}
        times: dict[str, list[float]] = {"simple": [], "full": []}
        for i in range(reps + 20):
            for k in ("simple", "full") if i % 2 else ("full", "simple"):
                took = await once(graphs[k], f"t{i}", "alice" if k == "full" else None)
                if i >= 20:  # warm-up
                    times[k].append(took)
        for s in stores.values():
            if isinstance(s, SqliteCheckpointer):
                await s.close()
        return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    args = parser.parse_args(argv)
    times = anyio.run(measure, args.reps, args.store)
    ratios = [f / s for f, s in zip(times["full"], times["simple"], strict=True)]
    simple = statistics.median(times["simple"]) * 1e6
    full = statistics.median(times["full"]) * 1e6
    print(f"{args.reps} runs of each on the {args.store} store")
    print(f"simple (require_confirmation) median {simple:.0f} us per run")
    print(f"full pipeline                 median {full:.0f} us per run")
    print(f"ratio full/simple (paired median) {statistics.median(ratios):.2f}")
    from _results import emit, row

    emit("agent_pipeline", [
        row(f"agent run, require_confirmation ({args.store})", round(simple), "us"),
        row(f"agent run, full pipeline ({args.store})", round(full), "us"),
        row("full pipeline / require_confirmation", round(statistics.median(ratios), 2), "ratio",
            note=f"paired median of {args.reps}"),
    ])  # fmt: skip


if __name__ == "__main__":
    main()
