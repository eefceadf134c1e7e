"""``AgentNode`` tool confirmation: pause, decide, resume (DESIGN.md promises 1, 4, 5, 6).

In-process tests run on ``MemoryCheckpointer`` and on a ``SqliteCheckpointer`` file and
count model calls with ``ScriptedModel.calls``. Cross-process tests run
``_agent_worker.py`` in child processes on one SQLite file and count model calls and tool
executions in its effects file (JSON lines written with ``fsync``, so they survive
``os._exit``). No test asserts on timing.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from checkpoints import Checkpointer, MemoryCheckpointer, SqliteCheckpointer
from checkpoints.models import CallId, DecisionRecord, DispatchRecord, ThreadId
from graphflow import ThreadBusyError, ToolConfirmationPause
from graphflow.agents import (
    Agent,
    AgentNode,
    Message,
    MessagesState,
    ModelResponse,
    ScriptedModel,
    ToolCall,
    tool,
)
from graphflow.auth import Decision, tool_call_fingerprint
from graphflow.errors import GraphflowError, InvalidArgumentError
from graphflow.types import ToolConfirmationRequest

from . import _agent_worker as w

WORKER = Path(w.__file__)
TIMEOUT = 90.0  # seconds a child may take; guards against hangs only, never asserted
CALL = w.CALL_ID
FP = tool_call_fingerprint("delete_file", {"path": w.PATH})


# -- fixtures and helpers -------------------------------------------------------------------------
class Stores:
    """Checkpointers of a test; SQLite ones are closed at teardown."""

    def __init__(self, kind: str, tmp: Path):
        self.kind = kind
        self.tmp = tmp
        self.opened: list[SqliteCheckpointer] = []

    def new(self) -> Checkpointer:
        """A checkpointer on the test's store (a new object on the same SQLite file)."""
        if self.kind == "memory":
            if not hasattr(self, "_mem"):
                self._mem = MemoryCheckpointer()
            return self._mem
        cp = SqliteCheckpointer(self.tmp / "agent.db")
        self.opened.append(cp)
        return cp

    def close(self) -> None:
        for cp in self.opened:
            anyio.run(cp.close)


@pytest.fixture(params=["memory", "sqlite"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    s = Stores(request.param, tmp_path)
    yield s
    s.close()


@pytest.fixture
def sqlite_stores(tmp_path: Path) -> Iterator[Stores]:
    s = Stores("sqlite", tmp_path)
    yield s
    s.close()


@pytest.fixture
def effects(tmp_path: Path) -> w.Effects:
    return w.Effects(tmp_path / "effects.jsonl")


def decisions_of(cp: Checkpointer, thread: str, call_id: str | None = None) -> list[DecisionRecord]:
    cid = CallId(call_id) if call_id is not None else None
    return anyio.run(cp.list_decisions, ThreadId(thread), cid)


def dispatch_of(cp: Checkpointer, thread: str, call_id: str) -> DispatchRecord | None:
    rec: DispatchRecord | None = w.find_dispatch(cp, thread, call_id)
    return rec


def tool_runs(eff: w.Effects, name: str = "delete_file", **match: Any) -> int:
    """How many times a tool's function was entered."""
    return w.count(eff.read(), "tool", name=name, event="start", **match)


def tool_messages(messages: list[Message]) -> dict[str, str]:
    """Tool results in a model request: call id -> content."""
    return {m.tool_call_id: m.content for m in messages if m.role == "tool" and m.tool_call_id}


def start(graph: Any, thread: str = "t1") -> Any:
    return graph.invoke({"messages": [w.USER]}, thread_id=thread)


def only_pause(result: Any) -> ToolConfirmationPause:
    assert result.status == "paused"
    assert len(result.pauses) == 1
    p = result.pauses[0]
    assert isinstance(p, ToolConfirmationPause)
    return p


# -- child processes ------------------------------------------------------------------------------
Outcome = tuple[int, list[dict[str, Any]] | None, str]
"""A child's exit code, its JSON outcome (None when it died first) and its stderr."""


@dataclass
class Child:
    """A running child process and how to wait for its outcome."""

    pid: int
    finish: Callable[[], Outcome]


class Procs:
    """Children started as fresh interpreters; any still running at teardown are killed."""

    def __init__(self) -> None:
        self.all: list[subprocess.Popen[str]] = []

    def spawn(self, spec: dict[str, Any]) -> Child:
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.all.append(proc)

        def finish() -> Outcome:
            out, err = proc.communicate(timeout=TIMEOUT)
            lines = [ln for ln in out.splitlines() if ln.startswith("[")]
            return proc.returncode, (json.loads(lines[-1]) if lines else None), err

        return Child(proc.pid, finish)

    def close(self) -> None:
        for p in self.all:
            if p.poll() is None:
                p.kill()
            p.communicate()


class ForkServer:
    """``_agent_worker.py serve``: children forked from one interpreter that imported all.

    A fresh interpreter costs seconds here; a fork, milliseconds. Each child is its own
    process (own pid and memory, nothing of another run: the server never runs a graph).
    """

    def __init__(self, folder: Path):
        self.folder = folder
        self.errfile = (folder / "server.err").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errfile,
            text=True,
        )
        self.started: list[int] = []
        self.n = 0
        assert self._ask(None) == "READY"

    def _ask(self, command: str | None) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if command is not None:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT)
        assert ready, f"fork server did not answer {command!r}: {self.stderr()}"
        line = self.proc.stdout.readline().strip()
        assert line, f"fork server died: {self.stderr()}"
        return line

    def stderr(self) -> str:
        return (self.folder / "server.err").read_text()[-3000:]

    def spawn(self, spec: dict[str, Any]) -> Child:
        self.n += 1
        out = self.folder / f"out-{self.n}.json"
        tag, pid_text = self._ask("run " + json.dumps({**spec, "out": str(out)})).split()
        assert tag == "PID"
        pid = int(pid_text)
        self.started.append(pid)

        def finish() -> Outcome:
            self.started.remove(pid)
            tag, got, code = self._ask(f"wait {pid}").split()
            assert (tag, int(got)) == ("EXIT", pid)
            result = json.loads(out.read_text()) if out.exists() else None
            return int(code), result, self.stderr()

        return Child(pid, finish)

    def close(self) -> None:
        for pid in self.started:  # not waited for (a test failed): not reaped, so still ours
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.errfile.close()


