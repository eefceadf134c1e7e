"""The sync API's event loop: one per calling thread, kept between calls, never inherited."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, TypedDict

import anyio
import pytest

from graphflow import END, START, StateGraph, _sync


class S(TypedDict):
    n: int


def _graph() -> Any:
    b = StateGraph(S).add_node("inc", lambda s: {"n": s["n"] + 1})
    return b.add_edge(START, "inc").add_edge("inc", END).compile()


def _loop() -> Any:
    return _sync._local.runner.loop


def test_invoke_and_stream_share_this_threads_loop_between_calls() -> None:
    g = _graph()
    assert g.invoke({"n": 1}).state["n"] == 2
    first = _loop()
    assert [e.type for e in g.stream({"n": 1})][-1] == "done"
    assert g.invoke({"n": 5}).state["n"] == 6
    assert _loop() is first and not first.is_closed()


def test_each_thread_has_its_own_loop() -> None:
    g = _graph()
    g.invoke({"n": 0})
    mine = _loop()
    theirs: list[Any] = []

    def other() -> None:
        g.invoke({"n": 0})
        theirs.append(_loop())

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert theirs and theirs[0] is not mine


def test_a_sync_call_inside_a_running_loop_names_the_async_method() -> None:
    g = _graph()

    async def inside() -> None:
        with pytest.raises(RuntimeError, match=r"invoke\(\) cannot be called.*ainvoke"):
            g.invoke({"n": 0})
        with pytest.raises(RuntimeError, match=r"stream\(\) cannot be called.*astream"):
            g.stream({"n": 0})

    anyio.run(inside)


def test_breaking_out_of_a_stream_cancels_its_run_and_the_loop_goes_on() -> None:
    g = _graph()
    for ev in g.stream({"n": 1}, mode="debug"):
        if ev.type == "task_start":
            break
    assert g.invoke({"n": 1}).state["n"] == 2


def test_a_forked_child_makes_its_own_loop(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import os
        from typing import TypedDict
        from graphflow import END, START, StateGraph, _sync

        class S(TypedDict):
            n: int

        b = StateGraph(S).add_node("inc", lambda s: {"n": s["n"] + 1})
        g = b.add_edge(START, "inc").add_edge("inc", END).compile()
        assert g.invoke({"n": 1}).state["n"] == 2
        parent = _sync._local.runner.loop
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                assert g.invoke({"n": 1}).state["n"] == 2
                assert _sync._local.runner.loop is not parent
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert g.invoke({"n": 1}).state["n"] == 2 and _sync._local.runner.loop is parent
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_a_streamed_event_arrives_while_the_next_sync_node_runs() -> None:
    """``stream`` hands over each event as it happens: the next step's sync node runs in a
    worker thread, not on the loop (inline, it would hold the event until it returned)."""
    seen = threading.Event()
    waited: list[bool] = []

    def slow(state: S) -> dict[str, int]:
        waited.append(seen.wait(timeout=10))  # (set by the consumer, once it has a's update)
        return {"n": state["n"] + 10}

    b = StateGraph(S).add_node("a", lambda s: {"n": s["n"] + 1}).add_node("b", slow)
    g = b.add_edge(START, "a").add_edge("a", "b").add_edge("b", END).compile()
    for event in g.stream({"n": 0}, mode="updates"):
        if event.type == "updates" and "a" in event.data:
            seen.set()
    assert waited == [True]
    assert g.invoke({"n": 0}).state["n"] == 11  # (invoke still runs a lone sync node inline)


async def _five() -> int:
    await anyio.sleep(0)
    return 5


def test_a_sync_node_may_call_asyncio_run_and_invoke_another_graph() -> None:
    # A lone sync node runs inline on invoke's private loop; to its code no loop runs there.
    import asyncio  # noqa: TID251 - what a user's node does

    inner = _graph()
    b = StateGraph(S).add_node("a", lambda s: {"n": asyncio.run(_five())})
    b.add_node("b", lambda s: inner.invoke({"n": s["n"]}).state)  # a nested sync call
    b.add_node("c", lambda s: {"n": s["n"] + list(inner.stream({"n": 0}))[-1].data["n"]})
    graph = b.add_edge(START, "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", END)
    graph = graph.compile()
    loop = None
    for _ in range(2):
        assert graph.invoke({"n": 0}).state == {"n": 7}
        assert loop is None or _loop() is loop  # the private loop is kept, and still works
        loop = _loop()
    assert list(graph.stream({"n": 0}))[-1].data == {"n": 7}
    assert anyio.run(graph.ainvoke, {"n": 0}).state == {"n": 7}
    assert not loop.is_running() and not loop.is_closed()
