"""W8: answered threads resumed by one worker process, graphflow vs LangGraph's resume loop.

    python benchmarks/w8_worker.py [--threads 1000] [--reps 3] [--concurrency 1,8,32]

Each repetition makes, per variant, a new SQLite file holding ``--threads`` threads of a
three-node graph (``prepare -> review -> finish``) paused at ``review``'s ``interrupt()``,
each answered (graphflow: ``graph.submit(thread, resume="yes")``, which stores the answer and
marks the thread runnable; nothing runs). Then it times resuming all of them in this
process:

- ``graphflow:cN`` -- ``Worker(graph, concurrency=N).run_once()`` until nothing is runnable;
- ``langgraph`` -- LangGraph's equivalent loop: ``graph.invoke(Command(resume="yes"),
  config)`` for each thread in turn, on ``SqliteSaver`` with ``durability="sync"`` (the
  answer is given at resume time; LangGraph has no stored-answer index).

Reported: threads per second per variant (median over repetitions), and the ratios
graphflow c1 / LangGraph and c32 / c1 paired within a repetition. Targets (issue 15):
graphflow at least 10x LangGraph; concurrency 32 at least 4x concurrency 1, which needs the
worker's commits of many threads to share one transaction (group commit), not built yet.
Every thread is checked to end done with its answer. LangGraph must be importable
(``pip install -e '.[bench]'``); without it, its variant is skipped with a note.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import uuid
from importlib.util import find_spec
from pathlib import Path
from typing import Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent))


class State(TypedDict, total=False):
    n: int
    answer: str


def _prepare(state: State) -> State:
    return {"n": 1}


def _finish(state: State) -> State:
    return {"n": state.get("n", 0) + 1}


def graphflow_variant(folder: str, threads: int, concurrency: int) -> float:
    """Seconds to resume ``threads`` answered threads with one worker."""
    import anyio

    from checkpoints import SqliteCheckpointer
    from graphflow import END, START, StateGraph, interrupt
    from graphflow.worker import Worker

    def review(state: State) -> State:
        return {"answer": str(interrupt("ship?"))}

    b = StateGraph(State).add_node("prepare", _prepare).add_node("review", review)
    b.add_node("finish", _finish)
    b.add_edge(START, "prepare").add_edge("prepare", "review").add_edge("review", "finish")
    b.add_edge("finish", END)
    store = SqliteCheckpointer(str(Path(folder) / f"gf-c{concurrency}.db"))
    graph = b.compile(checkpointer=store, name="w8", evidence=False)
    ids = [f"t{i}-{uuid.uuid4().hex[:6]}" for i in range(threads)]
    for tid in ids:
        graph.invoke({}, thread_id=tid)
        graph.submit(tid, resume="yes")
    worker = Worker(graph, concurrency=concurrency)

    async def drain() -> int:
        done = 0
        while True:
            results = await worker.run_once()
            if not results:
                return done
            done += sum(r.status == "done" for r in results)

    start = time.perf_counter()
    done = anyio.run(drain)
    took = time.perf_counter() - start
    finished = [graph.get_state(tid) for tid in ids]
    if done != threads or any(s is None or s.values.get("answer") != "yes" for s in finished):
        raise SystemExit(f"graphflow c{concurrency}: {done} of {threads} threads done")
    return took


def langgraph_variant(folder: str, threads: int) -> float:
    """Seconds to resume ``threads`` paused threads, one ``Command(resume=...)`` each."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt

    def review(state: State) -> State:
        return {"answer": str(interrupt("ship?"))}

    conn = sqlite3.connect(str(Path(folder) / "lg.db"), check_same_thread=False)
    saver = SqliteSaver(conn)
    b = StateGraph(State).add_node("prepare", _prepare).add_node("review", review)
    b.add_node("finish", _finish)
    b.add_edge(START, "prepare").add_edge("prepare", "review").add_edge("review", "finish")
    b.add_edge("finish", END)
    graph = b.compile(checkpointer=saver)
    configs = [{"configurable": {"thread_id": f"t{i}"}} for i in range(threads)]
    for cfg in configs:
        graph.invoke({}, cfg, durability="sync")
    start = time.perf_counter()
    for cfg in configs:
        graph.invoke(Command(resume="yes"), cfg, durability="sync")
    took = time.perf_counter() - start
    bad = [c for c in configs if graph.get_state(c).values.get("answer") != "yes"]
    conn.close()
    if bad:
        raise SystemExit(f"langgraph: {len(bad)} threads did not finish")
    return took


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--concurrency", default="1,8,32")
    opts = parser.parse_args(argv)
    levels = [int(c) for c in opts.concurrency.split(",")]
    with_lg = find_spec("langgraph") is not None
    seconds: dict[str, list[float]] = {}
    for rep in range(opts.reps):
        variants: list[Any] = [f"graphflow:c{c}" for c in levels]
        if with_lg:
            variants.append("langgraph")
        random.shuffle(variants)
        for name in variants:
            with tempfile.TemporaryDirectory() as folder:
                if name == "langgraph":
                    took = langgraph_variant(folder, opts.threads)
                else:
                    took = graphflow_variant(folder, opts.threads, int(name.split(":c")[1]))
            seconds.setdefault(name, []).append(took)
            print(f"rep {rep} {name}: {opts.threads / took:.0f} threads/s", flush=True)
    rate = {k: statistics.median(opts.threads / s for s in v) for k, v in seconds.items()}
    print(f"\nW8: {opts.threads} answered threads, one worker process, SQLite")
    for name, r in sorted(rate.items()):
        print(f"  {name:<14} {r:8.0f} threads/s")

    def paired(a: str, b: str) -> float | None:
        if a not in seconds or b not in seconds:
            return None
        return statistics.median(y / x for x, y in zip(seconds[a], seconds[b], strict=True))

    first, last = f"graphflow:c{levels[0]}", f"graphflow:c{levels[-1]}"
    vs_lg = paired(first, "langgraph")
    scale = paired(last, first)
    from _results import emit, row

    rows = [row(f"W8 threads/s {k}", round(v), "threads/s") for k, v in sorted(rate.items())]
    if vs_lg is not None:
        print(f"  graphflow c{levels[0]} / LangGraph (paired): {vs_lg:.2f} (target >= 10)")
        rows.append(row(f"W8 graphflow c{levels[0]} / LangGraph", round(vs_lg, 2), "x", ">= 10"))
    else:
        print("  LangGraph not installed: pip install -e '.[bench]'")
    if scale is not None and len(levels) > 1:
        print(f"  c{levels[-1]} / c{levels[0]} (paired): {scale:.2f} (target >= 4, group commit)")
        note = "no group commit yet: a worker's threads commit one by one"
        rows.append(row(f"W8 c{levels[-1]} / c{levels[0]}", round(scale, 2), "x", ">= 4", note))
    emit("w8_worker", rows)


if __name__ == "__main__":
    main()