def ok(child: Child) -> list[dict[str, Any]]:
    """The outcome of a child that must have succeeded."""
    rc, out, err = child.finish()
    assert rc == 0 and out is not None, f"child failed (rc={rc}): {err}"
    for action in out:
        assert "error" not in action, f"child action failed: {action}\n{err}"
    return out


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    yield p
    p.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    s = ForkServer(tmp_path_factory.mktemp("forkserver"))
    yield s
    s.close()


def job(tmp: Path, thread: str, actions: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "db": str(tmp / "agent.db"),
        "effects": str(tmp / "effects.jsonl"),
        "thread": thread,
        "actions": actions,
        **extra,
    }


# -- 1. the flow end to end, across processes -----------------------------------------------------
@pytest.mark.slow
def test_flow_pause_in_one_process_approve_in_another(
    tmp_path: Path, procs: Procs, server: ForkServer
) -> None:
    """Stream to the pause in one process; approve by call id in a new process.

    Variant A answers with the string ``"approve"`` from a fresh interpreter, variant B with
    ``Decision.approve(by=..., reason=..., fingerprint=...)`` from a forked child; the
    variants run side by side.
    """
    variants = {
        "A": "approve",
        "B": {"verdict": "approve", "by": "alice", "reason": "ok", "fingerprint": FP},
    }
    dirs = {k: tmp_path / k for k in variants}
    for d in dirs.values():
        d.mkdir()
    firsts = {k: server.spawn(job(d, f"thread-{k}", [{"op": "stream"}])) for k, d in dirs.items()}
    streamed = {k: ok(p)[0] for k, p in firsts.items()}
    seconds = {
        k: (procs if k == "A" else server).spawn(
            job(
                d,
                f"thread-{k}",
                [
                    {"op": "invoke", "decisions": {CALL: variants[k]}},
                    {"op": "dispatch", "call_id": CALL},
                ],
            )
        )
        for k, d in dirs.items()
    }
    resumed = {k: ok(p) for k, p in seconds.items()}

    for k, d in dirs.items():
        thread = f"thread-{k}"
        # The first process: a pause event from which the request is read.
        ev = streamed[k]
        assert len(ev["pauses"]) == 1
        p = ev["pauses"][0]
        assert p["kind"] == "tool_confirmation"
        assert p["request"] == {
            "tool_name": "delete_file",
            "function_call_id": CALL,
            "args": {"path": w.PATH},
            "fingerprint": FP,
            "agent": w.AGENT,
        }
        assert p["thread_id"] == thread
        assert isinstance(p["checkpoint_id"], str) and p["checkpoint_id"]
        # The sibling completed in that step; the stream ended paused.
        ends = [(e["node"], e["status"]) for e in ev["events"] if e["type"] == "task_end"]
        assert ("sibling", "completed") in ends
        assert (w.AGENT, "paused") in ends
        assert ev["events"][-1]["type"] == "paused"

        # The second process finished the thread.
        assert resumed[k][0]["status"] == "done", resumed[k]
        assert resumed[k][1]["status"] == "succeeded"

        eff = w.read_effects(d / "effects.jsonl")
        first_pid, second_pid = firsts[k].pid, seconds[k].pid
        # The tool ran exactly once, in the resuming process.
        runs = [e for e in eff if e["kind"] == "tool" and e["event"] == "start"]
        assert [(e["name"], e["pid"]) for e in runs] == [("delete_file", second_pid)]
        # Two model calls in total: turn 0 in the first process, turn 1 in the second.
        calls = [e for e in eff if e["kind"] == "model"]
        assert [(e["n"], e["pid"]) for e in calls] == [(0, first_pid), (1, second_pid)]
        # The sibling ran once, in the first process only.
        assert [e["pid"] for e in eff if e["kind"] == "node"] == [first_pid]
        # The model's second request carries the tool result for the call.
        req = [Message.model_validate(m) for m in calls[1]["messages"]]
        assert json.loads(tool_messages(req)[CALL]) == {"deleted": w.PATH}

        # The final state, read in this (third) process.
        cp = SqliteCheckpointer(d / "agent.db")
        try:
            g = w.build(cp, ScriptedModel([], name="unused"), w.Effects(d / "unused.jsonl"))
            snap = g.get_state(thread)
            assert snap is not None
            assert snap.values.log == ["sibling"]
            msgs = snap.values.messages
            assert [m.role for m in msgs] == ["user", "assistant", "tool", "assistant"]
            assert msgs[1].tool_calls[0].id == CALL
            assert msgs[-1].content == "Deleted /data/report.csv."
            recs = decisions_of(cp, thread)
            assert [(r.call_id, r.verdict, r.applied) for r in recs] == [(CALL, "approve", True)]
            if k == "B":
                assert (recs[0].by, recs[0].reason, recs[0].fingerprint) == ("alice", "ok", FP)
        finally:
            anyio.run(cp.close)


