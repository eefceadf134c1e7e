"""Graphs and a subprocess entry point for ``test_durability.py``.

Imported by the tests (graph builders, reference runs, effect-file parsing) and run as a
script in child processes: ``python _durability_worker.py '<json spec>'``, or forked by
``python _durability_worker.py serve`` (see ``serve``). A spec lists jobs; a job names a
graph, a SQLite file, a thread id, a side-effect file and a list of actions. The script
prints ``READY`` just before the first action, then one JSON line with the outcome of
every action.

Side effects: every node appends ``"<node> <event> <pid>"`` lines (``enter`` when it starts,
``exit`` when it returns, and markers) to an effects file with ``O_APPEND`` and ``fsync``,
so a parent can count executions across processes and kills, and wait for a marker.
"""

from __future__ import annotations

import json
import operator
import os
import signal
import sqlite3
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, TypedDict

import anyio

from checkpoints import SqliteCheckpointer
from checkpoints.sqlite import wal as _wal
from graphflow import END, START, NodeContext, StateGraph, interrupt
from graphflow.reducers import append

INPUT: dict[str, Any] = {"x": 7}
ANSWER = "approved"

Record = Callable[[str, str], None]
"""``record(node, event)``: note a side effect."""


class State(TypedDict):
    log: Annotated[list[str], append]
    total: Annotated[int, operator.add]
    x: int


# -- side effects ----------------------------------------------------------------------------
def file_recorder(path: str | os.PathLike[str]) -> Record:
    """A ``Record`` appending durable lines to ``path`` (survives a SIGKILL right after)."""
    target = os.fspath(path)
    pid = os.getpid()

    def record(node: str, event: str) -> None:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{node} {event} {pid}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    return record


class MemoryRecorder:
    """A ``Record`` counting events in memory (for in-process tests)."""

    def __init__(self) -> None:
        self.events: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def __call__(self, node: str, event: str) -> None:
        with self._lock:
            self.events[(node, event)] += 1

    def entries(self) -> Counter[str]:
        return Counter({n: c for (n, e), c in self.events.items() if e == "enter"})


