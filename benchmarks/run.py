"""Run graphflow's benchmark suite and write one results table.

    python benchmarks/run.py [--quick] [--only NAME,...] [--out DIR]

Runs each benchmark of this directory in a process of its own (this tree first on the path,
bytecode cached outside the tree, as an installed application has it), prints its own
report as it goes, and ends with one table of every figure: ``DIR/results.json`` and
``DIR/results.md`` (default ``DIR``: ``bench-results`` in the current directory).

- ``policy_eval``: one policy evaluation, p50 and p90 (50 rules);
- ``agent_pipeline``: an agent run with the full authorization pipeline vs
  ``require_confirmation`` only (paired ratio);
- ``cli_startup``: ``graphflow --help`` and ``graphflow threads --json`` on 1,000 threads,
  each a new process;
- ``evidence_verify``: ``verify`` of 100,000 evidence events (target under 5 s) and the
  latency of one durable append;
- ``paused_threads``: 100,000 paused threads in one SQLite file: the first page of 100
  (target under 2 ms), counting them (under 20 ms), the full listing, unpaged and paged
  (under 50 ms), and the bytes per paused thread;
- ``w7_approval``: W7, an approval flow across processes, graphflow with evidence on and off
  vs LangGraph (skipped, with a note in the table, when LangGraph is not installed:
  ``pip install -e '.[bench]'``);
- ``w1_durability``: W1 (a chain of 50 steps) with ``durability="fsync"`` and ``"process"``
  vs a raw SQLite store at ``synchronous=NORMAL`` and ``FULL`` (paired ratios);
- ``chat_history``: a 10,000-step chat loop: file size against a raw store that appends each
  message, the longest step against the median, reading the latest state;
- ``processes``: 1, 2 and 4 processes running threads on one SQLite file: p50/p99/longest
  thread latency and total throughput;
- ``w8_worker``: W8, 1,000 answered threads resumed by one worker process at concurrency 1,
  8 and 32 vs LangGraph's loop of ``Command(resume=...)``.

``--quick`` runs fewer repetitions (a smoke run; the figures are noisier). Compare only
figures of one run: the ratios are paired within it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _results import RESULTS_ENV  # noqa: E402

BENCHMARKS: dict[str, tuple[list[str], list[str]]] = {
    # name: (arguments, arguments with --quick)
    "policy_eval": ([], ["--requests", "5000"]),
    "agent_pipeline": ([], ["--reps", "60"]),
    "cli_startup": ([], ["--runs", "5"]),
    "evidence_verify": ([], ["--appends", "100"]),
    "paused_threads": ([], ["--threads", "10000", "--reps", "3"]),
    "w7_approval": ([], ["--reps", "3"]),
    "w8_worker": ([], ["--threads", "100", "--reps", "1"]),
    "w1_durability": ([], ["--reps", "3"]),
    "processes": ([], ["--threads", "40", "--reps", "1"]),
    "chat_history": ([], ["--steps", "1000"]),
}


def environment() -> dict[str, str]:
    """The benchmarks' environment: this tree first on the path, bytecode cached outside it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "graphflow-bench-pycache")
    return env


def run_one(name: str, args: list[str], results: str) -> dict[str, Any]:
    """Run one benchmark, its report going to this process's stdout; its rows and how it
    ended."""
    print(f"\n== {name} {' '.join(args)}".rstrip(), flush=True)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(HERE / f"{name}.py"), *args],
        env={**environment(), RESULTS_ENV: results},
        cwd=str(ROOT),
        check=False,
    )
    took = time.perf_counter() - start
    rows: list[dict[str, Any]] = []
    if os.path.exists(results):
        with open(results, encoding="utf-8") as f:
            for line in f:
                rows.extend(json.loads(line)["rows"])
        os.remove(results)
    error = None if proc.returncode == 0 else f"exit code {proc.returncode}"
    if error is not None:
        print(f"!! {name} failed ({error})", flush=True)
    return {"name": name, "args": args, "seconds": round(took, 1), "error": error, "rows": rows}


def markdown(done: list[dict[str, Any]]) -> str:
    """The results as one markdown table."""
    lines = ["| benchmark | metric | value | unit | target | note |",
             "| --- | --- | ---: | --- | --- | --- |"]  # fmt: skip
    for bench in done:
        if bench["error"] is not None:
            lines.append(f"| {bench['name']} | (failed) | | | | {bench['error']} |")
        for r in bench["rows"]:
            value = "" if r["value"] is None else f"{r['value']:g}"
            cells = (bench["name"], r["metric"], value, r["unit"] or "", r["target"] or "",
                     r["note"] or "")  # fmt: skip
            lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated names")
    parser.add_argument("--out", default="bench-results", help="where results.json/.md go")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHMARKS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = str(out / ".rows.jsonl")
    if os.path.exists(results):
        os.remove(results)
    done = [run_one(n, BENCHMARKS[n][1 if args.quick else 0], results) for n in names]
    document = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cpus",
        "quick": args.quick,
        "benchmarks": done,
    }
    (out / "results.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    table = markdown(done)
    (out / "results.md").write_text(table, encoding="utf-8")
    print(f"\n{table}\nwritten: {out / 'results.json'}, {out / 'results.md'}")
    return 1 if any(b["error"] for b in done) else 0


if __name__ == "__main__":
    sys.exit(main())