def test_flow_in_process_with_decision_object(stores: Stores, effects: w.Effects) -> None:
    model = ScriptedModel(w.SCRIPTS["flow"])
    g = w.build(stores.new(), model, effects)
    events = list(g.stream({"messages": [w.USER]}, thread_id="t1", mode="debug"))
    found = [p for p in map(ToolConfirmationPause.from_event, events) if p is not None]
    assert len(found) == 1
    assert all(ToolConfirmationPause.from_event(e) is None for e in events if e.type != "pause")
    pause = found[0]
    assert pause.request is not None
    assert (pause.request.tool_name, pause.request.function_call_id) == ("delete_file", CALL)
    assert pause.request.args == {"path": w.PATH}
    assert pause.thread_id == "t1" and pause.checkpoint_id
    assert [p.id for p in g.pending_pauses("t1")] == [pause.id]
    assert w.count(effects.read(), "node", name="sibling") == 1
    assert len(model.calls) == 1 and tool_runs(effects) == 0

    # A new graph object (and, on SQLite, a new connection) resumes by thread id.
    g2 = w.build(stores.new(), model, effects)
    res = g2.invoke(None, thread_id="t1", decisions={CALL: Decision.approve()})
    assert res.status == "done"
    assert tool_runs(effects) == 1
    assert len(model.calls) == 2
    assert w.count(effects.read(), "node", name="sibling") == 1
    assert res.state.log == ["sibling"]
    assert res.state.messages[-1].content == "Deleted /data/report.csv."


# -- 2. two calls to the same tool need two decisions ---------------------------------------------
def test_two_calls_to_one_tool_need_two_decisions(stores: Stores, effects: w.Effects) -> None:
    model = ScriptedModel(
        [
            w.propose(
                w.call("call_1", "delete_file", path="/a"),
                w.call("call_2", "delete_file", path="/b"),
            ),
            "Deleted both.",
        ]
    )
    g = w.build(stores.new(), model, effects)
    res = start(g)
    assert res.status == "paused"
    assert sorted(p.request.function_call_id for p in res.pauses) == ["call_1", "call_2"]

    res = g.invoke(None, thread_id="t1", decisions={"call_1": "approve"})
    pause = only_pause(res)
    assert pause.request is not None and pause.request.function_call_id == "call_2"
    assert [p.id for p in g.pending_pauses("t1")] == [pause.id]
    assert tool_runs(effects, path="/a") == 1
    assert tool_runs(effects, path="/b") == 0
    assert len(model.calls) == 1

    res = g.invoke(None, thread_id="t1", decisions={"call_2": "approve"})
    assert res.status == "done"
    assert tool_runs(effects, path="/a") == 1  # not again after the second approval
    assert tool_runs(effects, path="/b") == 1
    assert len(model.calls) == 2
    results = tool_messages(model.calls[1].messages)
    assert set(results) == {"call_1", "call_2"}


def test_a_later_turn_needs_its_own_decision(stores: Stores, effects: w.Effects) -> None:
    """Turn 2 proposes another call: approving turn 1's does not cover it; nothing reruns."""
    model = ScriptedModel(
        [
            w.propose(w.call("call_1", "delete_file", path="/a")),
            w.propose(w.call("call_2", "delete_file", path="/b")),
            "Done.",
        ]
    )
    g = w.build(stores.new(), model, effects)
    start(g)
    pause = only_pause(g.invoke(None, thread_id="t1", decisions={"call_1": "approve"}))
    assert pause.request is not None and pause.request.function_call_id == "call_2"
    assert (tool_runs(effects, path="/a"), tool_runs(effects, path="/b")) == (1, 0)
    assert len(model.calls) == 2
    res = g.invoke(None, thread_id="t1", decisions={"call_2": "approve"})
    assert res.status == "done"
    assert (tool_runs(effects, path="/a"), tool_runs(effects, path="/b")) == (1, 1)
    assert len(model.calls) == 3


