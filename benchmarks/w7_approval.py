"""W7: an approval flow across processes, graphflow (evidence on, evidence off) vs LangGraph.

    python benchmarks/w7_approval.py [--reps 9] [--json]

One flow is two processes, one after the other, on one SQLite file:

1. ``start``: an agent's model proposes ``delete_file(path=...)``, a call that needs a
   human's confirmation; the thread pauses and the process exits;
2. ``approve``: a NEW process opens the store, approves the call (by alice) and the call
   runs; the model then answers in text and the thread ends.

The same flow in each engine, written as its users write it:

- ``graphflow:evidence`` -- ``Agent(require_confirmation=["delete_file"])`` in an
  ``AgentNode`` on ``SqliteCheckpointer``, the evidence log beside it (the default); the
  approval is ``invoke(None, decisions={call_id: Decision.approve(by="alice")})``;
- ``graphflow:no-evidence`` -- the same with ``compile(evidence=False)`` (the tool is
  medium risk: without a log, high-risk calls never run);
- ``langgraph`` -- an agent node (the same scripted model) and a tool node that calls
  ``interrupt()`` before the tool, on ``SqliteSaver`` with ``durability="sync"``; the
  approval is ``invoke(Command(resume={"approved": True, "by": "alice"}))``.

Each repetition runs every variant once, in a shuffled order, plus one bare process per
engine (interpreter start and the engine's imports, nothing else). Reported per flow, as
medians over repetitions of ratios paired within a repetition:

- ``in-process``: opening the store, building the graph and running, in both processes
  (what the engine does; the interpreter and imports excluded). The store's tables (and
  the evidence log's) are made before, by a process of their own, as a deployed application
  has them;
- ``wall``: the wall time of both processes (what a user waits for), and ``wall - 2 x
  bare``: the same without the interpreter's start and the imports.

Every flow is checked: the tool ran exactly once, the thread ended with the model's text;
with evidence, the log verifies and holds the proposal, the pause, alice's decision and the
execution. LangGraph must be importable (``pip install -e '.[bench]'``); without it, its
variant is skipped with a note.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
CALL_ID = "call_1"
ARGS = {"path": "/data/report.csv"}
USER_TEXT = "delete the report"
GRAPHFLOW = ("graphflow:evidence", "graphflow:no-evidence")
LANGGRAPH = "langgraph"
IMPORTS = {  # what a child imports before its timer (graphflow: also what it imports on
    # first use, the engine and anyio's backend, which its first worker-thread call loads)
    "graphflow": ("anyio._backends._asyncio", "checkpoints", "graphflow.agents",
                  "graphflow.compiled", "graphflow.engine.execute", "graphflow.engine.run"),
    LANGGRAPH: ("langchain_core.messages", "langgraph.checkpoint.sqlite", "langgraph.graph",
                "langgraph.graph.message", "langgraph.types"),
}  # fmt: skip


def side_effect(path: str, line: str) -> None:
    """Count a tool execution in a file (across processes)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


# -- graphflow -------------------------------------------------------------------------------
def graphflow_prepare(variant: str, db: str) -> None:
    """Make the store's tables (and the evidence log's), as a deployed application has them."""
    import anyio

    from checkpoints import SqliteCheckpointer
    from graphflow.evidence import EvidenceLog

    store = SqliteCheckpointer(db)
    anyio.run(store.setup)
    anyio.run(store.close)
    if variant.endswith(":evidence"):
        EvidenceLog.beside(db).close()


