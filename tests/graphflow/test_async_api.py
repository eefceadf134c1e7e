"""The async API never blocks the caller's event loop (the detector is in tests/conftest.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

import anyio
import pytest

from checkpoints import MemoryCheckpointer, SqliteCheckpointer
from graphflow import END, START, StateGraph, interrupt
from graphflow.evidence import EvidenceLog
from graphflow.reducers import append


class S(TypedDict, total=False):
    n: int


def _sleepy(state: S) -> dict[str, Any]:
    time.sleep(0.05)  # a sync node doing blocking work, as sync nodes may
    return {"n": state.get("n", 0) + 1}


def _graph(checkpointer: Any) -> Any:
    b = StateGraph(S).add_node("a", _sleepy).add_node("b", _sleepy)
    b.add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
    return b.compile(checkpointer=checkpointer)


@pytest.mark.anyio
@pytest.mark.parametrize("store", ["none", "memory", "sqlite"])
async def test_a_lone_sync_node_runs_off_the_callers_event_loop(store: str, tmp_path: Path) -> None:
    cp = {"none": None, "memory": MemoryCheckpointer()}.get(store)
    if store == "sqlite":
        cp = SqliteCheckpointer(tmp_path / "a.db")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.005)
            ticks += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        res = await _graph(cp).ainvoke({}, thread_id=None if cp is None else "t")
        events = [
            e.type async for e in _graph(cp).astream({}, thread_id=None if cp is None else "u")
        ]
        tg.cancel_scope.cancel()
    assert res.state == {"n": 2} and events[-1] == "done"
    assert ticks > 0  # the loop ran while the nodes slept (no timing is asserted)
    if isinstance(cp, SqliteCheckpointer):
        await cp.close()


def test_the_sync_api_still_runs_a_lone_sync_node_inline() -> None:
    seen: list[int] = []

    def node(state: S) -> dict[str, Any]:
        seen.append(threading.get_ident())
        return {}

    b = StateGraph(S).add_node("a", node).add_edge(START, "a").add_edge("a", END)
    b.compile().invoke({})
    assert seen == [threading.get_ident()]


def _asks(state: S) -> dict[str, Any]:
    return {"n": int(interrupt("ok?"))}


def test_event_loops_of_several_threads_share_one_store_and_its_evidence_log(
    tmp_path: Path,
) -> None:
    """Each thread runs its own event loop (``anyio.run``), with many runs at once on it, all
    on one SqliteCheckpointer and the evidence log beside it: every run pauses (its commits
    and its pause event written), none waits forever on another loop's limiter."""
    store = SqliteCheckpointer(tmp_path / "shared.db", synchronous="OFF")
    b = StateGraph(S).add_node("a", lambda s: {"n": 1}).add_node("ask", _asks)
    graph = (
        b.add_edge(START, "a").add_edge("a", "ask").add_edge("ask", END).compile(checkpointer=store)
    )
    results: dict[str, str] = {}
    errors: list[BaseException] = []

    def loop(k: int) -> None:
        async def runs(rep: int) -> None:
            async def one(tid: str) -> None:
                results[tid] = (await graph.ainvoke({}, thread_id=tid)).status

            async with anyio.create_task_group() as tg:
                for i in range(8):
                    tg.start_soon(one, f"t{k}-{rep}-{i}")

        try:
            for rep in range(3):
                anyio.run(runs, rep)
        except BaseException as e:  # (reported below, with the threads that hung)
            errors.append(e)

    threads = [threading.Thread(target=loop, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung and not errors, (hung, errors)
    assert len(results) == 96 and set(results.values()) == {"paused"}
    log = EvidenceLog.beside(tmp_path / "shared.db")
    assert len({r.thread_id for r in log.events()}) == 96 and log.verify().ok
    log.close()


class Log(TypedDict):
    log: Annotated[list[str], append]


@pytest.mark.anyio
async def test_a_cancelled_ainvoke_leaves_the_thread_paused_on_its_pending_work(
    tmp_path: Path,
) -> None:
    started, calls = anyio.Event(), []

    async def waits(state: dict[str, Any]) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            started.set()
            await anyio.sleep_forever()  # until the caller gives up
        return {"log": ["waits"]}

    b = StateGraph(Log).add_node("first", lambda s: {"log": ["first"]}).add_node("waits", waits)
    b.add_edge(START, "first").add_edge("first", "waits").add_edge("waits", END)
    graph = b.compile(checkpointer=SqliteCheckpointer(tmp_path / "c.db"))
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            await graph.ainvoke({"log": []}, thread_id="t")

        tg.start_soon(run)
        await started.wait()
        tg.cancel_scope.cancel()  # as a timeout around ainvoke would
    [info] = await graph.alist_threads()
    assert info.status == "paused" and info.pending_pauses == 0  # not "running" with no run
    snap = await graph.aget_state("t")
    assert snap is not None and snap.next == ("waits",) and snap.values["log"] == ["first"]
    assert (await graph.ainvoke(None, thread_id="t")).state["log"] == ["first", "waits"]