# -- 3. keys: call id only, fingerprints bound ----------------------------------------------------
def paused_flow(stores: Stores, effects: w.Effects) -> tuple[Any, ScriptedModel, Any]:
    model = ScriptedModel(w.SCRIPTS["flow"])
    g = w.build(stores.new(), model, effects)
    res = start(g)
    only_pause(res)
    return g, model, res


def assert_still_pending(
    g: Any, model: ScriptedModel, effects: w.Effects, before: Any, res: Any
) -> None:
    assert res.status == "paused"
    assert [p.id for p in res.pauses] == [p.id for p in before.pauses]
    assert [p.id for p in g.pending_pauses("t1")] == [p.id for p in before.pauses]
    assert tool_runs(effects) == 0
    assert len(model.calls) == 1
    assert w.count(effects.read(), "node", name="sibling") == 1


def test_a_decision_keyed_by_tool_name_is_ignored_and_recorded(
    stores: Stores, effects: w.Effects
) -> None:
    g, model, before = paused_flow(stores, effects)
    res = g.invoke(None, thread_id="t1", decisions={"delete_file": "approve"})
    assert_still_pending(g, model, effects, before, res)
    recs = decisions_of(g.checkpointer, "t1")
    assert len(recs) == 1
    assert (recs[0].call_id, recs[0].verdict, recs[0].applied) == ("delete_file", "approve", False)
    assert recs[0].note and "tool name" in recs[0].note and CALL in recs[0].note


def test_a_decision_for_an_unknown_call_id_is_ignored(stores: Stores, effects: w.Effects) -> None:
    g, model, before = paused_flow(stores, effects)
    res = g.invoke(None, thread_id="t1", decisions={"call_nope": "approve"})
    assert_still_pending(g, model, effects, before, res)
    recs = decisions_of(g.checkpointer, "t1")
    assert [(r.call_id, r.applied) for r in recs] == [("call_nope", False)]
    assert recs[0].note and "call_nope" in recs[0].note


def test_a_decision_with_another_fingerprint_is_ignored_and_recorded(
    stores: Stores, effects: w.Effects
) -> None:
    g, model, before = paused_flow(stores, effects)
    other = tool_call_fingerprint("delete_file", {"path": "/data/other.csv"})
    res = g.invoke(None, thread_id="t1", decisions={CALL: Decision.approve(fingerprint=other)})
    assert_still_pending(g, model, effects, before, res)
    recs = decisions_of(g.checkpointer, "t1", CALL)
    assert len(recs) == 1
    assert (recs[0].applied, recs[0].fingerprint) == (False, other)
    assert recs[0].note and "fingerprint" in recs[0].note
    # The call can still be approved with the right fingerprint.
    res = g.invoke(None, thread_id="t1", decisions={CALL: Decision.approve(fingerprint=FP)})
    assert res.status == "done" and tool_runs(effects) == 1


def test_a_matching_fingerprint_with_keys_in_another_order_is_applied(
    stores: Stores, effects: w.Effects
) -> None:
    args = {"src": "/data/a.csv", "dst": "/archive/a.csv", "options": {"x": 1, "y": [1, 2]}}
    model = ScriptedModel([w.propose(w.call("call_mv", "move_file", **args)), "Moved."])
    moved: list[dict[str, Any]] = []

    @tool
    def move_file(src: str, dst: str, options: dict[str, Any]) -> str:
        """Move a file."""
        moved.append({"src": src, "dst": dst, "options": options})
        return "ok"

    agent = Agent("mover", model, [move_file], require_confirmation=["move_file"])
    g = single_agent_graph(agent, stores.new())
    pause = only_pause(g.invoke({"messages": [w.USER]}, thread_id="t1"))
    assert pause.request is not None
    reordered = {"options": {"y": [1, 2], "x": 1}, "dst": "/archive/a.csv", "src": "/data/a.csv"}
    fp = tool_call_fingerprint("move_file", reordered)
    assert fp == pause.request.fingerprint
    res = g.invoke(None, thread_id="t1", decisions={"call_mv": Decision.approve(fingerprint=fp)})
    assert res.status == "done"
    assert moved == [args]
    recs = decisions_of(g.checkpointer, "t1")
    assert [(r.call_id, r.applied, r.fingerprint) for r in recs] == [("call_mv", True, fp)]


def test_resume_by_pause_id_cannot_bypass_the_fingerprint(
    stores: Stores, effects: w.Effects
) -> None:
    g, _model, before = paused_flow(stores, effects)
    other = tool_call_fingerprint("delete_file", {"path": "/data/other.csv"})
    answer = Decision.approve(fingerprint=other).as_answer()
    with contextlib.suppress(GraphflowError):  # refusing the answer is fine too
        g.invoke(None, thread_id="t1", resume={before.pauses[0].id: answer})
    assert tool_runs(effects) == 0
    assert [p.id for p in g.pending_pauses("t1")] == [p.id for p in before.pauses]