def graphflow_phase(variant: str, phase: str, db: str, sidefx: str, thread: str) -> dict[str, Any]:
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
    from graphflow.auth import Decision

    t0 = time.perf_counter()

    @tool(risk="medium")
    def delete_file(path: str) -> dict[str, str]:
        """Delete a file."""
        side_effect(sidefx, f"delete_file {path}")
        return {"deleted": path}

    model = ScriptedModel(
        [ModelResponse(tool_calls=[ToolCall(id=CALL_ID, name="delete_file", args=ARGS)]),
         "Deleted."]
    )  # fmt: skip
    agent = Agent("files", model, [delete_file], require_confirmation=["delete_file"])
    b = StateGraph(MessagesState).add_node(AgentNode(agent))
    b.add_edge(START, "files").add_edge("files", END)
    store = SqliteCheckpointer(db)
    graph = b.compile(checkpointer=store, evidence=None if variant.endswith(":evidence") else False)
    t1 = time.perf_counter()
    if phase == "start":
        res = graph.invoke({"messages": [{"role": "user", "content": USER_TEXT}]}, thread_id=thread)
        ok = res.status == "paused" and res.pauses[0].request.function_call_id == CALL_ID
    else:
        res = graph.invoke(None, thread_id=thread,
                           decisions={CALL_ID: Decision.approve(by="alice")})  # fmt: skip
        ok = res.status == "done" and res.state.messages[-1].content == "Deleted."
    t2 = time.perf_counter()
    import anyio

    anyio.run(store.close)
    log = graph.evidence
    if log is not None:
        log.close()
    return {"ok": ok, "load_s": t1 - t0, "run_s": t2 - t1}


def graphflow_check(variant: str, db: str, thread: str) -> str | None:
    """What is wrong with a finished graphflow flow's evidence (None: all is well)."""
    from graphflow.evidence import EvidenceLog

    path = db.removesuffix(".db") + ".evidence.db"
    if variant.endswith(":no-evidence"):
        return "an evidence file was written" if os.path.exists(path) else None
    with EvidenceLog(path) as log:
        report = log.verify()
        stages = [r.event["extensions"]["graphflow"]["stage"] for r in log.events(thread)]
        approvers = [r.event.get("approval", {}).get("approver_id") for r in log.events(thread)]
    if not report.ok:
        return f"the log does not verify: {report.problems}"
    want = ["proposed", "policy_decision", "paused", "decision_received", "dispatch_claimed",
            "executed"]  # fmt: skip
    if stages != want or "alice" not in approvers:
        return f"unexpected trail {stages} (approvers {approvers})"
    return None


