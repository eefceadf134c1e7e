"""Workers in real processes on one real SQLite file (API.md, "Worker"; DESIGN.md promise 3).

- Four worker processes, 200 paused and answered threads whose approved tool appends a line
  to an effects file: every thread's effect happens once, every thread ends done, and no
  thread is reported done by two workers.
- The same with one worker killed with SIGKILL mid-run (short lease): the others finish its
  threads, and still no effect happens twice.
- ``graphflow worker`` (run forever) given SIGTERM mid-run exits 0 and leaves no lease held;
  a worker run afterwards finishes what it stopped, nothing twice.

Children run ``_worker_graphs.py`` (the graph, the effects file, the worker loop) or the
``graphflow`` CLI with ``--graph _worker_graphs:graph``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import _worker_graphs as wg
import pytest

from checkpoints import SqliteCheckpointer
from checkpoints.models import ThreadId

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCRIPT = HERE / "_worker_graphs.py"
TIMEOUT = 120.0  # only guards against hangs, never asserted


def env(effects: Path, slow: float = 0.0) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), e.get("PYTHONPATH", "")])
    e["GRAPHFLOW_TEST_EFFECTS"] = str(effects)
    e["GRAPHFLOW_TEST_SLOW"] = str(slow)
    e["GRAPHFLOW_TEST_SYNC"] = "NORMAL"  # a SIGKILL loses nothing the OS has
    return e


def answered_threads(db: Path, n: int) -> list[str]:
    """``n`` threads paused on the effect call, each approved through ``submit``."""
    graph = wg.approval_builder().compile(
        checkpointer=SqliteCheckpointer(db, synchronous="OFF"), name=wg.NAME
    )
    tids = [f"t{i:03d}" for i in range(n)]
    for tid in tids:
        assert graph.invoke(wg.user(tid), thread_id=tid).status == "paused"
        graph.submit(tid, decisions={wg.CALL_ID: "approve"}, by="alice")
    return tids


def start_workers(db: Path, effects: Path, n: int, *args: str, slow: float = 0.0) -> list[Any]:
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), str(db), *args],
            env=env(effects, slow),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    return procs


def results(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def statuses(db: Path) -> dict[str, str]:
    graph = wg.approval_graph(db)
    return {t.thread_id: t.status for t in graph.list_threads()}


def no_lease_held(db: Path, tids: list[str]) -> None:
    import anyio

    async def check() -> None:
        cp = SqliteCheckpointer(db)
        try:
            for tid in tids:
                th = await cp.get_thread(ThreadId(tid))
                assert th is not None and th.lease_owner is None, (tid, th)
        finally:
            await cp.close()

    anyio.run(check)


def test_four_worker_processes_resume_200_threads_exactly_once(tmp_path: Path) -> None:
    db, effects = tmp_path / "flows.db", tmp_path / "effects"
    tids = answered_threads(db, 200)
    procs = start_workers(db, effects, 4, "--concurrency", "4")
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [e for _, e in outs]

    counts = Counter(t for t, _ in wg.effects(effects))
    assert counts == Counter(dict.fromkeys(tids, 1))  # each approved call ran once
    done = Counter(r["thread_id"] for out, _ in outs for r in results(out) if r["status"] == "done")
    assert done == Counter(dict.fromkeys(tids, 1))  # each thread resumed by one worker
    assert set(statuses(db).values()) == {"done"}
    workers = {pid for _, pid in wg.effects(effects)}
    assert len(workers) > 1  # the work was shared (not one process doing it all)
    no_lease_held(db, tids)


def test_a_worker_killed_mid_run_has_its_threads_finished_by_the_others(tmp_path: Path) -> None:
    db, effects = tmp_path / "flows.db", tmp_path / "effects"
    tids = answered_threads(db, 200)
    # The victim's notify sleeps after the tool ran: the kill lands in a thread whose
    # effect is done and recorded. The others wait for work for a while (--idle).
    args = ("--concurrency", "4", "--lease", "1", "--idle", "40")
    [victim] = start_workers(db, effects, 1, *args, slow=0.5)
    procs = [victim, *start_workers(db, effects, 3, *args)]
    deadline = time.monotonic() + TIMEOUT
    while not any(pid == victim.pid for _, pid in wg.effects(effects)):
        assert time.monotonic() < deadline and victim.poll() is None
        time.sleep(0.005)
    time.sleep(0.1)  # its outcome recorded; the thread is in notify (0.5 s)
    victim.send_signal(signal.SIGKILL)
    killed_out, _ = victim.communicate(timeout=TIMEOUT)
    outs = [p.communicate(timeout=TIMEOUT) for p in procs[1:]]
    assert [p.returncode for p in procs[1:]] == [0, 0, 0], [e for _, e in outs]

    lines = wg.effects(effects)
    counts = Counter(t for t, _ in lines)
    assert max(counts.values()) == 1  # no effect twice
    by_victim = {t for t, pid in lines if pid == victim.pid}
    done_by_victim = {r["thread_id"] for r in results(killed_out) if r["status"] == "done"}
    done_by_others = {
        r["thread_id"] for out, _ in outs for r in results(out) if r["status"] == "done"
    }
    assert not done_by_victim & done_by_others  # no thread resumed to the end twice
    recovered = (by_victim - done_by_victim) & done_by_others
    assert recovered  # threads the victim held, finished by the others
    final = statuses(db)
    assert set(final) == set(tids)
    unfinished = {t for t, s in final.items() if s != "done"}
    # Only a call the victim was dispatching may be left: its outcome is unknown, so it is
    # paused for a person (an ``unknown`` confirmation), never run again on its own.
    assert len(unfinished) <= 4
    graph = wg.approval_graph(db)
    for tid in unfinished:
        assert final[tid] == "paused"
        [pause] = graph.pending_pauses(tid)
        assert pause.kind == "tool_confirmation" and ":unknown:" in pause.id, pause
        assert all(pid == victim.pid for t, pid in lines if t == tid)
    assert set(counts) | unfinished == set(tids)


def sigterm_mid_run(db: Path, effects: Path, *options: str) -> tuple[int, str, str]:
    """Start ``graphflow worker OPTIONS --json`` on ``db``, send it SIGTERM once a tool ran
    (its thread's next node sleeps), and return its exit code, stdout and stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "graphflow", "worker", "--graph", "_worker_graphs:graph",
         "--db", str(db), *options, "--json"],
        env=env(effects, slow=0.5),
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + TIMEOUT
    while not wg.effects(effects):  # mid-run: a tool ran, notify sleeps
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=TIMEOUT)
    return proc.returncode, out, err