def test_resume_by_pause_id_is_refused_or_recorded_as_a_decision(
    stores: Stores, effects: w.Effects
) -> None:
    g, _model, before = paused_flow(stores, effects)
    with contextlib.suppress(GraphflowError):  # refusing the answer is fine too
        g.invoke(None, thread_id="t1", resume={before.pauses[0].id: "approve"})
    if tool_runs(effects):
        recs = decisions_of(g.checkpointer, "t1", CALL)
        assert [(r.verdict, r.applied) for r in recs] == [("approve", True)]
    else:
        assert [p.id for p in g.pending_pauses("t1")] == [p.id for p in before.pauses]


def single_agent_graph(agent: Agent, cp: Checkpointer | None) -> Any:
    from graphflow import END, START, StateGraph

    b = StateGraph(MessagesState)
    b.add_node(AgentNode(agent))
    b.add_edge(START, agent.name)
    b.add_edge(agent.name, END)
    return b.compile(checkpointer=cp)


# -- 4. deny with a reason ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("decision", "reason"),
    [
        (Decision.deny(reason="keep the quarterly report"), "keep the quarterly report"),
        ("deny", None),
    ],
    ids=["Decision.deny", "string"],
)
def test_deny_tells_the_model_and_does_not_run(
    stores: Stores, effects: w.Effects, decision: Any, reason: str | None
) -> None:
    model = ScriptedModel([*w.SCRIPTS["flow"][:1], "OK, I will not delete it."])
    g = w.build(stores.new(), model, effects)
    start(g)
    res = g.invoke(None, thread_id="t1", decisions={CALL: decision})
    assert res.status == "done"
    assert tool_runs(effects) == 0
    assert dispatch_of(g.checkpointer, "t1", CALL) is None
    assert len(model.calls) == 2
    text = tool_messages(model.calls[1].messages)[CALL]
    assert "denied" in text
    if reason is not None:
        assert reason in text
    recs = decisions_of(g.checkpointer, "t1")
    assert [(r.verdict, r.reason, r.applied) for r in recs] == [("deny", reason, True)]


def test_submitted_deny_with_reason_reaches_the_model(stores: Stores, effects: w.Effects) -> None:
    model = ScriptedModel([*w.SCRIPTS["flow"][:1], "OK."])
    g = w.build(stores.new(), model, effects)
    start(g)
    g.submit("t1", decisions={CALL: "deny"}, by="carol", reason="not today")
    res = g.invoke(None, thread_id="t1")
    assert res.status == "done" and tool_runs(effects) == 0
    assert "not today" in tool_messages(model.calls[1].messages)[CALL]
    recs = decisions_of(g.checkpointer, "t1")
    assert [(r.verdict, r.by, r.reason) for r in recs] == [("deny", "carol", "not today")]


# -- 5. confirmation handler ----------------------------------------------------------------------
class Handler:
    """Answers by tool name; records what it was asked."""

    def __init__(self, answers: dict[str, Decision | None]):
        self.answers = answers
        self.asked: list[ToolConfirmationRequest] = []

    async def decide(self, request: ToolConfirmationRequest) -> Decision | None:
        self.asked.append(request)
        return self.answers.get(request.tool_name)


def test_handler_approval_runs_without_a_pause(stores: Stores, effects: w.Effects) -> None:
    handler = Handler({"delete_file": Decision.approve(by="policy-bot")})
    model = ScriptedModel(w.SCRIPTS["flow"])
    g = w.build(stores.new(), model, effects, handler=handler)
    res = start(g)
    assert res.status == "done" and res.pauses == []
    assert tool_runs(effects) == 1
    assert len(model.calls) == 2
    assert len(handler.asked) == 1
    req = handler.asked[0]
    assert (req.tool_name, req.function_call_id, req.args, req.fingerprint, req.agent) == (
        "delete_file",
        CALL,
        {"path": w.PATH},
        FP,
        w.AGENT,
    )
    recs = decisions_of(g.checkpointer, "t1")
    assert [(r.call_id, r.verdict, r.by, r.applied) for r in recs] == [
        (CALL, "approve", "policy-bot", True)
    ]
    assert recs[0].created_at > 0


def test_handler_returning_none_pauses_for_a_human(stores: Stores, effects: w.Effects) -> None:
    handler = Handler({})
    model = ScriptedModel(w.SCRIPTS["flow"])
    g = w.build(stores.new(), model, effects, handler=handler)
    pause = only_pause(start(g))
    assert pause.request is not None and pause.request.function_call_id == CALL
    assert len(handler.asked) == 1 and tool_runs(effects) == 0
    res = g.invoke(None, thread_id="t1", decisions={CALL: "approve"})
    assert res.status == "done" and tool_runs(effects) == 1
    assert len(handler.asked) == 1  # the human answered; the handler is not asked again
    assert len(model.calls) == 2


