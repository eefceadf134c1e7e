"""Many processes on one SQLite file: thread latency with 1, 2 and 4 processes.

    python benchmarks/processes.py [--threads 150] [--procs 1,2,4] [--reps 3]
                                   [--durability fsync,process]

Each repetition, per process count P, makes a new SQLite file and starts P worker
processes; each runs ``--threads`` independent threads of a three-node chain (each node one
fsync'd step) one after another, all processes at once (they start together on a signal).
A thread's latency is the wall time of its ``invoke``. Reported per P (median over
repetitions): p50, p99 and the longest latency, and the threads per second of all processes
together; and p99 with 4 processes over p99 with 1 (target: within 3x), and the longest
single latency with 4 (target: under 100 ms, the "no stall" goal; SQLite's own busy handler
sleeps up to 100 ms between tries, ``checkpoints/lockwait.py`` is why there is none).

One file has one writer at a time, so with ``fsync`` (the default: every step waits for its
fsync, and no two processes share one) the threads per second of all processes together
stay about those of one process, and each of P processes running its threads one after
another waits about P times as long per thread: the p99 ratio then measures the file's
single fsync'd writer more than the waiting for its lock. So both durabilities are run
(``--durability``): with ``process`` (steps wait for the operating system only) the
figures show the waiting itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent))


class Chain(TypedDict):
    n: int


def _step(state: Chain) -> Chain:
    return {"n": state["n"] + 1}


def child(db: str, name: str, threads: int, go: str, durability: str) -> None:
    """One worker process: wait for ``go``, then run the threads; print their latencies."""
    import anyio

    from checkpoints import SqliteCheckpointer
    from graphflow import END, START, StateGraph

    b = StateGraph(Chain)
    for node in ("a", "b", "c"):
        b.add_node(node, _step)
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    b.add_edge("b", "c")
    b.add_edge("c", END)
    cp = SqliteCheckpointer(db, busy_timeout=30.0, durability=durability)
    graph = b.compile(checkpointer=cp, evidence=False)
    graph.invoke({"n": 0}, thread_id=f"{name}-warm-up")
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    latencies = []
    for i in range(threads):
        t0 = time.perf_counter()
        out = graph.invoke({"n": 0}, thread_id=f"{name}-{i}")
        latencies.append(time.perf_counter() - t0)
        assert out.state["n"] == 3, out
    anyio.run(cp.close)
    print(json.dumps(latencies), flush=True)


def run(procs: int, threads: int, durability: str) -> tuple[list[float], float]:
    """All latencies of ``procs`` processes, and the seconds from the signal to the last end."""
    with tempfile.TemporaryDirectory() as d:
        db, go = os.path.join(d, "gf.db"), os.path.join(d, "go")
        import anyio

        from checkpoints import SqliteCheckpointer

        anyio.run(SqliteCheckpointer(db).setup)  # the file and its tables, before any child
        children = [
            subprocess.Popen(
                [sys.executable, __file__, "--child", db, f"p{i}", str(threads), go, durability],
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(procs)
        ]
        for c in children:
            assert c.stdout is not None and c.stdout.readline().strip() == "ready"
        t0 = time.perf_counter()
        Path(go).touch()
        latencies: list[float] = []
        for c in children:
            assert c.stdout is not None
            latencies += json.loads(c.stdout.readline())
            assert c.wait() == 0
        return latencies, time.perf_counter() - t0


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=150)
    p.add_argument("--procs", default="1,2,4")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--durability", default="fsync,process")
    a = p.parse_args()
    counts = [int(x) for x in a.procs.split(",")]
    rows: list[dict[str, object]] = []
    for durability in a.durability.split(","):
        if durability not in ("fsync", "process"):
            p.error(f"--durability takes fsync and/or process, not {durability!r}")
        rows += measure(counts, a.threads, a.reps, durability)
    from _results import emit

    emit("processes", rows)


def measure(counts: list[int], threads: int, reps: int, durability: str) -> list[dict[str, object]]:
    """Print the figures of one durability; its result rows (named with the durability
    unless it is the default)."""
    from _results import row

    figures: dict[int, dict[str, list[float]]] = {
        n: {"p50": [], "p99": [], "max": [], "tps": []} for n in counts
    }
    for _ in range(reps):
        for n in counts:
            lat, span = run(n, threads, durability)
            f = figures[n]
            f["p50"].append(_p(lat, 0.5))
            f["p99"].append(_p(lat, 0.99))
            f["max"].append(max(lat))
            f["tps"].append(len(lat) / span)
    med = {n: {k: statistics.median(v) for k, v in f.items()} for n, f in figures.items()}
    print(f"{threads} threads per process, {reps} repetitions (medians), durability={durability}")
    print(f"  {'procs':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'threads/s':>10}")
    for n in counts:
        m = med[n]
        print(f"  {n:5} {m['p50'] * 1e3:8.2f} {m['p99'] * 1e3:8.2f} {m['max'] * 1e3:8.2f}"
              f" {m['tps']:10.0f}")  # fmt: skip
    tag = "" if durability == "fsync" else f" (durability {durability})"
    rows = []
    if 1 in med and 4 in med:
        ratio = med[4]["p99"] / med[1]["p99"]
        print(f"  p99 4 processes / 1 process: {ratio:.2f} (target <= 3)")
        print(f"  longest latency, 4 processes: {med[4]['max'] * 1e3:.1f} ms (target < 100)")
        rows += [
            row(f"p99 thread latency, 4 processes / 1{tag}", ratio, "x", "<= 3"),
            row(f"longest thread latency, 4 processes{tag}", med[4]["max"] * 1e3, "ms", "< 100"),
        ]
    rows += [row(f"threads/s, {n} processes{tag}", med[n]["tps"], "1/s") for n in counts]
    return rows


if __name__ == "__main__":
    main()