def finish_once_and_check(db: Path, effects: Path, tids: list[str]) -> None:
    """What a stopped worker left is runnable: a worker finishes it, nothing twice."""
    again = subprocess.run(
        [sys.executable, "-m", "graphflow", "worker", "--graph", "_worker_graphs:graph",
         "--db", str(db), "--once", "--json"],
        env=env(effects), cwd=HERE, capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert Counter(t for t, _ in wg.effects(effects)) == Counter(dict.fromkeys(tids, 1))
    assert set(statuses(db).values()) == {"done"}


def test_sigterm_stops_graphflow_worker_with_exit_0_and_no_lease_held(tmp_path: Path) -> None:
    db, effects = tmp_path / "flows.db", tmp_path / "effects"
    tids = answered_threads(db, 6)
    code, out, err = sigterm_mid_run(db, effects, "--concurrency", "2", "--poll-interval", "0.05")
    assert code == 0, err
    assert err.startswith("graphflow worker: resuming the threads of graph 'approvals' on ")
    assert err.count("\n") == 1  # (its start, nothing else)
    done = json.loads(out)  # one document: what it did, printed once it stopped
    assert isinstance(done, list) and all(r["status"] for r in done)
    assert len(done) < len(tids)  # it stopped: not everything was done
    no_lease_held(db, tids)
    finish_once_and_check(db, effects, tids)


def test_sigterm_stops_graphflow_worker_once_gracefully_with_its_json(tmp_path: Path) -> None:
    db, effects = tmp_path / "flows.db", tmp_path / "effects"
    tids = answered_threads(db, 4)
    code, out, err = sigterm_mid_run(db, effects, "--once")
    assert code == 0, err  # not 143: the step in flight was finished
    done = json.loads(out)
    # The step in flight was finished: the thread ended done if it was its last, else it
    # was left paused, and runnable, between steps (never "running" with no owner).
    stopped = [r for r in done if r["status"] == "paused" and "worker stopped" in r["error"]]
    assert all(r["status"] == "done" for r in done if r not in stopped), done
    assert len(stopped) <= 1 and len(done) < len(tids), done
    no_lease_held(db, tids)
    assert "running" not in statuses(db).values()
    finish_once_and_check(db, effects, tids)