def test_handler_deny_reaches_the_model(stores: Stores, effects: w.Effects) -> None:
    handler = Handler({"delete_file": Decision.deny(reason="policy: no deletes")})
    model = ScriptedModel([*w.SCRIPTS["flow"][:1], "Understood."])
    g = w.build(stores.new(), model, effects, handler=handler)
    res = start(g)
    assert res.status == "done" and tool_runs(effects) == 0
    assert "policy: no deletes" in tool_messages(model.calls[1].messages)[CALL]
    recs = decisions_of(g.checkpointer, "t1")
    assert [(r.verdict, r.reason, r.applied) for r in recs] == [
        ("deny", "policy: no deletes", True)
    ]


def test_handler_fingerprint_mismatch_pauses_and_is_recorded(
    stores: Stores, effects: w.Effects
) -> None:
    other = tool_call_fingerprint("delete_file", {"path": "/elsewhere"})
    handler = Handler({"delete_file": Decision.approve(fingerprint=other)})
    model = ScriptedModel(w.SCRIPTS["flow"])
    g = w.build(stores.new(), model, effects, handler=handler)
    only_pause(start(g))
    assert tool_runs(effects) == 0
    recs = decisions_of(g.checkpointer, "t1")
    assert [(r.applied, r.fingerprint) for r in recs] == [(False, other)]
    assert recs[0].note and "fingerprint" in recs[0].note


def test_handler_decision_is_recorded_once_when_the_node_reruns(
    stores: Stores, effects: w.Effects
) -> None:
    handler = Handler({"read_file": Decision.approve()})  # None for delete_file: ask a human
    model = ScriptedModel(
        [
            w.propose(
                w.call("call_r", "read_file", path="/a"), w.call("call_d", "delete_file", path="/b")
            ),
            "ok",
        ]
    )
    g = w.build(stores.new(), model, effects, handler=handler, require=True)
    pause = only_pause(start(g))
    assert pause.request is not None and pause.request.function_call_id == "call_d"
    res = g.invoke(None, thread_id="t1", decisions={"call_d": "approve"})
    assert res.status == "done"
    assert len(handler.asked) == 2  # once per call, never again on the rerun
    assert tool_runs(effects, name="read_file") == 1
    assert len(decisions_of(g.checkpointer, "t1", "call_r")) == 1


# -- 6. calls that need no confirmation run before the pause, once --------------------------------
def test_unconfirmed_calls_of_the_turn_run_before_the_pause_and_not_again(
    stores: Stores, effects: w.Effects
) -> None:
    model = ScriptedModel(
        [
            w.propose(
                w.call("call_l", "list_files", folder="/data"),
                w.call(CALL, "delete_file", path=w.PATH),
                w.call("call_r", "read_file", path="/data/x"),
            ),
            "Done.",
        ]
    )
    g = w.build(stores.new(), model, effects)
    pause = only_pause(start(g))
    assert pause.request is not None and pause.request.function_call_id == CALL
    counts = (tool_runs(effects, "list_files"), tool_runs(effects, "read_file"), tool_runs(effects))
    assert counts == (1, 1, 0)

    res = g.invoke(None, thread_id="t1", decisions={CALL: "approve"})
    assert res.status == "done"
    counts = (tool_runs(effects, "list_files"), tool_runs(effects, "read_file"), tool_runs(effects))
    assert counts == (1, 1, 1)
    assert len(model.calls) == 2
    msgs = model.calls[1].messages
    assert [m.tool_call_id for m in msgs if m.role == "tool"] == ["call_l", CALL, "call_r"]
    assert tool_messages(msgs)["call_r"] == "contents of /data/x"


# -- 7. racing resumers ---------------------------------------------------------------------------
@pytest.mark.slow
def test_three_processes_resume_one_approved_thread_tool_runs_once(
    tmp_path: Path, server: ForkServer, sqlite_stores: Stores
) -> None:
    eff = w.Effects(tmp_path / "effects.jsonl")
    g = w.build(sqlite_stores.new(), w.FileScriptedModel(w.SCRIPTS["flow"], eff), eff)
    only_pause(start(g))
    g.submit("t1", decisions={CALL: "approve"}, by="alice")
    anyio.run(g.checkpointer.close)  # type: ignore[union-attr]
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    children = [
        server.spawn(job(tmp_path, "t1", [{"op": "invoke"}], barrier=str(barrier), parties=3))
        for _ in range(3)
    ]
    outcomes = []
    for p in children:
        rc, out, err = p.finish()
        assert rc == 0 and out is not None, err[-3000:]
        outcomes.append(out[0])
    done = [o for o in outcomes if o.get("status") == "done"]
    busy = [o for o in outcomes if o.get("error") == ThreadBusyError.__name__]
    assert len(done) + len(busy) == 3, outcomes
    assert done, outcomes
    assert tool_runs(eff) == 1
    assert w.count(eff.read(), "model") == 2
    assert w.count(eff.read(), "node", name="sibling") == 1
    snap = g.get_state("t1")
    assert snap is not None and snap.values.messages[-1].content == "Deleted /data/report.csv."


