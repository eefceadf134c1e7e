"""The benchmark suite runs: ``benchmarks/run.py`` writes its table, and W7's flows (an
approval across processes) do what they claim before anything is timed."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def w7(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCH))
    import w7_approval

    return w7_approval


def test_run_writes_one_table_of_every_figure(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--quick", "--only", "policy_eval",
         "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    document = json.loads((out / "results.json").read_text())
    [bench] = document["benchmarks"]
    assert bench["name"] == "policy_eval" and bench["error"] is None
    metrics = {r["metric"]: r for r in bench["rows"]}
    p50 = metrics["policy evaluation p50 (50 rules)"]
    assert p50["value"] > 0 and p50["unit"] == "us" and p50["target"] == "<= 25"
    table = (out / "results.md").read_text()
    assert table.startswith("| benchmark | metric | value |")
    assert "| policy_eval | policy evaluation p50 (50 rules) |" in table
    assert table in proc.stdout


def test_run_refuses_an_unknown_benchmark(tmp_path: pathlib.Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--only", "nope", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "unknown benchmark" in proc.stderr


@pytest.mark.parametrize("variant", ["graphflow:evidence", "graphflow:no-evidence"])
def test_a_w7_flow_approves_in_a_new_process_and_runs_the_call_once(
    w7: Any, variant: str, tmp_path: pathlib.Path
) -> None:
    result = w7.flow(variant, str(tmp_path), 0)
    assert result["problem"] is None
    assert result["in_process_s"] > 0 and result["wall_s"] > result["in_process_s"]


def test_a_w7_check_finds_a_flow_that_did_not_run(w7: Any, tmp_path: pathlib.Path) -> None:
    db = str(tmp_path / "w7.db")
    w7.spawn("graphflow:evidence", "prepare", db, str(tmp_path / "fx"), "w7")
    w7.spawn("graphflow:evidence", "start", db, str(tmp_path / "fx"), "w7")  # never approved
    problem = w7.graphflow_check("graphflow:evidence", db, "w7")
    assert problem is not None and "unexpected trail" in problem


def test_w7_without_langgraph_says_so_in_the_table(
    w7: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(w7, "find_spec", lambda name: None)
    available, note = w7.langgraph_available()
    assert available is False and "not installed" in note and "[bench]" in note
    result = {
        "ratios": {"evidence on/off in-process": {"median": 1.2, "min": 1.1, "max": 1.3}},
        "bare_wall_ms": {"graphflow": 300.0},
        "langgraph": note,
        "problems": [],
    }
    rows = w7.rows(result)
    assert [r["metric"] for r in rows] == ["W7 evidence on/off in-process", "W7 LangGraph"]
    assert rows[1]["note"] == note


def test_paused_threads_reads_every_thread_it_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    """The benchmark's setup makes paused threads as the graph stores them, and each timed
    read returns what it claims (a small store: nothing is timed here)."""
    monkeypatch.syspath_prepend(str(BENCH))
    import anyio
    import paused_threads

    path = str(tmp_path / "paused.db")
    paused_threads.build(path, 250)
    results = anyio.run(paused_threads.measure, path, 250, 1)
    assert [what for what, *_ in results] == [
        "first page of 100", "count_threads('paused')", "full listing, unpaged",
        "full listing, pages of 1,000", "full listing, pages of 100",
    ]  # fmt: skip
    assert all(median > 0 and target > 0 for _, median, _, target in results)
