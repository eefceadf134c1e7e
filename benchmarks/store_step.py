"""CPU instructions per step of a chain of SQLite steps (the shared benchmark's W1 shape).

Wall-clock times are noisy on a shared machine; callgrind's instruction counts repeat to
within a fraction of a percent, so store changes are decided with them::

    python benchmarks/store_step.py              # instructions per step, under callgrind
    python benchmarks/store_step.py --run N      # one chain of N steps (what callgrind runs)

Each process builds a short and a long chain and runs each once as a warm-up (imports,
schema, prepared statements and the lease keeper's thread are then paid for), then runs one
of them again; the per-step figure is the difference of the two processes' totals divided
by the difference in steps, so that start-up costs cancel. ``--memory`` measures the same
chain on ``MemoryCheckpointer`` (the engine without the SQLite store).
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys
import tempfile
from typing import TypedDict

SHORT, LONG = 10, 60


class ChainState(TypedDict):
    counter: int


def _inc(s: ChainState) -> dict[str, int]:
    return {"counter": s["counter"] + 1}


def _chain(steps: int):  # type: ignore[no-untyped-def]
    from graphflow import END, START, StateGraph

    b = StateGraph(ChainState)
    names = [f"n{i}" for i in range(steps)]
    for nm in names:
        b.add_node(nm, _inc)
    b.add_edge(START, names[0])
    for a, c in itertools.pairwise(names):
        b.add_edge(a, c)
    b.add_edge(names[-1], END)
    return b


def run(steps: int, memory: bool) -> None:
    """Warm up a short and a long chain on one store, then run the one of ``steps``."""
    from checkpoints import MemoryCheckpointer, SqliteCheckpointer

    with tempfile.TemporaryDirectory() as d:
        cp = MemoryCheckpointer() if memory else SqliteCheckpointer(os.path.join(d, "gf.sqlite"))
        graphs = {n: _chain(n).compile(checkpointer=cp) for n in (SHORT, LONG)}
        for n, g in graphs.items():
            g.invoke({"counter": 0}, thread_id=f"warm-up-{n}")
        out = graphs[steps].invoke({"counter": 0}, thread_id="measured")
        assert out.state["counter"] == steps, out


def _instructions(steps: int, memory: bool) -> int:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        cmd = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--separate-threads=yes",
            sys.executable, __file__, "--run", str(steps), *(["--memory"] if memory else []),
        ]  # fmt: skip
        # One BLAS thread: numpy (which the schema migration's sqlite-utils imports) would
        # otherwise start spinning threads whose instructions swamp the store's.
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        subprocess.run(cmd, check=True, capture_output=True, env=env)
        # The main thread's alone: the lease keeper's thread wakes every second, so its
        # count follows the wall-clock time the run took under callgrind, not the run.
        with open(f"{out}-01", encoding="utf-8") as f:
            text = f.read()
    found = re.search(r"^summary:\s+(\d+)", text, re.M)
    assert found, "no callgrind summary"
    return int(found.group(1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--run", type=int, help="run one chain of this many steps")
    p.add_argument("--memory", action="store_true", help="MemoryCheckpointer instead")
    a = p.parse_args()
    if a.run is not None:
        run(a.run, a.memory)
        return
    short, long = _instructions(SHORT, a.memory), _instructions(LONG, a.memory)
    per_step = (long - short) / (LONG - SHORT)
    print(f"instructions per step: {per_step:,.0f} ({SHORT}: {short:,}, {LONG}: {long:,})")


if __name__ == "__main__":
    main()