def read_effects(path: str | os.PathLike[str]) -> list[tuple[str, str, int]]:
    """The lines of an effects file as ``(node, event, pid)``; a missing file is empty."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        node, event, pid = line.split(" ")
        out.append((node, event, int(pid)))
    return out


def entries(path: str | os.PathLike[str]) -> Counter[str]:
    """How many times each node was entered, from an effects file."""
    return Counter(n for n, e, _ in read_effects(path) if e == "enter")


def _wait_for(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _line(name: str, state: Any, *extra: Any) -> str:
    parts = [name, str(len(state["log"])), str(state["total"]), str(state["x"]), *map(str, extra)]
    return ":".join(parts)


# -- graph 1: a -> (b, c: step_once + interrupt) -> d ----------------------------------------
def pause_graph(
    record: Record,
    *,
    c_after_answer: float = 0.0,
    coordinate: Callable[[], Awaitable[None]] | None = None,
) -> StateGraph:
    """``a -> (b, c) -> d``; ``c`` runs a memoized step, then calls ``interrupt()``.

    Weights of ``total`` (1, 10, 100, 1000) show every write was applied exactly once; log
    lines record the state each node saw (promise 7). ``c_after_answer``: seconds ``c``
    sleeps once it has its answer (keeps the lease held, for races). ``b`` returns only
    after ``c``'s memoized step is done, and ``c`` awaits ``coordinate()`` (when given)
    before it interrupts the first time: fault-injection tests use both to fix the order
    of the parallel step's commits (memo, ``b``'s record, ``c``'s pause).
    """
    prepped = threading.Event()

    def a(state: State) -> dict[str, Any]:
        record("a", "enter")
        return {"log": [_line("a", state)], "total": 1, "x": state["x"] + 1}

    def b(state: State) -> dict[str, Any]:
        record("b", "enter")
        prepped.wait(5)
        return {"log": [_line("b", state)], "total": 10}

    def prep(x: int) -> str:
        record("c.prep", "enter")
        return f"prep{x * 3}"

    async def c(state: State, ctx: NodeContext) -> dict[str, Any]:
        record("c", "enter")
        try:
            prepared = await ctx.step_once("prep", prep, state["x"])
        finally:
            prepped.set()
        answered, _ = ctx.answer("i0")
        if not answered and coordinate is not None:
            await coordinate()
        answer = interrupt({"question": "ok?", "x": state["x"]})
        record("c", "answered")
        if c_after_answer:
            await anyio.sleep(c_after_answer)
        return {"log": [_line("c", state, prepared, answer)], "total": 100}

    def d(state: State) -> dict[str, Any]:
        record("d", "enter")
        return {"log": [_line("d", state)], "total": 1000}

    builder = StateGraph(State)
    for name, fn in (("a", a), ("b", b), ("c", c), ("d", d)):
        builder.add_node(name, fn)
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("a", "c")
    builder.add_edge(["b", "c"], "d")
    builder.add_edge("d", END)
    return builder


PAUSE_FINAL: State = {
    "log": [
        "a:0:0:7",
        "b:1:1:8",
        f"c:1:1:8:prep24:{ANSWER}",
        "d:3:111:8",
    ],
    "total": 1111,
    "x": 8,
}
"""The final state of ``pause_graph`` from ``INPUT`` answered with ``ANSWER``."""


# -- graph 2: a -> (fast, slow) -> j -> e -> f -> g -----------------------------------------
LONG_NODES = ("a", "fast", "slow", "j", "e", "f", "g")


def long_graph(
    record: Record,
    *,
    step: float = 0.03,
    slow: float = 0.2,
    block: str | None = None,
    release: str | None = None,
    watch_fast: tuple[str, str] | None = None,
) -> StateGraph:
    """Six supersteps with a parallel step where ``slow`` sleeps and ``fast`` does not.

    ``block``/``release``: that node waits (after ``enter``) until the file ``release``
    exists (up to 60 s). ``watch_fast=(db, thread_id)``: ``slow`` waits until ``fast``'s
    completed task record is committed in the store, then writes the marker
    ``slow fast-committed`` and sleeps 10 s; a parent killing the process on that marker
    kills it right after a task's commit, before the step's checkpoint.
    """
    weights = dict(zip(LONG_NODES, (1, 2, 4, 8, 16, 32, 64), strict=True))
    naps = {n: step for n in LONG_NODES} | {"fast": 0.0, "slow": slow}

    def node(name: str) -> Callable[[State], dict[str, Any]]:
        def fn(state: State) -> dict[str, Any]:
            record(name, "enter")
            if name == block and release is not None:
                _wait_for(lambda: os.path.exists(release), 60)
            if (
                name == "slow"
                and watch_fast is not None
                and _wait_for(lambda: _fast_committed(*watch_fast), 20)
            ):
                record(name, "fast-committed")
                time.sleep(10)  # a wide window for the parent's SIGKILL (never waited out)
            if naps[name]:
                time.sleep(naps[name])
            out = {"log": [_line(name, state)], "total": weights[name]}
            if name in ("a", "e"):
                out["x"] = state["x"] * 2 + 1
            record(name, "exit")
            return out

        fn.__name__ = name
        return fn

    builder = StateGraph(State)
    for n in LONG_NODES:
        builder.add_node(n, node(n))
    builder.add_edge(START, "a")
    builder.add_edge("a", "fast")
    builder.add_edge("a", "slow")
    builder.add_edge(["fast", "slow"], "j")
    for src, dst in (("j", "e"), ("e", "f"), ("f", "g"), ("g", END)):
        builder.add_edge(src, dst)
    return builder


LONG_FINAL: State = {
    "log": [
        "a:0:0:7",
        "fast:1:1:15",
        "slow:1:1:15",
        "j:3:7:15",
        "e:4:15:15",
        "f:5:31:31",
        "g:6:63:31",
    ],
    "total": 127,
    "x": 31,
}
"""The final state of ``long_graph`` from ``INPUT``."""


def _fast_committed(db: str, thread_id: str) -> bool:
    conn = sqlite3.connect(db, timeout=5)
    try:
        row = conn.execute(
            "SELECT count(*) FROM gf_tasks WHERE thread_id = ? AND node = 'fast'"
            " AND status = 'completed'",
            (thread_id,),
        ).fetchone()
        return bool(row[0])
    except sqlite3.OperationalError:  # tables not created yet
        return False
    finally:
        conn.close()


GRAPHS: dict[str, Callable[..., StateGraph]] = {"pause": pause_graph, "long": long_graph}


# -- running ------------------------------------------------------------------------------------
def drive(graph: Any, thread_id: str) -> Any:
    """Take a thread to its end from wherever it is, as a user recovering it would.

    No head yet (never started, or the input commit did not happen): give the input again.
    Paused: answer with ``ANSWER``. Otherwise: ``invoke(None)`` continues the run.
    """
    for _ in range(20):
        snap = graph.get_state(thread_id)
        if snap is None:
            result = graph.invoke(INPUT, thread_id=thread_id)
        elif snap.pauses:
            result = graph.invoke(None, thread_id=thread_id, resume=ANSWER)
        else:
            result = graph.invoke(None, thread_id=thread_id)
        if result.status == "done":
            return result
    raise AssertionError(f"thread {thread_id!r} did not finish")


def _act(graph: Any, thread_id: str, action: str) -> dict[str, Any]:
    try:
        if action == "input":
            result = graph.invoke(INPUT, thread_id=thread_id)
        elif action == "resume":
            result = graph.invoke(None, thread_id=thread_id, resume=ANSWER)
        elif action == "continue":
            result = graph.invoke(None, thread_id=thread_id)
        elif action == "finish":
            result = drive(graph, thread_id)
        else:
            raise ValueError(action)
    except Exception as e:
        out: dict[str, Any] = {"error": type(e).__name__, "message": str(e)}
        try:
            snap = graph.get_state(thread_id)
        except Exception as e2:  # reported, not hidden
            out["after"] = {"error": type(e2).__name__}
        else:
            out["after"] = None if snap is None else {"state": snap.values, "next": snap.next}
        return out
    return {"status": result.status, "state": result.state}


def _die_after_room(when: str) -> None:
    """Make this process kill itself (SIGKILL) right after it writes zeros into the WAL,
    inside the transaction that holds the write lock, before anything of it is committed:
    ``when`` is ``"empty"`` (room given to a new WAL: it then holds zeros only) or
    ``"grow"`` (room past the frames of a WAL that holds some)."""
    real = _wal.make_room

    def make_room(fd: int | None) -> int:
        empty = _wal.size(fd) == 0
        written = real(fd)
        if written and empty == (when == "empty"):
            os.kill(os.getpid(), signal.SIGKILL)
        return written

    _wal.make_room = make_room


def run_job(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Build the job's graph on a new ``SqliteCheckpointer`` and run its actions."""
    if job.get("die_after_room"):
        _die_after_room(job["die_after_room"])
    record = file_recorder(job["effects"])
    opts = dict(job.get("opts", {}))
    if "watch_fast" in opts:
        opts["watch_fast"] = tuple(opts["watch_fast"])
    cp = SqliteCheckpointer(job["db"], durability=job.get("durability", "fsync"))
    graph = GRAPHS[job["graph"]](record, **opts).compile(
        checkpointer=cp, lease_ttl=job.get("lease_ttl", 30.0)
    )
    try:
        return [_act(graph, job["tid"], a) for a in job["actions"]]
    finally:
        anyio.run(cp.close)