# -- 8. a crash between dispatch claim and outcome ------------------------------------------------
CRASH_VARIANTS = ("approve", "deny", "idempotent")


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory, server: ForkServer) -> dict[str, Path]:
    """One SQLite file per variant whose thread crashed inside ``delete_file``.

    Each child starts the flow, approves the call and dies (``os._exit(137)``) inside the
    tool, after the dispatch claim was committed. The children run side by side.
    """
    root = tmp_path_factory.mktemp("crashed")
    kids: dict[str, Child] = {}
    for v in CRASH_VARIANTS:
        d = root / v
        d.mkdir()
        spec = job(
            d,
            "t1",
            [
                {"op": "invoke", "input": True},
                {"op": "invoke", "decisions": {CALL: "approve"}},
            ],
            crash=True,
            idempotent=v == "idempotent",
        )
        kids[v] = server.spawn(spec)
    for v, p in kids.items():
        rc, out, err = p.finish()
        assert rc == 137 and out is None, f"{v}: rc={rc} {err}"
    return {v: root / v for v in CRASH_VARIANTS}


def after_crash(
    d: Path, stores: list[SqliteCheckpointer], *, idempotent: bool = False
) -> tuple[Any, w.Effects]:
    eff = w.Effects(d / "effects.jsonl")
    assert tool_runs(eff) == 1 and w.count(eff.read(), "tool", event="done") == 0
    assert w.count(eff.read(), "model") == 1
    cp = SqliteCheckpointer(d / "agent.db")
    stores.append(cp)
    rec = dispatch_of(cp, "t1", CALL)
    assert rec is not None and rec.status == "claimed"  # claimed, outcome never recorded
    model = w.FileScriptedModel([*w.SCRIPTS["flow"][:1], ModelResponse(text="Noted.")], eff)
    return w.build(cp, model, eff, idempotent=idempotent), eff


@pytest.fixture
def opened() -> Iterator[list[SqliteCheckpointer]]:
    cps: list[SqliteCheckpointer] = []
    yield cps
    for cp in cps:
        anyio.run(cp.close)


def assert_outcome_unknown_pause(res: Any) -> ToolConfirmationPause:
    pause = only_pause(res)
    assert pause.kind == "tool_confirmation"
    assert pause.value["outcome"] == "unknown"
    assert pause.request is not None and pause.request.function_call_id == CALL
    assert pause.request.fingerprint == FP
    return pause


@pytest.mark.slow
def test_crash_after_claim_surfaces_outcome_unknown_then_approve_runs_once(
    crashed: dict[str, Path], opened: list[SqliteCheckpointer]
) -> None:
    g, eff = after_crash(crashed["approve"], opened)
    pause = assert_outcome_unknown_pause(g.invoke(None, thread_id="t1"))
    assert tool_runs(eff) == 1  # not re-run automatically
    # Asking again changes nothing.
    again = g.invoke(None, thread_id="t1")
    assert [p.id for p in again.pauses] == [pause.id] and tool_runs(eff) == 1
    res = g.invoke(None, thread_id="t1", decisions={CALL: Decision.approve(by="ops")})
    assert res.status == "done"
    assert tool_runs(eff) == 2 and w.count(eff.read(), "tool", event="done") == 1
    assert w.count(eff.read(), "model") == 2  # the model was not asked again for turn 0
    rec = dispatch_of(g.checkpointer, "t1", CALL)
    assert rec is not None and rec.status == "succeeded"
    assert w.count(eff.read(), "node", name="sibling") == 1


@pytest.mark.slow
def test_crash_after_claim_then_deny_tells_the_model_it_did_not_run(
    crashed: dict[str, Path], opened: list[SqliteCheckpointer]
) -> None:
    g, eff = after_crash(crashed["deny"], opened)
    assert_outcome_unknown_pause(g.invoke(None, thread_id="t1"))
    res = g.invoke(None, thread_id="t1", decisions={CALL: "deny"})
    assert res.status == "done"
    assert tool_runs(eff) == 1
    reqs = w.model_requests(eff.read())
    assert len(reqs) == 2
    text = tool_messages([Message.model_validate(m) for m in reqs[1]])[CALL]
    assert CALL in text and "not to run" in text


@pytest.mark.slow
def test_crash_after_claim_of_an_idempotent_tool_reruns_it_without_a_pause(
    crashed: dict[str, Path], opened: list[SqliteCheckpointer]
) -> None:
    g, eff = after_crash(crashed["idempotent"], opened, idempotent=True)
    res = g.invoke(None, thread_id="t1")
    assert res.status == "done" and res.pauses == []
    assert tool_runs(eff) == 2 and w.count(eff.read(), "tool", event="done") == 1
    assert w.count(eff.read(), "model") == 2
    rec = dispatch_of(g.checkpointer, "t1", CALL)
    assert rec is not None and rec.status == "succeeded"


