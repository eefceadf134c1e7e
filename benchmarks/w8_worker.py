"""W8: answered threads resumed by one worker process, graphflow vs LangGraph's resume loop.

    python benchmarks/w8_worker.py [--threads 1000] [--reps 3] [--concurrency 1,8,32]

Each repetition makes, per variant, a new SQLite file holding ``--threads`` threads of a
three-node graph (``prepare -> review -> finish``) paused at ``review``'s ``interrupt()``,
each answered (graphflow: ``graph.submit(thread, resume="yes")``, which stores the answer and
marks the thread runnable; nothing runs). Then it times resuming all of them in this
process:

- ``graphflow:cN`` -- ``Worker(graph, concurrency=N).run_once()`` until nothing is runnable;
- ``graphflow:cN-alone`` -- the same at the highest concurrency on a store with
  ``group_commit=False`` (calls still share thread hops; each commit is its own
  transaction and fsync): what group commit adds;
- ``langgraph`` -- LangGraph's equivalent loop: ``graph.invoke(Command(resume="yes"),
  config)`` for each thread in turn, on ``SqliteSaver`` with ``durability="sync"`` (the
  answer is given at resume time; LangGraph has no stored-answer index).

Reported: threads per second per variant (median over repetitions), and the ratios
graphflow c1 / LangGraph and c32 / c1 paired within a repetition. Targets (issue 15):
graphflow at least 10x LangGraph; concurrency 32 at least 4x concurrency 1 (the worker's
commits of many threads share one transaction: group commit). Also reported: the store
calls per thread hop at each level (``Connection.hops``).
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


def graphflow_variant(
    folder: str, threads: int, concurrency: int, group_commit: bool = True
) -> tuple[float, float]:
    """Seconds to resume ``threads`` answered threads with one worker, and the store calls
    per thread hop while it did."""
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
    store = SqliteCheckpointer(str(Path(folder) / f"gf-c{concurrency}.db"),
                               group_commit=group_commit)  # fmt: skip
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

    hops, calls = store._db.hops, store._db.hops_jobs
    start = time.perf_counter()
    done = anyio.run(drain)
    took = time.perf_counter() - start
    per_hop = (store._db.hops_jobs - calls) / max(1, store._db.hops - hops)
    finished = [graph.get_state(tid) for tid in ids]
    if done != threads or any(s is None or s.values.get("answer") != "yes" for s in finished):
        raise SystemExit(f"graphflow c{concurrency}: {done} of {threads} threads done")
    return took, per_hop


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
    per_hop: dict[str, list[float]] = {}
    for rep in range(opts.reps):
        variants: list[Any] = [f"graphflow:c{c}" for c in levels]
        if levels[-1] > 1:
            variants.append(f"graphflow:c{levels[-1]}-alone")
        if with_lg:
            variants.append("langgraph")
        random.shuffle(variants)
        for name in variants:
            with tempfile.TemporaryDirectory() as folder:
                if name == "langgraph":
                    took = langgraph_variant(folder, opts.threads)
                else:
                    level = name.split(":c")[1]
                    alone = level.endswith("-alone")
                    concurrency = int(level.removesuffix("-alone"))
                    took, hop = graphflow_variant(folder, opts.threads, concurrency, not alone)
                    per_hop.setdefault(name, []).append(hop)
            seconds.setdefault(name, []).append(took)
            print(f"rep {rep} {name}: {opts.threads / took:.0f} threads/s", flush=True)
    rate = {k: statistics.median(opts.threads / s for s in v) for k, v in seconds.items()}
    print(f"\nW8: {opts.threads} answered threads, one worker process, SQLite")
    hop_of = {k: statistics.median(v) for k, v in per_hop.items()}
    for name, r in sorted(rate.items()):
        calls = f"  ({hop_of[name]:.1f} store calls per thread hop)" if name in hop_of else ""
        print(f"  {name:<20} {r:8.0f} threads/s{calls}")

    def paired(a: str, b: str) -> float | None:
        if a not in seconds or b not in seconds:
            return None
        return statistics.median(y / x for x, y in zip(seconds[a], seconds[b], strict=True))

    first, last = f"graphflow:c{levels[0]}", f"graphflow:c{levels[-1]}"
    vs_lg = paired(first, "langgraph")
    scale = paired(last, first)
    from _results import emit, row

    rows = [row(f"W8 threads/s {k}", round(v), "threads/s",
                note=f"{hop_of[k]:.1f} store calls per thread hop" if k in hop_of else "")
            for k, v in sorted(rate.items())]  # fmt: skip
    if vs_lg is not None:
        print(f"  graphflow c{levels[0]} / LangGraph (paired): {vs_lg:.2f} (target >= 10)")
        rows.append(row(f"W8 graphflow c{levels[0]} / LangGraph", round(vs_lg, 2), "x", ">= 10"))
    else:
        print("  LangGraph not installed: pip install -e '.[bench]'")
    if scale is not None and len(levels) > 1:
        print(f"  c{levels[-1]} / c{levels[0]} (paired): {scale:.2f} (target >= 4, group commit)")
        rows.append(row(f"W8 c{levels[-1]} / c{levels[0]}", round(scale, 2), "x", ">= 4"))
        alone = paired(last, f"{last}-alone")
        if alone is not None:
            print(f"  c{levels[-1]} / c{levels[-1]} without group commit (paired): {alone:.2f}")
            rows.append(row(f"W8 c{levels[-1]} group commit / alone", round(alone, 2), "x"))
    emit("w8_worker", rows)


if __name__ == "__main__":
    main()