def run_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Run a spec's jobs and report.

    ``ready``: a file to create first; ``barrier``: a file to wait for before running (to
    start several processes together); ``parallel``: run the jobs in that many threads,
    one event loop each.
    """
    if spec.get("ready"):
        Path(spec["ready"]).touch()
    if spec.get("barrier"):
        _wait_for(lambda: os.path.exists(spec["barrier"]), 60)
    jobs = spec["jobs"]
    if spec.get("parallel"):
        with ThreadPoolExecutor(spec["parallel"]) as pool:
            results = list(pool.map(run_job, jobs))
    else:
        results = [run_job(j) for j in jobs]
    return {"pid": os.getpid(), "results": results}


def main(argv: list[str]) -> None:
    """``<json spec>``: run it, printing ``READY`` then the JSON report on stdout."""
    spec = json.loads(argv[1])
    print("READY", flush=True)
    print(json.dumps(run_spec(spec)), flush=True)


# -- fork server ----------------------------------------------------------------------------------
def serve() -> None:
    """Fork a child per request, from a process that already imported everything.

    Starting an interpreter and importing graphflow takes over a second; a kill test needs
    dozens of runs. The server imports and compiles once, never runs a graph and has one
    thread, so each forked child is a fresh runner: no event loop, no connection, no pool.
    Requests on stdin, one JSON line each, answered with one line on stdout:
    ``{"op": "spawn", "spec": {...}, "out": path}`` -> ``{"pid": n}`` (the child writes
    its report to ``out``); ``{"op": "wait", "pid": n}`` -> ``{"code": returncode}``;
    ``{"op": "wait_dead", "pid": n}``: wait until it died, leave it a zombie -> ``{}``.
    """
    import anyio._backends._asyncio  # noqa: F401  (what a first invoke would import)

    for make in GRAPHS.values():
        make(lambda node, event: None).compile()  # imports validation (networkx)
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "spawn":
            pid = os.fork()
            if pid == 0:
                _child(req["spec"], req["out"])
            reply: dict[str, Any] = {"pid": pid}
        elif req["op"] == "wait":
            _, status = os.waitpid(req["pid"], 0)
            reply = {"code": os.waitstatus_to_exitcode(status)}
        else:
            os.waitid(os.P_PID, req["pid"], os.WEXITED | os.WNOWAIT)
            reply = {}
        print(json.dumps(reply), flush=True)


def _child(spec: dict[str, Any], out: str) -> None:
    code = 1
    try:
        report = json.dumps(run_spec(spec))
        Path(out).write_text(report)
        code = 0
    except BaseException:
        Path(out + ".err").write_text(traceback.format_exc())
    finally:
        os._exit(code)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve()
    else:
        main(sys.argv)