# -- 9. bad proposals come back to the model ------------------------------------------------------
def test_invalid_arguments_and_unknown_tools_are_reported_to_the_model(
    stores: Stores, effects: w.Effects
) -> None:
    model = ScriptedModel(
        [
            w.propose(
                ToolCall(id="call_bad", name="delete_file", args={"file": "/x"}),  # no "path"
                ToolCall(id="call_type", name="delete_file", args={"path": ["not", "a", "str"]}),
                ToolCall(id="call_unknown", name="format_disk", args={"disk": "/dev/sda"}),
            ),
            "Sorry.",
        ]
    )
    g = w.build(stores.new(), model, effects)
    res = start(g)
    assert res.status == "done" and res.pauses == []
    assert tool_runs(effects) == 0
    assert len(model.calls) == 2
    results = tool_messages(model.calls[1].messages)
    assert results["call_bad"].startswith("Error") and "path" in results["call_bad"]
    assert results["call_type"].startswith("Error")
    assert results["call_unknown"].startswith("Error") and "format_disk" in results["call_unknown"]
    assert decisions_of(g.checkpointer, "t1") == []


# -- 10. decisions are append-only records --------------------------------------------------------
def test_every_decision_is_an_append_only_record(stores: Stores, effects: w.Effects) -> None:
    g, _model, _ = paused_flow(stores, effects)
    cp = g.checkpointer
    bad_fp = tool_call_fingerprint("delete_file", {"path": "/nope"})
    g.invoke(None, thread_id="t1", decisions={"delete_file": "approve"}, principal="mallory")
    g.invoke(None, thread_id="t1", decisions={CALL: Decision.approve(fingerprint=bad_fp, by="bob")})
    first = decisions_of(cp, "t1")
    res = g.invoke(
        None,
        thread_id="t1",
        principal="alice",
        decisions={CALL: Decision.approve(fingerprint=FP, reason="reviewed the path")},
    )
    assert res.status == "done"
    recs = decisions_of(cp, "t1")
    assert recs[: len(first)] == first  # nothing earlier changed
    got = [(r.call_id, r.verdict, r.by, r.reason, r.fingerprint, r.applied) for r in recs]
    assert got == [
        ("delete_file", "approve", "mallory", None, None, False),
        (CALL, "approve", "bob", None, bad_fp, False),
        (CALL, "approve", "alice", "reviewed the path", FP, True),
    ]
    assert all(isinstance(r.created_at, float) and r.created_at > 0 for r in recs)
    stamps = [r.created_at for r in recs]
    assert stamps == sorted(stamps)
    assert [r.call_id for r in decisions_of(cp, "t1", CALL)] == [CALL, CALL]
    assert tool_runs(effects) == 1


# -- 11. a decision matching no pending pause -----------------------------------------------------
def test_a_decision_matching_no_pause_executes_nothing(stores: Stores, effects: w.Effects) -> None:
    g, model, before = paused_flow(stores, effects)
    snap = g.get_state("t1")
    assert snap is not None
    res = g.invoke(None, thread_id="t1", decisions={"call_zzz": "deny", "delete_file": "deny"})
    assert_still_pending(g, model, effects, before, res)
    assert res.checkpoint_id == before.checkpoint_id == snap.checkpoint_id
    assert [(p.id, p.value) for p in res.pauses] == [(p.id, p.value) for p in before.pauses]
    after = g.get_state("t1")
    assert after is not None and after.checkpoint_id == snap.checkpoint_id
    assert dispatch_of(g.checkpointer, "t1", CALL) is None


def test_a_decision_matching_no_pause_runs_no_node(stores: Stores, effects: w.Effects) -> None:
    """Not even the paused agent node is started again (its rerun would only replay)."""
    g, model, before = paused_flow(stores, effects)
    events = list(g.stream(None, thread_id="t1", mode="debug", decisions={"call_zzz": "approve"}))
    assert [e.type for e in events if e.type in ("task_start", "task_end", "checkpoint")] == []
    assert [e.type for e in events] == ["pause", "paused"]
    found = [p for p in map(ToolConfirmationPause.from_event, events) if p is not None]
    assert [p.id for p in found] == [p.id for p in before.pauses]
    assert_still_pending(g, model, effects, before, g.invoke(None, thread_id="t1"))


def test_an_invalid_decision_value_is_rejected_before_anything_is_stored(
    stores: Stores, effects: w.Effects
) -> None:
    g, _model, before = paused_flow(stores, effects)
    with pytest.raises(InvalidArgumentError):
        g.invoke(None, thread_id="t1", decisions={CALL: "yes"})
    assert decisions_of(g.checkpointer, "t1") == []
    assert [p.id for p in g.pending_pauses("t1")] == [p.id for p in before.pauses]
    assert tool_runs(effects) == 0
    res = g.invoke(None, thread_id="t1", decisions={CALL: "approve"})
    assert res.status == "done" and tool_runs(effects) == 1


def test_a_decision_object_with_a_bad_verdict_is_rejected_up_front(
    stores: Stores, effects: w.Effects
) -> None:
    g, _model, before = paused_flow(stores, effects)
    with pytest.raises(InvalidArgumentError):
        g.invoke(None, thread_id="t1", decisions={CALL: Decision("maybe")})  # type: ignore[arg-type]
    assert decisions_of(g.checkpointer, "t1") == []
    assert [p.id for p in g.pending_pauses("t1")] == [p.id for p in before.pauses]
    res = g.invoke(None, thread_id="t1", decisions={CALL: "approve"})
    assert res.status == "done" and tool_runs(effects) == 1
