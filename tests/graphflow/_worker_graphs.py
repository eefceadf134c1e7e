"""Graphs for the worker tests, and a worker process entry point.

``approval_graph(db)``: ``intake -> agent -> notify``; the agent (a stateless model, so any
process resumes it correctly) proposes one ``append_effect`` call that needs confirmation;
once approved the tool appends ``"<thread> <pid>"`` to the effects file named by
``$GRAPHFLOW_TEST_EFFECTS`` (``O_APPEND`` + ``fsync``: the lines survive a SIGKILL), so a
parent counts executions across processes. ``$GRAPHFLOW_TEST_SLOW`` (seconds) makes
``notify`` sleep, so a kill is likely to land after the tool's step, outside the tool.

As a script: ``python _worker_graphs.py DB [--concurrency N] [--lease S] [--idle N]`` runs a
worker on ``DB``: ``run_once`` until N passes in a row (default 3) did nothing, printing one
JSON line per result (flushed), and ``READY`` first.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from pydantic import Field

from checkpoints import SqliteCheckpointer
from graphflow import END, START, CompiledGraph, StateGraph
from graphflow.agents import Agent, AgentNode, Message, MessagesState, ModelResponse, ToolCall
from graphflow.agents import tool as make_tool

CALL_ID = "call_effect"
NAME = "approvals"


class State(MessagesState):
    notes: list[str] = Field(default_factory=list)


def _slow() -> None:
    time.sleep(float(os.environ.get("GRAPHFLOW_TEST_SLOW", "0")))


def intake(state: State) -> dict[str, Any]:
    return {"notes": ["intake"]}


def notify(state: State) -> dict[str, Any]:
    _slow()
    return {"notes": [*state.notes, "notified"]}


class StatelessModel:
    """Proposes the effect once (the thread id is the user's message), then answers."""

    async def generate(self, messages: list[Message], tools: Any) -> ModelResponse:
        if any(m.role == "tool" for m in messages):
            return ModelResponse(text="done")
        tid = next(m.content for m in messages if m.role == "user")
        return ModelResponse(
            tool_calls=[ToolCall(id=CALL_ID, name="append_effect", args={"line": tid})]
        )


@make_tool(risk="low")
def append_effect(line: str) -> dict[str, Any]:
    """Append a line to the effects file."""
    path = os.environ["GRAPHFLOW_TEST_EFFECTS"]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line} {os.getpid()}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"written": line}


def approval_builder() -> StateGraph:
    agent = Agent(
        name="clerk",
        model=StatelessModel(),
        tools=[append_effect],
        require_confirmation=["append_effect"],
    )
    b = StateGraph(State)
    b.add_node("intake", intake)
    b.add_node(AgentNode(agent))
    b.add_node("notify", notify)
    b.add_edge(START, "intake").add_edge("intake", "clerk").add_edge("clerk", "notify")
    b.add_edge("notify", END)
    return b


def approval_graph(db: str | os.PathLike[str], **kw: Any) -> CompiledGraph:
    """The approval graph on a SQLite file (name ``approvals``); ``$GRAPHFLOW_TEST_SYNC``
    sets the store's ``synchronous`` (``NORMAL`` loses nothing to a SIGKILL, only to a
    power loss, and spares the process tests most fsyncs)."""
    store = SqliteCheckpointer(db, synchronous=os.environ.get("GRAPHFLOW_TEST_SYNC", "FULL"))
    return approval_builder().compile(checkpointer=store, name=NAME, **kw)


def user(tid: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": tid}]}


def effects(path: str | os.PathLike[str]) -> list[tuple[str, int]]:
    """The effects file's lines as ``(thread, pid)``."""
    p = Path(path)
    if not p.exists():
        return []
    return [(t, int(pid)) for t, pid in (ln.split(" ") for ln in p.read_text().splitlines())]


# A graph for ``graphflow worker --graph`` (its checkpointer is replaced by --db's).
graph = approval_builder().compile(name=NAME)


def _main(argv: list[str]) -> None:
    from graphflow.worker import Worker

    db, rest = argv[0], argv[1:]
    concurrency = int(rest[rest.index("--concurrency") + 1]) if "--concurrency" in rest else 1
    lease = float(rest[rest.index("--lease") + 1]) if "--lease" in rest else None
    patience = int(rest[rest.index("--idle") + 1]) if "--idle" in rest else 3
    worker = Worker(
        approval_graph(db), concurrency=concurrency, lease_seconds=lease, poll_interval=0.05
    )
    print("READY", flush=True)

    async def drain() -> None:
        idle = 0
        while idle < patience:  # passes in a row with nothing done: the others have the rest
            results = await worker.run_once()
            for r in results:
                print(json.dumps(r.to_dict()), flush=True)
            idle = 0 if any(r.status in ("done", "paused") for r in results) else idle + 1
            await anyio.sleep(0.05)

    anyio.run(drain)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    _main(sys.argv[1:])
