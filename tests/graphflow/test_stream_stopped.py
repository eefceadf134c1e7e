"""A stream whose reader stops reading (a ``break`` out of ``graph.stream``, a Ctrl-C of
``graphflow run``) stops the run after the step it committed, and leaves the thread
``paused`` with its pending work and no pending pause: ``invoke(None)`` continues it, each
node run once. It was left ``failed``, with no error."""

from __future__ import annotations

import contextlib
import operator
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from checkpoints import Checkpointer, MemoryCheckpointer, SqliteCheckpointer
from graphflow import END, START, StateGraph


class S(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def chain(store: Checkpointer, calls: Counter[str]) -> Any:
    def node(name: str) -> Any:
        def run(s: S) -> S:
            calls[name] += 1
            return {"log": [name]}

        return run

    b = StateGraph(S)
    for name in ("a", "b", "c", "d"):
        b.add_node(name, node(name))
    b.add_edge(START, "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", "d")
    return b.add_edge("d", END).compile(checkpointer=store)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Checkpointer:
    return (
        MemoryCheckpointer() if request.param == "memory" else SqliteCheckpointer(tmp_path / "x.db")
    )


@pytest.mark.parametrize("mode", ["values", "updates", "debug"])
def test_a_break_out_of_a_stream_leaves_the_thread_paused_to_continue(
    store: Checkpointer, mode: str
) -> None:
    calls: Counter[str] = Counter()
    graph = chain(store, calls)
    for _ in graph.stream({"log": []}, thread_id="t", mode=mode):
        break
    [info] = graph.list_threads()
    assert (info.status, info.pending_pauses) == ("paused", 0)
    snap = graph.get_state("t")
    assert snap.next and snap.values["log"] == [n for n in "abcd" if calls[n]]
    done = graph.invoke(None, thread_id="t")
    assert done.status == "done" and done.state["log"] == ["a", "b", "c", "d"]
    assert calls == {"a": 1, "b": 1, "c": 1, "d": 1}  # (none ran twice)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["values", "updates"])
async def test_an_astream_closed_early_leaves_the_thread_paused(
    store: Checkpointer, mode: str
) -> None:
    """``aclosing`` around ``astream`` and a break: closing raised a group holding the
    ``GeneratorExit``; now the run stops after its step, as with ``stream``."""
    calls: Counter[str] = Counter()
    graph = chain(store, calls)
    async with contextlib.aclosing(graph.astream({"log": []}, thread_id="t", mode=mode)) as s:
        async for _ in s:
            break
    [info] = await graph.alist_threads()
    assert (info.status, info.pending_pauses) == ("paused", 0)
    done = await graph.ainvoke(None, thread_id="t")
    assert done.status == "done" and done.state["log"] == ["a", "b", "c", "d"]
    assert calls == {"a": 1, "b": 1, "c": 1, "d": 1}


SLEEPY = """
import time
from typing import TypedDict
from graphflow import END, START, StateGraph

class S(TypedDict, total=False):
    x: int

def slow(s):
    time.sleep(1.5)
    return {"x": 1}

b = StateGraph(S).add_node("slow", slow).add_node("after", lambda s: {"x": 2})
graph = b.add_edge(START, "slow").add_edge("slow", "after").add_edge("after", END).compile()
"""


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_of_graphflow_run_leaves_the_thread_paused(tmp_path: Path, as_json: bool) -> None:
    """With ``--json`` too (it stopped the node mid-step, the thread left running)."""
    (tmp_path / "sleepy.py").write_text(SLEEPY)
    env = {k: v for k, v in os.environ.items() if k != "GRAPHFLOW_DB"}
    cmd = [sys.executable, "-m", "graphflow", "--db", "s.db"]
    json_flag = ["--json"] if as_json else []
    run = subprocess.Popen(
        [*cmd, "run", "--graph", "sleepy:graph", "--thread", "s", "--input", "{}", *json_flag],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    time.sleep(0.8)  # (while "slow" sleeps; the run ends once it returns)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130 and "Traceback" not in err, err
    listed = subprocess.run([*cmd, "threads"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, check=True).stdout  # fmt: skip
    [row] = listed.splitlines()[1:]
    assert row.split()[:3] == ["s", "paused", "0"], listed
    resumed = subprocess.run([*cmd, "resume", "s", "--graph", "sleepy:graph"], cwd=tmp_path,
                             env=env, capture_output=True, text=True)  # fmt: skip
    assert resumed.returncode == 0 and '"x": 2' in resumed.stdout, resumed


STUCK = """
import os, pathlib, time
from typing import TypedDict
from graphflow import END, START, StateGraph

class S(TypedDict, total=False):
    x: int

def slow(s):
    pathlib.Path("started").write_text("")
    time.sleep(float(os.environ.get("SLOW", "0")))
    pathlib.Path("ended").write_text("")
    return {"x": 1}

b = StateGraph(S).add_node("slow", slow).add_node("after", lambda s: {"x": 2})
graph = b.add_edge(START, "slow").add_edge("slow", "after").add_edge("after", END).compile()
"""


def test_a_second_ctrl_c_of_graphflow_run_stops_it_at_once(tmp_path: Path) -> None:
    """The first Ctrl-C says the run stops after the step under way; the second stops the
    process without waiting for the node (as a kill would): the thread is left running,
    its owner gone, and the next run takes it over and runs that step again."""
    (tmp_path / "stuck.py").write_text(STUCK)
    env = {k: v for k, v in os.environ.items() if k != "GRAPHFLOW_DB"}
    cmd = [sys.executable, "-m", "graphflow", "--db", "s.db"]
    run = subprocess.Popen(
        [*cmd, "run", "--graph", "stuck:graph", "--thread", "s", "--input", "{}"],
        cwd=tmp_path, env={**env, "SLOW": "600"}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    while not (tmp_path / "started").exists():
        time.sleep(0.02)
    run.send_signal(signal.SIGINT)
    assert run.stderr is not None
    said, _, _ = select.select([run.stderr], [], [], 60)
    first = run.stderr.readline() if said else "(nothing said within a minute)"
    run.send_signal(signal.SIGINT)
    try:
        _, err = run.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        run.kill()
        raise
    assert first.startswith("graphflow: stopping after the step under way"), first
    assert run.returncode == 130 and "Traceback" not in err, err
    assert err.startswith("graphflow: error: interrupted at once: thread 's' is left running")
    assert "`graphflow resume s --graph stuck:graph --db s.db` runs it again" in err
    assert not (tmp_path / "ended").exists()  # the node was not waited for
    resumed = subprocess.run([*cmd, "resume", "s", "--graph", "stuck:graph"], cwd=tmp_path,
                             env=env, capture_output=True, text=True)  # fmt: skip
    assert resumed.returncode == 0 and '"x": 2' in resumed.stdout, resumed
