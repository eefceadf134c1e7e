"""A three-level graph and a subprocess entry point for ``test_subgraph.py``.

Imported by the tests (graph builder, reference run, effects file) and run as a script in a
fresh interpreter: ``python _subgraph_worker.py <db> <effects> <thread id> <answer>``
resumes the paused thread on the SQLite file ``db`` with ``resume=<answer>`` and prints one
JSON line ``{"pid", "status", "state", "pauses"}``.

The graph (``build``)::

    root:  a -> (mid | sib) -> z          mid and sib run in one step; z joins them
    mid:   m1 -> leaf -> m2               compiled without a checkpointer
    leaf:  d1 -> deep -> d2               compiled without a checkpointer

``deep`` runs a memoized step (``deep.prep``), then calls ``interrupt()``. Every node appends
``"<ctx.node> enter <pid>"`` to an effects file (``O_APPEND`` and ``fsync``), so a test can
count executions of every node at every level across processes.
"""

from __future__ import annotations

import json
import operator
import os
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import anyio

from checkpoints import SqliteCheckpointer
from graphflow import END, START, NodeContext, StateGraph, interrupt
from graphflow.reducers import append

INPUT: dict[str, Any] = {"log": ["in"], "total": 0, "x": 3}
ANSWER = "approved"
ALL_NODES = (
    "a",
    "sib",
    "mid.m1",
    "mid.leaf.d1",
    "mid.leaf.deep",
    "mid.leaf.deep.prep",
    "mid.leaf.d2",
    "mid.m2",
    "z",
)
AFTER_RESUME = ("mid.leaf.deep", "mid.leaf.d2", "mid.m2", "z")
"""Nodes a resume runs: the paused node again, and what follows it at every level."""

Record = Callable[[str, str], None]


class State(TypedDict):
    log: Annotated[list[str], append]
    total: Annotated[int, operator.add]
    x: int


def file_recorder(path: str | os.PathLike[str]) -> Record:
    """``record(node, event)`` appending a durable line to ``path``."""
    target = os.fspath(path)

    def record(node: str, event: str) -> None:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{node} {event} {os.getpid()}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    return record


def read_effects(path: str | os.PathLike[str]) -> list[tuple[str, str, int]]:
    """The effects file as ``(node, event, pid)`` lines; a missing file is empty."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        node, event, pid = line.split(" ")
        out.append((node, event, int(pid)))
    return out


def entries(path: str | os.PathLike[str]) -> Counter[str]:
    """How many times each node (dotted path) was entered."""
    return Counter(n for n, e, _ in read_effects(path) if e == "enter")


def build(record: Record, ask: Callable[[Any], Any] = interrupt) -> StateGraph:
    """The root builder (compile it with a checkpointer). ``ask`` answers ``deep``'s question."""
    weights = iter(range(1, 100))

    def node(name: str) -> Callable[..., Any]:
        weight = 2 ** next(weights)

        async def fn(state: State, ctx: NodeContext) -> dict[str, Any]:
            record(ctx.node, "enter")
            line = f"{ctx.node}:{len(state['log'])}:{state['total']}:{state['x']}"
            if name == "deep":

                def prep(x: int) -> str:
                    record(f"{ctx.node}.prep", "enter")
                    return f"prep{x * 3}"

                prepared = await ctx.step_once("prep", prep, state["x"])
                answer = ask({"question": "ok?", "x": state["x"]})
                line += f":{prepared}:{answer}"
            return {"log": [line], "total": weight, "x": state["x"] * 2 + 1}

        fn.__name__ = name
        return fn

    def chain(*names: str | tuple[str, Any]) -> StateGraph:
        b = StateGraph(State)
        prev = START
        for item in names:
            name, fn = item if isinstance(item, tuple) else (item, node(item))
            b.add_node(name, fn)
            b.add_edge(prev, name)
            prev = name
        return b.add_edge(prev, END)

    leaf = chain("d1", "deep", "d2").compile()
    mid = chain("m1", ("leaf", leaf), "m2").compile()
    root = StateGraph(State)
    root.add_node("a", node("a")).add_node("mid", mid).add_node("sib", node("sib"))
    root.add_node("z", node("z"))
    root.add_edge(START, "a").add_edge("a", "mid").add_edge("a", "sib")
    root.add_edge(["mid", "sib"], "z").add_edge("z", END)
    return root


def reference() -> dict[str, Any]:
    """The final state of the uninterrupted run (``deep`` answered at once)."""
    graph = build(lambda node, event: None, ask=lambda value: ANSWER).compile()
    result = graph.invoke(INPUT)
    assert result.status == "done"
    return dict(result.state)


def main(argv: list[str]) -> None:
    db, effects, thread_id, answer = argv[1:5]
    cp = SqliteCheckpointer(db)
    graph = build(file_recorder(effects)).compile(checkpointer=cp)
    try:
        result = graph.invoke(None, thread_id=thread_id, resume=answer)
    finally:
        anyio.run(cp.close)
    out = {
        "pid": os.getpid(),
        "status": result.status,
        "state": dict(result.state),
        "pauses": [[p.id, p.node, p.kind] for p in result.pauses],
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv)
