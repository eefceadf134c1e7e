"""W1 by durability: a chain of 50 trivial nodes on SQLite, ``fsync`` vs ``process``.

    python benchmarks/w1_durability.py [--reps 15] [--nodes 50]

Each repetition runs, in a freshly shuffled order, one chain per variant, each on a new
SQLite file (graph built and store opened before the timer):

- ``graphflow:fsync`` -- ``SqliteCheckpointer(path)`` (the default: every step fsync'd);
- ``graphflow:process`` -- ``SqliteCheckpointer(path, durability="process")``;
- ``raw:NORMAL`` / ``raw:FULL`` -- the least a durable step engine does: the nodes called in
  plain Python, one msgpack blob of ``{step, frontier, state}`` per step, one ``INSERT`` and
  ``COMMIT`` in a WAL-mode file at ``synchronous=NORMAL`` / ``FULL`` (the comparative
  harness's floor).

Reported: microseconds per step per variant (median over repetitions) and the ratios
``graphflow:process / raw:NORMAL`` (target: within 3x) and ``graphflow:fsync /
graphflow:process``, paired within a repetition. Every run is checked (counter == nodes).
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TypedDict

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parent))


class Chain(TypedDict):
    counter: int


def _inc(state: Chain) -> Chain:
    return {"counter": state["counter"] + 1}


def graphflow_variant(folder: str, nodes: int, durability: str) -> float:
    """Seconds for one run of the chain on a new file at ``durability``."""
    import anyio

    from checkpoints import SqliteCheckpointer
    from graphflow import END, START, StateGraph

    b = StateGraph(Chain)
    names = [f"n{i}" for i in range(nodes)]
    for name in names:
        b.add_node(name, _inc)
    b.add_edge(START, names[0])
    for a, c in itertools.pairwise(names):
        b.add_edge(a, c)
    b.add_edge(names[-1], END)
    cp = SqliteCheckpointer(os.path.join(folder, "gf.db"), durability=durability)  # type: ignore[arg-type]
    graph = b.compile(checkpointer=cp)
    t0 = time.perf_counter()
    out = graph.invoke({"counter": 0}, thread_id="t")
    seconds = time.perf_counter() - t0
    anyio.run(cp.close)
    assert out.state["counter"] == nodes, out
    return seconds


def raw_variant(folder: str, nodes: int, level: str) -> float:
    """Seconds for the raw store's chain at ``synchronous=level``."""
    conn = sqlite3.connect(os.path.join(folder, "raw.db"), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={level}")
    conn.execute(
        "CREATE TABLE checkpoints (thread_id TEXT, step INTEGER, status TEXT, blob BLOB,"
        " PRIMARY KEY (thread_id, step))"
    )
    state = {"counter": 0}
    t0 = time.perf_counter()
    for step in range(nodes):
        state = dict(_inc(state))  # type: ignore[arg-type]
        blob = msgpack.packb({"step": step, "frontier": [f"n{step + 1}"], "state": state})
        conn.execute("BEGIN")
        conn.execute("INSERT INTO checkpoints VALUES (?, ?, ?, ?)", ("t", step, "running", blob))
        conn.execute("COMMIT")
    seconds = time.perf_counter() - t0
    conn.close()
    assert state["counter"] == nodes
    return seconds


VARIANTS = {
    "graphflow:fsync": lambda d, n: graphflow_variant(d, n, "fsync"),
    "graphflow:process": lambda d, n: graphflow_variant(d, n, "process"),
    "raw:NORMAL": lambda d, n: raw_variant(d, n, "NORMAL"),
    "raw:FULL": lambda d, n: raw_variant(d, n, "FULL"),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--nodes", type=int, default=50)
    a = p.parse_args()
    samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(2):  # warm-up: imports, first files
        for fn in VARIANTS.values():
            with tempfile.TemporaryDirectory() as d:
                fn(d, a.nodes)
    for _ in range(a.reps):
        order = list(VARIANTS)
        random.shuffle(order)
        for name in order:
            with tempfile.TemporaryDirectory() as d:
                samples[name].append(VARIANTS[name](d, a.nodes) / a.nodes)

    def ratio(x: str, y: str) -> float:
        return statistics.median(s / t for s, t in zip(samples[x], samples[y], strict=True))

    print(f"W1 by durability: {a.nodes} nodes, {a.reps} repetitions (median us per step)")
    for name, values in samples.items():
        print(f"  {name:18} {statistics.median(values) * 1e6:9.1f}")
    process_vs_raw = ratio("graphflow:process", "raw:NORMAL")
    fsync_vs_process = ratio("graphflow:fsync", "graphflow:process")
    print(f"  graphflow:process / raw:NORMAL  {process_vs_raw:.2f} (target <= 3)")
    print(f"  graphflow:fsync / graphflow:process  {fsync_vs_process:.2f}")
    from _results import emit, row

    def us(name: str) -> float:
        return statistics.median(samples[name]) * 1e6

    emit(
        "w1_durability",
        [
            row("W1 us/step, durability=process", us("graphflow:process"), "us"),
            row("W1 us/step, durability=fsync", us("graphflow:fsync"), "us"),
            row("W1 process / raw SQLite NORMAL (paired)", process_vs_raw, "x", "<= 3"),
            row("W1 fsync / process (paired)", fsync_vs_process, "x"),
        ],
    )


if __name__ == "__main__":
    main()
