"""Agent graphs, a cross-process scripted model and a subprocess entry point.

Imported by ``test_agent_node.py`` (builders, scripts, effect-file parsing) and run as a
script in child processes: ``python _agent_worker.py '<json spec>'``, or forked by
``python _agent_worker.py serve`` (see ``serve``). A spec names a SQLite file, a thread id,
an effects file, a script and a list of actions; the child writes one JSON list with the
outcome of every action (or dies, when a tool is told to crash).

Side effects: the model, every tool and the sibling node append one JSON object per event
to an effects file (``O_APPEND`` + ``fsync``), so a parent can count model calls and tool
executions across processes and crashes.

``FileScriptedModel`` answers the n-th request with ``script[n]``, where n is the number of
model calls already in the effects file: a resumed process continues the script where the
earlier process left it, and a model asked again for a committed turn shows up as an extra
call (and gets the wrong response).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import anyio
from pydantic import Field

from checkpoints import Checkpointer, SqliteCheckpointer
from checkpoints.models import CallId, ThreadId
from graphflow import END, START, StateGraph, ToolConfirmationPause
from graphflow.agents import (
    Agent,
    AgentNode,
    Message,
    MessagesState,
    ModelResponse,
    ScriptExhaustedError,
    Tool,
    ToolCall,
    tool,
)
from graphflow.auth import Decision
from graphflow.compiled import CompiledGraph
from graphflow.reducers import append

CALL_ID = "call_abc123"
PATH = "/data/report.csv"
USER = {"role": "user", "content": "please delete /data/report.csv"}
AGENT = "file_manager"

Record = Callable[..., None]
"""``record(kind, **data)``: note a side effect."""


class FlowState(MessagesState):
    log: Annotated[list[str], append] = Field(default_factory=list)


# -- side effects ----------------------------------------------------------------------------
class Effects:
    """A ``Record`` appending durable JSON lines to a file (survives ``os._exit`` right after)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)

    def __call__(self, kind: str, **data: Any) -> None:
        line = json.dumps({"kind": kind, "pid": os.getpid(), **data}, default=str) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> list[dict[str, Any]]:
        return read_effects(self.path)


