"""How long ``graphflow --help`` and ``graphflow threads --json`` take, each a new process.

    python benchmarks/cli_startup.py [--threads 1000] [--runs 15] [--no-pycache]

Generates a database of ``--threads`` threads (a third of them paused at an interrupt, the
rest done) in a temporary directory, then runs each command ``--runs`` times with
``python -m graphflow`` and prints the median and best wall time in milliseconds, next to
a bare ``python -c pass`` (the interpreter's own start-up, which every command pays).
Not part of the test suite; the target is under 300 ms for both commands on 1,000 threads.

Each command runs once first, to warm the file cache and write bytecode, as an installed
package has it: bytecode goes to a directory of the temporary one (``PYTHONPYCACHEPREFIX``),
even where ``PYTHONDONTWRITEBYTECODE`` is set. With ``--no-pycache`` the environment is
kept as it is: with ``PYTHONDONTWRITEBYTECODE`` set, every run compiles the sources of
graphflow and checkpoints again (about as long as importing them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import TypedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _results import emit, row

from checkpoints import SqliteCheckpointer
from graphflow import END, START, StateGraph, interrupt


class State(TypedDict, total=False):
    n: int
    answer: str


def step(state: State) -> State:
    return {"n": state.get("n", 0) + 1}


def ask(state: State) -> State:
    return {"answer": str(interrupt("ok?"))}


def generate(path: str, count: int) -> None:
    """``count`` threads on ``path``: every third one paused, the others done."""
    done = StateGraph(State).add_node(step).add_edge(START, "step").add_edge("step", END)
    paused = StateGraph(State).add_node(step).add_node(ask)
    paused.add_edge(START, "step").add_edge("step", "ask").add_edge("ask", END)
    store = SqliteCheckpointer(path, synchronous="OFF")  # durability is not measured here
    graphs = (paused.compile(checkpointer=store), done.compile(checkpointer=store))
    for i in range(count):
        graphs[0 if i % 3 == 0 else 1].invoke({"n": i}, thread_id=f"thread-{i:05d}")


def timed(argv: list[str], runs: int, cwd: str, env: dict[str, str]) -> list[float]:
    """Wall times in milliseconds of ``runs`` runs of ``argv`` (which must succeed)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              check=False)  # fmt: skip
        times.append((time.perf_counter() - start) * 1000)
        if proc.returncode != 0:
            raise SystemExit(f"{argv} failed ({proc.returncode}): {proc.stderr.strip()}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument(
        "--no-pycache", action="store_true", help="keep PYTHONDONTWRITEBYTECODE if it is set"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "bench.db")
        generate(db, args.threads)
        env = dict(os.environ)
        if not args.no_pycache:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        bytecode = "no cached bytecode" if "PYTHONDONTWRITEBYTECODE" in env else "bytecode"
        cli = [sys.executable, "-m", "graphflow"]
        listing = f"graphflow threads --json ({args.threads} threads)"
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "graphflow --help": [*cli, "--help"],
            listing: [*cli, "threads", "--json", "--db", db],
        }
        for argv in cases.values():
            timed(argv, 1, tmp, env)  # warm the file cache and bytecode
        print(f"{'command (' + bytecode + ')':<44} {'median ms':>10} {'best ms':>8}")
        rows = []
        for name, argv in cases.items():
            times = timed(argv, args.runs, tmp, env)
            print(f"{name:<44} {statistics.median(times):>10.1f} {min(times):>8.1f}")
            target = None if name == "python -c pass" else "< 300"
            note = f"median of {args.runs}, best {min(times):.1f}, {bytecode}"
            rows.append(row(name, round(statistics.median(times), 1), "ms", target, note))
        emit("cli_startup", rows)


if __name__ == "__main__":
    main()