# -- LangGraph -------------------------------------------------------------------------------
def langgraph_phase(phase: str, db: str, sidefx: str, thread: str) -> dict[str, Any]:
    import sqlite3
    from typing import Annotated, TypedDict

    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages
    from langgraph.types import Command, interrupt

    t0 = time.perf_counter()

    # (the functional form: this module's annotations are strings, which LangGraph would
    # resolve in the module's globals, where these names are not)
    State = TypedDict("State", {"messages": Annotated[list[Any], add_messages]})  # noqa: UP013

    def delete_file(path: str) -> dict[str, str]:
        side_effect(sidefx, f"delete_file {path}")
        return {"deleted": path}

    def agent(state: Any) -> dict[str, Any]:  # the same script as graphflow's model
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage(content="Deleted.")]}
        call = {"id": CALL_ID, "name": "delete_file", "args": ARGS, "type": "tool_call"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    def tools(state: Any) -> dict[str, Any]:
        out = []
        for call in state["messages"][-1].tool_calls:
            answer = interrupt({"tool": call["name"], "args": call["args"], "id": call["id"]})
            if answer.get("approved"):
                content = json.dumps(delete_file(**call["args"]))
            else:
                content = f"denied: {answer.get('reason')}"
            out.append(ToolMessage(content=content, tool_call_id=call["id"]))
        return {"messages": out}

    def route(state: Any) -> str:
        return "tools" if getattr(state["messages"][-1], "tool_calls", None) else END

    b = StateGraph(State)
    b.add_node("agent", agent)
    b.add_node("tools", tools)
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", route, ["tools", END])
    b.add_edge("tools", "agent")
    conn = sqlite3.connect(db, check_same_thread=False)
    saver = SqliteSaver(conn)
    if phase == "prepare":
        saver.setup()
        conn.close()
        return {"ok": True}
    graph = b.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": thread}}
    t1 = time.perf_counter()
    if phase == "start":
        out = graph.invoke({"messages": [HumanMessage(USER_TEXT)]}, config, durability="sync")
        ok = "__interrupt__" in out
    else:
        out = graph.invoke(Command(resume={"approved": True, "by": "alice"}), config,
                           durability="sync")  # fmt: skip
        ok = out["messages"][-1].content == "Deleted."
    t2 = time.perf_counter()
    conn.close()
    return {"ok": ok, "load_s": t1 - t0, "run_s": t2 - t1}


# -- the child process -----------------------------------------------------------------------
def child(variant: str, phase: str, db: str, sidefx: str, thread: str) -> None:
    """One process of a flow: print one JSON line (``bare`` imports the engine only,
    ``prepare`` makes the empty store)."""
    t0 = time.perf_counter()
    for name in IMPORTS[LANGGRAPH if variant == LANGGRAPH else "graphflow"]:
        importlib.import_module(name)
    imported = time.perf_counter() - t0
    if phase == "bare":
        out: dict[str, Any] = {"ok": True}
    elif phase == "prepare" and variant != LANGGRAPH:
        graphflow_prepare(variant, db)
        out = {"ok": True}
    elif variant == LANGGRAPH:
        out = langgraph_phase(phase, db, sidefx, thread)
    else:
        out = graphflow_phase(variant, phase, db, sidefx, thread)
    out["import_s"] = imported
    print(json.dumps(out))


def child_env() -> dict[str, str]:
    """The children's environment: this tree first on the path, and bytecode cached (in a
    directory of its own, not the source tree) as an installed application has it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}  # fmt: skip
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "graphflow-bench-pycache")
    return env


def spawn(variant: str, phase: str, db: str, sidefx: str, thread: str) -> dict[str, Any]:
    env = child_env()
    argv = [sys.executable, str(HERE), "--child", variant, phase, db, sidefx, thread]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"w7 {variant} {phase} failed:\n{proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall_s"] = wall
    return out


def flow(variant: str, workdir: str, n: int) -> dict[str, Any]:
    """One flow of ``variant`` in a fresh directory: start, then approve, then the checks."""
    directory = os.path.join(workdir, f"{variant.replace(':', '-')}-{n}")
    os.mkdir(directory)
    db, sidefx, thread = os.path.join(directory, "w7.db"), os.path.join(directory, "fx"), "w7"
    spawn(variant, "prepare", db, sidefx, thread)  # (not timed)
    start = spawn(variant, "start", db, sidefx, thread)
    approve = spawn(variant, "approve", db, sidefx, thread)
    problem = None if start["ok"] and approve["ok"] else f"phase results {start} {approve}"
    runs = Path(sidefx).read_text().splitlines() if os.path.exists(sidefx) else []
    if problem is None and runs != [f"delete_file {ARGS['path']}"]:
        problem = f"the tool ran {len(runs)} times"
    if problem is None and variant != LANGGRAPH:
        problem = graphflow_check(variant, db, thread)
    return {
        "problem": problem,
        "in_process_s": sum(p["load_s"] + p["run_s"] for p in (start, approve)),
        "run_s": start["run_s"] + approve["run_s"],
        "wall_s": start["wall_s"] + approve["wall_s"],
    }


def langgraph_available() -> tuple[bool, str]:
    """Whether LangGraph and its SQLite saver can be imported, and which versions."""
    if find_spec("langgraph") is None or find_spec("langgraph.checkpoint.sqlite") is None:
        return False, "LangGraph is not installed (pip install -e '.[bench]'): its variant skipped"
    from importlib.metadata import version

    names = ("langgraph", "langgraph-checkpoint-sqlite", "langchain-core")
    return True, ", ".join(f"{p} {version(p)}" for p in names)


def median_ratio(samples: list[dict[str, Any]], a: str, b: str, key: str) -> dict[str, float]:
    """The median (and min, max) over repetitions of ``a``'s ``key`` / ``b``'s."""
    ratios = [s[a][key] / s[b][key] for s in samples]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def measure(reps: int, seed: int = 7) -> dict[str, Any]:
    with_lg, note = langgraph_available()
    variants = [*GRAPHFLOW, *([LANGGRAPH] if with_lg else [])]
    engines = ["graphflow", *(["langgraph"] if with_lg else [])]
    rng = random.Random(seed)
    samples: list[dict[str, Any]] = []
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="w7-") as workdir:
        flow("graphflow:evidence", workdir, -1)  # warm the file cache and the bytecode
        if with_lg:
            flow(LANGGRAPH, workdir, -1)
        for n in range(reps):
            jobs = [*variants, *(f"bare:{e}" for e in engines)]
            rng.shuffle(jobs)
            sample: dict[str, Any] = {}
            for job in jobs:
                if job.startswith("bare:"):
                    engine = job.split(":", 1)[1]
                    variant = LANGGRAPH if engine == "langgraph" else GRAPHFLOW[0]
                    bare = spawn(variant, "bare", "-", "-", "-")
                    sample[job] = {"wall_s": bare["wall_s"], "import_s": bare["import_s"]}
                else:
                    sample[job] = flow(job, workdir, n)
                    if sample[job]["problem"]:
                        problems.append(f"{job} rep {n}: {sample[job]['problem']}")
            for v in variants:  # the flow's two processes, without interpreter and imports
                bare = sample["bare:langgraph" if v == LANGGRAPH else "bare:graphflow"]
                sample[v]["wall_net_s"] = sample[v]["wall_s"] - 2 * bare["wall_s"]
            samples.append(sample)
    result: dict[str, Any] = {"reps": reps, "langgraph": note, "problems": problems}
    result["median_ms"] = {
        v: {k: statistics.median(s[v][k] for s in samples) * 1e3
            for k in ("in_process_s", "run_s", "wall_s", "wall_net_s")}
        for v in variants
    }  # fmt: skip
    result["bare_wall_ms"] = {
        e: statistics.median(s[f"bare:{e}"]["wall_s"] for s in samples) * 1e3 for e in engines
    }
    on, off = GRAPHFLOW
    ratios = {
        f"evidence on/off {label}": median_ratio(samples, on, off, key)
        for key, label in (("in_process_s", "in-process"), ("wall_s", "wall"))
    }
    if with_lg:
        for key, label in (("in_process_s", "in-process"), ("run_s", "run"), ("wall_s", "wall")):
            ratios[f"langgraph/graphflow(evidence) {label}"] = median_ratio(
                samples, LANGGRAPH, on, key
            )
    result["ratios"] = ratios
    return result


def report(result: dict[str, Any]) -> None:
    print(f"W7 approval flow across processes, {result['reps']} repetitions (interleaved)")
    print(f"LangGraph: {result['langgraph']}")
    print(f"{'variant':<24} {'in-process ms':>14} {'run ms':>8} {'wall ms':>9} {'wall-2xbare':>12}")
    for v, m in result["median_ms"].items():
        print(f"{v:<24} {m['in_process_s']:>14.1f} {m['run_s']:>8.1f} {m['wall_s']:>9.1f} "
              f"{m['wall_net_s']:>12.1f}")  # fmt: skip
    print("bare process (interpreter + imports) ms: "
          + ", ".join(f"{e} {v:.1f}" for e, v in result["bare_wall_ms"].items()))  # fmt: skip
    for name, r in result["ratios"].items():
        print(f"ratio {name}: {r['median']:.2f} (min {r['min']:.2f}, max {r['max']:.2f})")
    for p in result["problems"]:
        print(f"!! {p}")


def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The results as rows of the suite's table (``benchmarks/run.py``)."""
    out = []
    for name, r in result["ratios"].items():
        target = None
        if name == "langgraph/graphflow(evidence) in-process":
            target = ">= 3"
        out.append({"metric": f"W7 {name}", "value": round(r["median"], 2), "unit": "ratio",
                    "target": target,
                    "note": f"min {r['min']:.2f}, max {r['max']:.2f}"})  # fmt: skip
    if "langgraph" not in result["bare_wall_ms"]:
        out.append({"metric": "W7 LangGraph", "value": None, "unit": None, "target": None,
                    "note": result["langgraph"]})  # fmt: skip
    if result["problems"]:
        out.append({"metric": "W7 failed checks", "value": len(result["problems"]),
                    "unit": "flows", "target": "0", "note": result["problems"][0]})  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(*argv[1:6])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--json", action="store_true", help="print the result as JSON too")
    args = parser.parse_args(argv)
    result = measure(args.reps)
    report(result)
    if args.json:
        print(json.dumps(result))
    from _results import emit

    emit("w7_approval", rows(result))


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    main()