def read_effects(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The events of an effects file, oldest first; a missing file is empty."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line]


def count(effects: list[dict[str, Any]], kind: str, **match: Any) -> int:
    """How many events of ``kind`` whose fields equal ``match``."""
    return sum(
        1 for e in effects if e["kind"] == kind and all(e.get(k) == v for k, v in match.items())
    )


def model_requests(effects: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The messages of each model request, as JSON dicts, in call order."""
    return [e["messages"] for e in effects if e["kind"] == "model"]


# -- the model -----------------------------------------------------------------------------------
class FileScriptedModel:
    """Replays ``script`` across processes: call n (counted in the effects file) gets script[n]."""

    def __init__(self, script: list[ModelResponse], effects: Effects):
        self.script = script
        self.effects = effects

    async def generate(self, messages: list[Message], tools: list[Tool]) -> ModelResponse:
        n = count(self.effects.read(), "model")
        self.effects(
            "model",
            n=n,
            messages=[m.model_dump(mode="json") for m in messages],
            tools=[t.name for t in tools],
        )
        if n >= len(self.script):
            raise ScriptExhaustedError("FileScriptedModel", len(self.script))
        return self.script[n]


def call(call_id: str, name: str, **args: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, args=args)


def propose(*calls: ToolCall, text: str = "") -> ModelResponse:
    return ModelResponse(text=text, tool_calls=list(calls))


SCRIPTS: dict[str, list[ModelResponse]] = {
    "flow": [
        propose(call(CALL_ID, "delete_file", path=PATH)),
        ModelResponse(text="Deleted /data/report.csv."),
    ],
}


# -- tools and graphs ------------------------------------------------------------------------
def make_tools(record: Record, *, crash: bool = False, idempotent: bool = False) -> list[Tool]:
    """``delete_file`` (needs confirmation in ``build``), ``list_files`` and ``read_file``.

    With ``crash``, ``delete_file`` kills its process (exit code 137) once it has started:
    the dispatch claim is committed, its outcome never is.
    """

    def delete_file(path: str) -> dict[str, Any]:
        """Delete a file."""
        record("tool", name="delete_file", path=path, event="start")
        if crash:
            os._exit(137)
        record("tool", name="delete_file", path=path, event="done")
        return {"deleted": path}

    def list_files(folder: str) -> list[str]:
        """List the files of a folder."""
        record("tool", name="list_files", folder=folder, event="start")
        return [f"{folder}/report.csv"]

    def read_file(path: str) -> str:
        """Read a file."""
        record("tool", name="read_file", path=path, event="start")
        return f"contents of {path}"

    return [
        tool(delete_file, idempotent=idempotent),
        tool(list_files),
        tool(read_file),
    ]


def build(
    checkpointer: Checkpointer | None,
    model: Any,
    record: Record,
    *,
    crash: bool = False,
    idempotent: bool = False,
    handler: Any = None,
    require: list[str] | bool | None = None,
    sibling: bool = True,
) -> CompiledGraph:
    """``START -> (file_manager agent, sibling) -> END``; the two nodes share a superstep."""
    agent = Agent(
        name=AGENT,
        model=model,
        tools=make_tools(record, crash=crash, idempotent=idempotent),
        instruction="You manage files.",
        require_confirmation=["delete_file"] if require is None else require,
        confirmation_handler=handler,
    )
    b = StateGraph(FlowState)
    b.add_node(AgentNode(agent))
    b.add_edge(START, AGENT)
    b.add_edge(AGENT, END)
    if sibling:

        def side(state: FlowState) -> dict[str, Any]:
            record("node", name="sibling")
            return {"log": ["sibling"]}

        b.add_node("sibling", side)
        b.add_edge(START, "sibling")
        b.add_edge("sibling", END)
    return b.compile(checkpointer=checkpointer)


# -- child process entry point ---------------------------------------------------------------------
def decode_decision(raw: Any) -> Any:
    """JSON to a decision: a string stays a string, ``{"verdict": ...}`` becomes a Decision."""
    if isinstance(raw, str):
        return raw
    fields = {k: v for k, v in raw.items() if k != "verdict"}
    if raw["verdict"] == "approve":
        return Decision.approve(**fields)
    return Decision.deny(**fields)


def pause_json(p: Any) -> dict[str, Any]:
    out = {
        "id": p.id,
        "kind": p.kind,
        "node": p.node,
        "value": p.value,
        "thread_id": p.thread_id,
        "checkpoint_id": p.checkpoint_id,
    }
    req = getattr(p, "request", None)
    if req is not None:
        out["request"] = {
            "tool_name": req.tool_name,
            "function_call_id": req.function_call_id,
            "args": req.args,
            "fingerprint": req.fingerprint,
            "agent": req.agent,
        }
    return out


def _barrier(folder: str, n: int, timeout: float = 60.0) -> None:
    """Wait until ``n`` processes reached this point (each drops a file in ``folder``)."""
    Path(folder, str(os.getpid())).touch()
    deadline = time.monotonic() + timeout
    while len(os.listdir(folder)) < n:
        if time.monotonic() > deadline:
            raise TimeoutError("barrier")
        time.sleep(0.001)


def find_dispatch(store: Checkpointer, thread: str, call_id: str, turn: int = 0) -> Any:
    """The dispatch record of a call proposed in turn ``turn`` of a task of the thread
    (dispatch records are keyed by proposal: call id, task and turn)."""

    async def find() -> Any:
        for ck in await store.list_checkpoints(ThreadId(thread)):
            for spec in ck.frontier:
                key = f"{call_id}@{spec.id}:t{turn}"
                rec = await store.get_dispatch(ThreadId(thread), CallId(key))
                if rec is not None:
                    return rec
        return None

    return anyio.run(find)


def run_action(graph: CompiledGraph, thread: str, action: dict[str, Any]) -> dict[str, Any]:
    op = action["op"]
    try:
        if op == "stream":
            events = []
            pauses = []
            for ev in graph.stream({"messages": [USER]}, thread_id=thread, mode="debug"):
                events.append(
                    {
                        "type": ev.type,
                        "node": ev.node,
                        "status": ev.data.get("status") if ev.type == "task_end" else None,
                    }
                )
                tcp = ToolConfirmationPause.from_event(ev)
                if tcp is not None:
                    pauses.append(pause_json(tcp))
            return {"op": op, "events": events, "pauses": pauses}
        if op == "invoke":
            decisions = action.get("decisions")
            if decisions is not None:
                decisions = {k: decode_decision(v) for k, v in decisions.items()}
            inp = {"messages": [USER]} if action.get("input") else None
            res = graph.invoke(inp, thread_id=thread, decisions=decisions)
            return {"op": op, "status": res.status, "pauses": [pause_json(p) for p in res.pauses]}
        if op == "dispatch":
            store = graph.checkpointer
            assert store is not None
            rec = find_dispatch(store, thread, action["call_id"])
            return {"op": op, "status": rec.status if rec else None}
        raise ValueError(f"unknown op {op!r}")
    except Exception as e:  # reported to the parent, which asserts on it
        return {"op": op, "error": type(e).__name__, "message": str(e)}


def main(spec: dict[str, Any]) -> None:
    """Run a job; its outcome goes to ``spec["out"]`` when given, else to stdout."""
    effects = Effects(spec["effects"])
    model = FileScriptedModel(SCRIPTS[spec.get("script", "flow")], effects)
    graph = build(
        SqliteCheckpointer(spec["db"]),
        model,
        effects,
        crash=spec.get("crash", False),
        idempotent=spec.get("idempotent", False),
    )
    if spec.get("barrier"):
        _barrier(spec["barrier"], spec["parties"])
    out = json.dumps([run_action(graph, spec["thread"], a) for a in spec["actions"]], default=str)
    if spec.get("out"):
        Path(spec["out"]).write_text(out)
    else:
        print(out, flush=True)


def serve() -> None:
    """Fork one child per job, from a process that imported everything once.

    Commands, one per stdin line: ``run <json spec>`` forks a child running ``main(spec)``
    and answers ``PID <pid>``; ``wait <pid>`` answers ``EXIT <pid> <exit code>`` when that
    child ended. Starting an interpreter costs seconds here, a fork milliseconds. The server
    never builds or runs a graph, so a child starts with no state of any other run.
    """
    print("READY", flush=True)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "run":
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    main(json.loads(arg))
                except BaseException:
                    traceback.print_exc()
                    code = 1
                finally:
                    sys.stderr.flush()
                    os._exit(code)
            print(f"PID {pid}", flush=True)
        elif cmd == "wait":
            _, status = os.waitpid(int(arg), 0)
            print(f"EXIT {arg} {os.waitstatus_to_exitcode(status)}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve()
    else:
        main(json.loads(sys.argv[1]))
