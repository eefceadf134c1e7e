"""Nested subgraphs: a compiled graph as a node (API.md "Building a graph", DESIGN.md
"Interrupts" and "Stored records").

- Shared keys, ``append`` keys gaining the child's items once, last-write-wins keys,
  ``input=``/``output=`` maps, a child with its own schema, bad maps failing at compile.
- The child's own namespace (``<node>:<task id>``, nested with ``|``) and checkpoints; the
  parent's history holds only its own steps.
- Pauses inside a child (``interrupt()``, a gate compiled into the child, a tool
  confirmation of a child ``AgentNode``) pause the parent with a dotted ``Pause.node``;
  answers given to the parent reach the child, which resumes from its own checkpoint:
  every completed node at every level ran once, the paused node re-entered once.
- A pausing subgraph under a root without checkpointer is refused by ``invoke`` (not at
  compile: a graph compiled without checkpointer may itself be nested).
- Resume in a fresh interpreter on SQLite (``_subgraph_worker.py``), a completed parallel
  sibling not rerun, ``get_state(subgraphs=True)``, debug stream paths, one compiled
  subgraph used twice.
- Property: random nestings paused anywhere end like the uninterrupted run, with exact
  per-node execution counts.

Every in-process test runs on ``MemoryCheckpointer`` and on a ``SqliteCheckpointer`` file.
Nothing asserts on timing. Engine bugs found here are kept as strict xfails (stream updates
of a subgraph node; a child's checkpoint cost growing with its history).
"""

from __future__ import annotations

import json
import operator
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import _subgraph_worker as sw
import anyio
import pytest
from _property_common import (
    DictState,
    ModelState,
    Tracker,
    answer_for,
    as_dict,
    crc,
    prepare_failure_report,
)
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from checkpoints import Checkpointer, CommitBatch, MemoryCheckpointer, SqliteCheckpointer
from checkpoints.models import ThreadId
from graphflow import (
    END,
    START,
    AmbiguousResumeError,
    CompiledGraph,
    GraphValidationError,
    NodeContext,
    NodeError,
    Send,
    StateGraph,
    StateSnapshot,
    ToolConfirmationPause,
    interrupt,
)
from graphflow.agents import (
    Agent,
    AgentNode,
    MessagesState,
    ModelResponse,
    ScriptedModel,
    ToolCall,
    tool,
)
from graphflow.reducers import append

WORKER = Path(sw.__file__)
TIMEOUT = 120.0  # seconds the child interpreter may take; guards against hangs only


# -- stores -------------------------------------------------------------------------------------
class Stores:
    """The checkpointers of a test: one memory store, or SQLite objects on one file."""

    def __init__(self, kind: str, tmp: Path):
        self.kind = kind
        self.tmp = tmp
        self.opened: list[SqliteCheckpointer] = []
        self._mem: MemoryCheckpointer | None = None

    def new(self) -> Checkpointer:
        if self.kind == "memory":
            if self._mem is None:
                self._mem = MemoryCheckpointer()
            return self._mem
        cp = SqliteCheckpointer(str(self.tmp / "subgraph.db"))
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


def checkpoints_of(cp: Checkpointer, thread: str, ns: str) -> list[Any]:
    return anyio.run(lambda: cp.list_checkpoints(ThreadId(thread), ns))


# -- graphs -------------------------------------------------------------------------------------
class State(TypedDict):
    log: Annotated[list[str], append]
    total: Annotated[int, operator.add]
    x: int


START_STATE: State = {"log": ["in"], "total": 0, "x": 0}


class Runs:
    """Executions of nodes by dotted path (``ctx.node``), and what each one saw."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.seen: dict[str, list[Any]] = {}
        self._lock = threading.Lock()

    def add(self, path: str, seen: Any = None) -> None:
        with self._lock:
            self.count[path] += 1
            self.seen.setdefault(path, []).append(seen)


def step(runs: Runs, name: str, *, ask: bool = False, weight: int = 1) -> Callable[..., Any]:
    """A node appending ``"<path>:<answer>"`` to ``log``, adding ``weight`` to ``total`` and
    setting ``x`` to ``x + 1``; with ``ask`` it calls ``interrupt()`` first."""

    def fn(state: State, ctx: NodeContext) -> dict[str, Any]:
        runs.add(ctx.node, dict(state))
        answer = interrupt({"node": ctx.node}) if ask else "-"
        return {"log": [f"{ctx.node}:{answer}"], "total": weight, "x": state["x"] + 1}

    fn.__name__ = name
    return fn


def chain(schema: Any, *nodes: tuple[str, Any], **compile_opts: Any) -> CompiledGraph:
    """``START -> nodes[0] -> ... -> END``, compiled with ``compile_opts``."""
    b = StateGraph(schema)
    prev = START
    for name, fn in nodes:
        b.add_node(name, fn)
        b.add_edge(prev, name)
        prev = name
    b.add_edge(prev, END)
    return b.compile(**compile_opts)


def review_child(runs: Runs, **compile_opts: Any) -> CompiledGraph:
    """``s1 -> s2`` where ``s2`` asks; weights 10 and 100."""
    return chain(
        State,
        ("s1", step(runs, "s1", weight=10)),
        ("s2", step(runs, "s2", ask=True, weight=100)),
        **compile_opts,
    )


def around(runs: Runs, child: CompiledGraph, cp: Checkpointer | None) -> CompiledGraph:
    """``a -> review(child) -> z``; weights 1 and 1000."""
    return chain(
        State,
        ("a", step(runs, "a", weight=1)),
        ("review", child),
        ("z", step(runs, "z", weight=1000)),
        checkpointer=cp,
    )


def only_pause(result: Any) -> Any:
    assert result.status == "paused", result
    assert len(result.pauses) == 1, result.pauses
    return result.pauses[0]


def child_ns(*hops: tuple[str, str]) -> str:
    """The namespace of a nested run: ``node:task_id`` hops joined with ``|``."""
    return "|".join(f"{node}:{task}" for node, task in hops)


# -- building: shared keys and maps ---------------------------------------------------------------
def test_shared_keys_append_once_add_once_last_write_wins(stores: Stores) -> None:
    runs = Runs()
    child = chain(
        State,
        ("s1", step(runs, "s1", weight=10)),
        ("s2", step(runs, "s2", weight=100)),
    )
    graph = around(runs, child, stores.new())

    result = graph.invoke(START_STATE, thread_id="t")

    assert result.status == "done"
    # append: the child's items arrive once (the child's whole list is never re-appended);
    # operator.add: the child's increments arrive once (not the child's running total);
    # last write wins: the child's last write to x.
    assert result.state == {
        "log": ["in", "a:-", "review.s1:-", "review.s2:-", "z:-"],
        "total": 1111,
        "x": 4,
    }
    # The child saw the parent's values when it started.
    assert runs.seen["review.s1"] == [{"log": ["in", "a:-"], "total": 1, "x": 1}]
    assert runs.count == Counter({"a": 1, "review.s1": 1, "review.s2": 1, "z": 1})


class Outer(TypedDict):
    log: Annotated[list[str], append]
    topic: str
    summary: str
    secret: int


class Inner(BaseModel):
    notes: Annotated[list[str], append] = []
    text: str = ""
    result: str = ""
    steps: int = 0  # the child's own key: never reaches the parent


def test_input_output_maps_and_a_child_with_its_own_schema(stores: Stores) -> None:
    seen: list[dict[str, Any]] = []

    def write(state: Inner, ctx: NodeContext) -> dict[str, Any]:
        seen.append(state.model_dump())
        return {
            "notes": [f"{ctx.node}:{state.text}"],
            "text": "changed by the child",  # mapped in input= only: not written back
            "result": f"R({state.text},{state.steps})",
            "steps": state.steps + 1,
        }

    child = chain(Inner, ("w1", write), ("w2", write))
    b = StateGraph(Outer)
    b.add_node(
        "review",
        child,
        input={"text": "topic", "notes": "log"},
        output={"result": "summary", "notes": "log"},
    )
    b.add_edge(START, "review").add_edge("review", END)
    graph = b.compile(checkpointer=stores.new())

    result = graph.invoke({"log": ["in"], "topic": "T", "summary": "", "secret": 7}, thread_id="t")

    assert result.status == "done"
    assert result.state == {
        "log": ["in", "review.w1:T", "review.w2:changed by the child"],
        "topic": "T",
        "summary": "R(changed by the child,1)",
        "secret": 7,
    }
    assert seen[0] == {"notes": ["in"], "text": "T", "result": "", "steps": 0}
    assert seen[1]["steps"] == 1 and seen[1]["notes"] == ["in", "review.w1:T"]


@pytest.mark.parametrize(
    "maps",
    [
        {"input": {"missing": "topic"}},
        {"input": {"text": "missing"}},
        {"output": {"missing": "summary"}},
        {"output": {"result": "missing"}},
    ],
    ids=["input-child-key", "input-parent-key", "output-child-key", "output-parent-key"],
)
def test_a_map_to_a_missing_key_fails_at_compile_naming_the_node(maps: dict[str, Any]) -> None:
    child = chain(Inner, ("w", lambda s: {"result": "r"}))
    b = StateGraph(Outer).add_node("review", child, **maps)  # reported at compile
    b.add_edge(START, "review").add_edge("review", END)
    with pytest.raises(GraphValidationError) as info:
        b.compile()
    assert "review" in info.value.nodes
    assert "'review'" in str(info.value) and "missing" in str(info.value)


# -- namespaces and history ----------------------------------------------------------------------
def test_the_child_has_its_own_namespace_and_checkpoints(stores: Stores) -> None:
    runs = Runs()
    cp = stores.new()
    graph = around(runs, review_child(runs), cp)
    graph.invoke(START_STATE, thread_id="t")
    paused = graph.get_state("t")
    assert paused is not None and paused.next == ("review",)
    task = paused.tasks[0].id

    result = graph.invoke(None, thread_id="t", resume="yes")
    assert result.status == "done"

    ns = child_ns(("review", task))
    child = checkpoints_of(cp, "t", ns)
    # The child's input checkpoint and one per child step; the resume did not restart it.
    assert [c.step for c in child] == [1, 0, -1]
    assert {c.ns for c in child} == {ns}
    assert [c.source for c in child] == ["loop", "loop", "input"]
    # The parent's history holds the parent's own steps only: input, a, review, z.
    history = graph.get_state_history("t")
    assert len(history) == 4 == len(checkpoints_of(cp, "t", ""))
    assert [s.next for s in history] == [(), ("z",), ("review",), ("a",)]
    assert [s.step for s in history] == [2, 1, 0, -1]


# -- pauses inside a child ------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["value", "pause-id-map", "submit"])
def test_an_interrupt_in_a_child_pauses_the_parent_and_the_answer_reaches_it(
    stores: Stores, how: str
) -> None:
    runs = Runs()
    cp = stores.new()
    graph = around(runs, review_child(runs), cp)

    pause = only_pause(graph.invoke(START_STATE, thread_id="t"))
    assert (pause.kind, pause.node) == ("interrupt", "review.s2")
    assert pause.value == {"node": "review.s2"}
    assert [p.id for p in graph.pending_pauses("t")] == [pause.id]
    assert [(t.thread_id, t.status, t.pending_pauses) for t in graph.list_threads()] == [
        ("t", "paused", 1)
    ]

    # A fresh graph object on the store (a new checkpointer object on the SQLite file).
    graph = around(runs, review_child(runs), stores.new())
    if how == "submit":  # recorded without running; the next run applies it
        graph.submit("t", resume={pause.id: "yes"}, by="alice")
        assert runs.count["review.s2"] == 1
        result = graph.invoke(None, thread_id="t")
    else:
        resume: Any = "yes" if how == "value" else {pause.id: "yes"}
        result = graph.invoke(None, thread_id="t", resume=resume)

    assert result.status == "done"
    assert result.state["log"] == ["in", "a:-", "review.s1:-", "review.s2:yes", "z:-"]
    assert result.state["total"] == 1111
    assert runs.count == Counter({"a": 1, "review.s1": 1, "review.s2": 2, "z": 1})
    # The rerun of the paused node saw exactly what it saw before it paused.
    first, second = runs.seen["review.s2"]
    assert first == second


@pytest.mark.parametrize("gate", ["before", "after"])
def test_a_gate_compiled_into_the_child_pauses_the_parent(stores: Stores, gate: str) -> None:
    runs = Runs()
    child = chain(
        State,
        ("s1", step(runs, "s1", weight=10)),
        ("s2", step(runs, "s2", weight=100)),
        **{f"interrupt_{gate}": ["s2"]},
    )
    graph = around(runs, child, stores.new())

    pause = only_pause(graph.invoke(START_STATE, thread_id="t"))
    assert (pause.kind, pause.node) == (gate, "review.s2")
    assert runs.count["review.s2"] == (1 if gate == "after" else 0)

    result = graph.invoke(None, thread_id="t")  # invoke(None) releases gates

    assert result.status == "done"
    assert result.state["log"] == ["in", "a:-", "review.s1:-", "review.s2:-", "z:-"]
    assert result.state["total"] == 1111
    assert runs.count == Counter({"a": 1, "review.s1": 1, "review.s2": 1, "z": 1})


def test_a_failing_child_node_fails_the_parent_and_a_retry_reruns_it_alone(
    stores: Stores,
) -> None:
    runs = Runs()
    broken = [True]

    def flaky(state: State, ctx: NodeContext) -> dict[str, Any]:
        runs.add(ctx.node)
        if broken[0]:
            raise ValueError("kaboom")
        return {"log": [ctx.node], "total": 100}

    child = chain(State, ("s1", step(runs, "s1", weight=10)), ("s2", flaky))
    graph = around(runs, child, stores.new())

    with pytest.raises(NodeError) as info:
        graph.invoke(START_STATE, thread_id="t")
    assert "review.s2" in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)
    assert [t.status for t in graph.list_threads()] == ["failed"]

    broken[0] = False
    result = graph.invoke(None, thread_id="t")

    assert result.status == "done"
    assert result.state["log"] == ["in", "a:-", "review.s1:-", "review.s2", "z:-"]
    assert runs.count == Counter({"a": 1, "review.s1": 1, "review.s2": 2, "z": 1})


class AgentState(MessagesState):
    log: Annotated[list[str], append] = Field(default_factory=list)


@pytest.mark.parametrize("verdict", ["approve", "deny"])
def test_a_tool_confirmation_in_a_child_agent_is_decided_at_the_parent(
    stores: Stores, verdict: str
) -> None:
    runs = Runs()

    @tool
    def delete_file(path: str) -> dict[str, str]:
        """Delete a file."""
        runs.add(f"tool:{path}")
        return {"deleted": path}

    model = ScriptedModel(
        [
            ModelResponse(
                text="", tool_calls=[ToolCall(id="call_1", name="delete_file", args={"path": "/x"})]
            ),
            "all done",
        ]
    )
    agent = Agent(name="fm", model=model, tools=[delete_file], require_confirmation=["delete_file"])

    def pre(state: AgentState, ctx: NodeContext) -> dict[str, Any]:
        runs.add(ctx.node)
        return {"log": [ctx.node]}

    child = chain(AgentState, ("pre", pre), ("fm", AgentNode(agent)))
    graph = chain(AgentState, ("review", child), checkpointer=stores.new())

    user = {"role": "user", "content": "hi"}
    pause = only_pause(graph.invoke({"messages": [user]}, thread_id="t"))
    assert isinstance(pause, ToolConfirmationPause)
    assert (pause.kind, pause.node) == ("tool_confirmation", "review.fm")
    assert pause.request is not None and pause.request.function_call_id == "call_1"
    assert len(model.calls) == 1

    result = graph.invoke(None, thread_id="t", decisions={"call_1": verdict})

    assert result.status == "done"
    assert len(model.calls) == 2  # the committed turn was not asked again
    tool_results = [m.content for m in result.state.messages if m.role == "tool"]
    assert [m.role for m in result.state.messages] == ["user", "assistant", "tool", "assistant"]
    assert result.state.messages[-1].content == "all done"
    assert result.state.log == ["review.pre"]
    if verdict == "approve":
        assert runs.count == Counter({"review.pre": 1, "tool:/x": 1})
        assert tool_results == ['{"deleted": "/x"}']
    else:
        assert runs.count == Counter({"review.pre": 1})
        assert "denied" in tool_results[0]
        # The model's second request carried the denial.
        assert any("denied" in str(m.content) for m in model.calls[1].messages)


# -- three levels ---------------------------------------------------------------------------------
def three_levels(runs: Runs, cp: Checkpointer | None) -> tuple[CompiledGraph, CompiledGraph]:
    """``a -> mid[m1 -> leaf[d1 -> deep(asks) -> d2] -> m2] -> z``; mid and leaf are
    compiled without a checkpointer. Returns (root, mid)."""
    leaf = chain(
        State,
        ("d1", step(runs, "d1", weight=100)),
        ("deep", step(runs, "deep", ask=True, weight=1000)),
        ("d2", step(runs, "d2", weight=10000)),
    )
    mid = chain(
        State,
        ("m1", step(runs, "m1", weight=10)),
        ("leaf", leaf),
        ("m2", step(runs, "m2", weight=100000)),
    )
    root = chain(
        State,
        ("a", step(runs, "a", weight=1)),
        ("mid", mid),
        ("z", step(runs, "z", weight=1000000)),
        checkpointer=cp,
    )
    return root, mid


THREE_LEVEL_LOG = [
    "in",
    "a:-",
    "mid.m1:-",
    "mid.leaf.d1:-",
    "mid.leaf.deep:yes",
    "mid.leaf.d2:-",
    "mid.m2:-",
    "z:-",
]


@pytest.mark.parametrize("how", ["value", "pause-id-map"])
def test_three_levels_pause_and_resume_under_a_root_with_checkpointer(
    stores: Stores, how: str
) -> None:
    runs = Runs()
    cp = stores.new()
    root, _ = three_levels(runs, cp)

    pause = only_pause(root.invoke(START_STATE, thread_id="t"))
    assert (pause.kind, pause.node) == ("interrupt", "mid.leaf.deep")
    snap = root.get_state("t", subgraphs=True)
    assert snap is not None
    mid_task = snap.tasks[0]
    assert mid_task.state is not None
    leaf_task = mid_task.state.tasks[0]

    result = root.invoke(None, thread_id="t", resume="yes" if how == "value" else {pause.id: "yes"})

    assert result.status == "done"
    assert result.state == {"log": THREE_LEVEL_LOG, "total": 1111111, "x": 7}
    once = ("a", "mid.m1", "mid.leaf.d1", "mid.leaf.d2", "mid.m2", "z")
    assert runs.count == Counter(dict.fromkeys(once, 1)) + Counter({"mid.leaf.deep": 2})
    # Each level kept its own checkpoints: input + one per step, none restarted.
    mid_ns = child_ns(("mid", mid_task.id))
    leaf_ns = child_ns(("mid", mid_task.id), ("leaf", leaf_task.id))
    assert [c.step for c in checkpoints_of(cp, "t", mid_ns)] == [2, 1, 0, -1]
    assert [c.step for c in checkpoints_of(cp, "t", leaf_ns)] == [2, 1, 0, -1]
    assert len(root.get_state_history("t")) == 4


def test_a_pausing_subgraph_without_checkpointer_is_refused_by_invoke_not_compile() -> None:
    runs = Runs()
    # Compiles: a graph without checkpointer may itself be nested under one with it.
    root, mid = three_levels(runs, None)
    for graph, name in ((root, "mid"), (mid, "leaf")):
        with pytest.raises(GraphValidationError) as info:
            graph.invoke(START_STATE)
        # (the graph's own nodes are named too: step()'s code refers to interrupt())
        assert name in info.value.nodes
        assert repr(name) in str(info.value) and "checkpointer" in str(info.value)
        with pytest.raises(GraphValidationError):
            list(graph.stream(START_STATE, mode="debug"))
    assert runs.count == Counter()  # refused before any node ran

    # A gate compiled into a child can pause too; a child that cannot pause runs fine.
    gated = chain(State, ("s", step(runs, "s")), interrupt_before=["s"])
    with pytest.raises(GraphValidationError):
        chain(State, ("review", gated)).invoke(START_STATE)
    assert runs.count == Counter()
    plain = chain(State, ("s", lambda state: {"log": ["s"]}))  # no interrupt, no gate
    result = chain(State, ("review", plain)).invoke(START_STATE)
    assert result.status == "done" and result.state["log"] == ["in", "s"]


# -- parallel sibling -----------------------------------------------------------------------------
def test_a_completed_parallel_sibling_is_not_rerun_after_resume(stores: Stores) -> None:
    runs = Runs()

    async def side(state: State, ctx: NodeContext) -> dict[str, Any]:
        runs.add(ctx.node)
        return {"log": [f"{ctx.node}"], "total": 5}

    b = StateGraph(State)
    b.add_node("a", step(runs, "a", weight=1)).add_node("review", review_child(runs))
    b.add_node("side", side).add_node("sync_side", step(runs, "sync_side", weight=7))
    b.add_node("z", step(runs, "z", weight=1000))
    b.add_edge(START, "a")
    for n in ("review", "side", "sync_side"):
        b.add_edge("a", n)
    b.add_edge(["review", "side", "sync_side"], "z").add_edge("z", END)
    graph = b.compile(checkpointer=stores.new())

    pause = only_pause(graph.invoke(START_STATE, thread_id="t"))
    assert pause.node == "review.s2"
    snap = graph.get_state("t")
    assert snap is not None
    assert {t.name: t.status for t in snap.tasks} == {
        "review": "paused",
        "side": "completed",
        "sync_side": "completed",
    }

    result = graph.invoke(None, thread_id="t", resume="yes")

    assert result.status == "done"
    assert runs.count == Counter(
        {"a": 1, "review.s1": 1, "review.s2": 2, "side": 1, "sync_side": 1, "z": 1}
    )
    # Writes of one step are applied in node-name order: review, side, sync_side.
    log = ["in", "a:-", "review.s1:-", "review.s2:yes", "side", "sync_side:-", "z:-"]
    assert result.state["log"] == log
    assert result.state["total"] == 1 + 110 + 5 + 7 + 1000


# -- state snapshots and streams ------------------------------------------------------------------
def test_get_state_with_subgraphs_nests_the_child_snapshots(stores: Stores) -> None:
    runs = Runs()
    root, _ = three_levels(runs, stores.new())
    pause = only_pause(root.invoke(START_STATE, thread_id="t"))

    flat = root.get_state("t")
    assert flat is not None
    assert flat.next == ("mid",)
    assert [t.state for t in flat.tasks] == [None]
    assert [p.id for p in flat.pauses] == [pause.id]  # the nested pause, at the root
    assert [p.id for p in flat.tasks[0].pauses] == [pause.id]
    assert flat.tasks[0].status == "paused"

    snap = root.get_state("t", subgraphs=True)
    assert snap is not None
    mid = snap.tasks[0].state
    assert isinstance(mid, StateSnapshot)
    assert mid.values == {"log": ["in", "a:-", "mid.m1:-"], "total": 11, "x": 2}
    assert mid.next == ("leaf",)
    assert [p.id for p in mid.pauses] == [pause.id]
    assert [t.status for t in mid.tasks] == ["paused"]
    leaf = mid.tasks[0].state
    assert isinstance(leaf, StateSnapshot)
    assert leaf.values == {"log": ["in", "a:-", "mid.m1:-", "mid.leaf.d1:-"], "total": 111, "x": 3}
    assert leaf.next == ("deep",)
    assert [(p.id, p.node) for p in leaf.pauses] == [(pause.id, "mid.leaf.deep")]
    assert [(t.name, t.status, t.state) for t in leaf.tasks] == [("deep", "paused", None)]

    root.invoke(None, thread_id="t", resume="yes")
    done = root.get_state("t", subgraphs=True)
    assert done is not None and done.next == () and done.pauses == ()
    assert done.values["log"] == THREE_LEVEL_LOG


def test_debug_stream_shows_child_tasks_with_dotted_paths(stores: Stores) -> None:
    runs = Runs()
    root, _ = three_levels(runs, stores.new())

    events = list(root.stream(START_STATE, thread_id="t", mode="debug"))
    starts = [e.node for e in events if e.type == "task_start"]
    assert starts == ["a", "mid", "mid.m1", "mid.leaf", "mid.leaf.d1", "mid.leaf.deep"]
    pauses = [e for e in events if e.type == "pause"]
    assert [e.node for e in pauses] == ["mid.leaf.deep"]
    assert events[-1].type == "paused"
    # ctx.node inside the child nodes is the dotted path.
    assert set(runs.count) == {"a", "mid.m1", "mid.leaf.d1", "mid.leaf.deep"}

    answer = {pauses[0].data.id: "yes"}
    events = list(root.stream(None, thread_id="t", mode="debug", resume=answer))
    starts = [e.node for e in events if e.type == "task_start"]
    assert starts == ["mid", "mid.leaf", "mid.leaf.deep", "mid.leaf.d2", "mid.m2", "z"]
    ends = [e.node for e in events if e.type == "task_end"]
    assert sorted(ends) == sorted(starts)
    assert events[-1].type == "done"
    assert events[-1].data["log"] == THREE_LEVEL_LOG


def test_the_updates_event_of_a_subgraph_node_reports_everything_it_wrote(
    stores: Stores,
) -> None:
    runs = Runs()
    child = chain(State, ("s1", step(runs, "s1", weight=10)), ("s2", step(runs, "s2")))
    graph = chain(State, ("review", child), checkpointer=stores.new())

    events = list(graph.stream(START_STATE, thread_id="t", mode="updates"))
    mine = [e.data["review"] for e in events if e.type == "updates" and "review" in e.data]
    assert len(mine) == 1
    assert mine[0]["log"] == ["review.s1:-", "review.s2:-"]


class CountingCheckpointer(MemoryCheckpointer):
    """Counts the values each step checkpoint writes (a list write counts its items)."""

    def __init__(self) -> None:
        super().__init__()
        self.written: dict[str, list[int]] = {}

    async def commit(self, thread_id: ThreadId, owner: str, batch: CommitBatch) -> None:
        ck = batch.checkpoint
        if ck is not None and ck.source == "loop":
            n = sum(len(w.value) if isinstance(w.value, list) else 1 for w in batch.channels)
            self.written.setdefault("child" if batch.ns else "root", []).append(n)
        await super().commit(thread_id, owner, batch)


def test_a_child_step_writes_what_changed_not_its_whole_history() -> None:
    class Loop(TypedDict):
        log: Annotated[list[str], append]
        n: int

    def body(state: Loop) -> dict[str, Any]:
        return {"log": [f"item{state['n']}"], "n": state["n"] + 1}

    b = StateGraph(Loop).add_node("body", body).add_edge(START, "body")
    b.add_conditional_edges("body", lambda s: "body" if s["n"] < 40 else END, ["body", END])
    cp = CountingCheckpointer()
    graph = chain(Loop, ("sub", b.compile()), checkpointer=cp)

    result = graph.invoke({"log": [], "n": 0}, thread_id="t")

    assert result.status == "done" and result.state["n"] == 40
    per_step = cp.written["child"]
    assert len(per_step) == 40
    assert max(per_step) <= max(per_step[:3]), per_step  # constant, not growing


# -- one compiled subgraph used twice -------------------------------------------------------------
class Pair(TypedDict):
    log: Annotated[list[str], append]
    topic: str
    first: str
    second: str


@pytest.mark.parametrize("layout", ["sequential", "parallel"])
def test_one_compiled_subgraph_used_twice_keeps_two_states(stores: Stores, layout: str) -> None:
    runs = Runs()

    def work(state: Inner, ctx: NodeContext) -> dict[str, Any]:
        runs.add(ctx.node, state.steps)
        answer = interrupt({"node": ctx.node})
        return {
            "notes": [f"{ctx.node}:{answer}"],
            "steps": state.steps + 1,
            "result": f"{ctx.node}({state.text}):{answer}:{state.steps}",
        }

    child = chain(Inner, ("w", work), ("w2", lambda s: {"steps": s.steps + 10}))
    b = StateGraph(Pair)
    b.add_node("p1", child, input={"text": "topic"}, output={"result": "first", "notes": "log"})
    b.add_node("p2", child, input={"text": "topic"}, output={"result": "second", "notes": "log"})
    if layout == "parallel":
        b.add_edge(START, "p1").add_edge(START, "p2")
        b.add_edge("p1", END).add_edge("p2", END)
    else:
        b.add_edge(START, "p1").add_edge("p1", "p2").add_edge("p2", END)
    graph = b.compile(checkpointer=stores.new())

    result = graph.invoke({"log": [], "topic": "T", "first": "", "second": ""}, thread_id="t")
    if layout == "parallel":
        assert result.status == "paused"
        by_node = {p.node: p for p in result.pauses}
        assert sorted(by_node) == ["p1.w", "p2.w"]
        with pytest.raises(AmbiguousResumeError):
            graph.invoke(None, thread_id="t", resume="both?")
        snap = graph.get_state("t", subgraphs=True)
        assert snap is not None
        states = {t.name: t.state for t in snap.tasks}
        assert states["p1"] is not None and states["p2"] is not None
        assert states["p1"].pauses[0].id == by_node["p1.w"].id
        assert states["p2"].pauses[0].id == by_node["p2.w"].id
        result = graph.invoke(
            None, thread_id="t", resume={by_node["p1.w"].id: "A", by_node["p2.w"].id: "B"}
        )
    else:
        assert only_pause(result).node == "p1.w"
        assert only_pause(graph.invoke(None, thread_id="t", resume="A")).node == "p2.w"
        result = graph.invoke(None, thread_id="t", resume="B")

    assert result.status == "done"
    # Each use started from its own fresh child state (steps 0), never from the other's.
    assert result.state["first"] == "p1.w(T):A:0"
    assert result.state["second"] == "p2.w(T):B:0"
    assert sorted(result.state["log"]) == ["p1.w:A", "p2.w:B"]
    assert runs.count == Counter({"p1.w": 2, "p2.w": 2})
    assert {tuple(v) for v in runs.seen.values()} == {(0, 0)}


# -- must hold: resume in a fresh process ---------------------------------------------------------
def test_pause_two_levels_deep_then_resume_in_a_fresh_process(tmp_path: Path) -> None:
    db = str(tmp_path / "graphflow.db")
    effects = tmp_path / "effects.txt"
    cp = SqliteCheckpointer(db)
    try:
        graph = sw.build(sw.file_recorder(effects)).compile(checkpointer=cp)
        pause = only_pause(graph.invoke(sw.INPUT, thread_id="t"))
    finally:
        anyio.run(cp.close)
    assert (pause.kind, pause.node) == ("interrupt", "mid.leaf.deep")

    proc = subprocess.run(
        [sys.executable, str(WORKER), db, str(effects), "t", sw.ANSWER],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])

    assert out["status"] == "done", out
    assert out["state"] == sw.reference()
    lines = sw.read_effects(effects)
    # Every completed node at every level ran exactly once; the paused node re-entered once,
    # in the new process; its memoized step was replayed, not re-run.
    expected = Counter(dict.fromkeys(sw.ALL_NODES, 1)) + Counter({"mid.leaf.deep": 1})
    assert sw.entries(effects) == expected
    in_child = [node for node, _, pid in lines if pid == out["pid"]]
    assert sorted(in_child) == sorted(sw.AFTER_RESUME)
    assert out["pid"] != next(pid for _, _, pid in lines)


# -- property: random nestings, paused anywhere ---------------------------------------------------


@dataclass(frozen=True)
class PNode:
    name: str
    interrupts: int  # interrupt() calls per execution
    key: str | None  # last-write-wins key it writes
    mul: int  # weight of its operator.add write


@dataclass(frozen=True)
class PSub:
    name: str
    level: Level


@dataclass(frozen=True)
class Level:
    schema: str  # "dict" or "model"
    steps: tuple[tuple[PNode | PSub, ...], ...]  # one element, or two in parallel
    before: frozenset[str] = frozenset()  # interrupt_before gates (children only)


@dataclass
class Names:
    n: int = 0

    def new(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


@st.composite
def levels(draw: st.DrawFn, max_depth: int = 3) -> Level:
    """A root with 1-3 steps, at least one of them a subgraph; each step is one element or
    an element with a parallel sibling; an element is a node or (above ``max_depth``
    nesting levels) a subgraph built the same way. Nodes call ``interrupt`` 0-2 times;
    children get random ``interrupt_before`` gates."""
    names = Names()

    def pnode() -> PNode:
        return PNode(
            names.new("n"),
            draw(st.integers(0, 2)),
            draw(st.sampled_from([None, "x", "y"])),
            draw(st.integers(0, 3)),
        )

    def element(depth: int, force_sub: bool = False) -> PNode | PSub:
        if depth < max_depth and (force_sub or draw(st.booleans())):
            name = names.new("g")
            return PSub(name, level(depth + 1))
        return pnode()

    def level(depth: int) -> Level:
        n_steps = draw(st.integers(1, 3))
        forced = draw(st.integers(0, n_steps - 1)) if depth == 0 else -1
        steps = []
        for i in range(n_steps):
            first = element(depth, force_sub=i == forced)
            if draw(st.integers(0, 2)) == 0:
                steps.append((first, element(depth)))  # a parallel sibling
            else:
                steps.append((first,))
        gates: frozenset[str] = frozenset()
        if depth > 0:
            all_names = sorted(e.name for s in steps for e in s)
            gates = frozenset(draw(st.sets(st.sampled_from(all_names), max_size=2)))
        return Level(draw(st.sampled_from(["dict", "model"])), tuple(steps), gates)

    return level(0)


def paths(level: Level, prefix: str = "") -> tuple[list[str], list[str]]:
    """Dotted paths of (every plain node, every gated element) of a nesting."""
    nodes: list[str] = []
    gated: list[str] = []
    for s in level.steps:
        for e in s:
            path = f"{prefix}{e.name}"
            if e.name in level.before:
                gated.append(path)
            if isinstance(e, PNode):
                nodes.append(path)
            else:
                sub_nodes, sub_gated = paths(e.level, f"{path}.")
                nodes += sub_nodes
                gated += sub_gated
    return nodes, gated


def depth_of(level: Level) -> int:
    return max(
        (1 + depth_of(e.level) for s in level.steps for e in s if isinstance(e, PSub)),
        default=0,
    )


def make_fn(cfg: PNode, ask: Callable[[Any], Any], tracker: Tracker) -> Callable[..., Any]:
    def fn(state: Any, ctx: NodeContext) -> dict[str, Any]:
        s = as_dict(state)
        seen = crc((s["log"], s["x"], s["y"], s["total"]))
        tracker.add(ctx.task_id, ctx.node, "start", seen)
        answers = [ask({"node": ctx.node, "idx": i, "seen": seen}) for i in range(cfg.interrupts)]
        h = crc((ctx.node, seen, answers))
        update: dict[str, Any] = {
            "log": [f"{ctx.node}|{seen % 10007}|{','.join(answers)}"],
            "total": (h % 7) * cfg.mul,
        }
        if cfg.key is not None:
            update[cfg.key] = h % 1000
        tracker.add(ctx.task_id, ctx.node, "done", seen)
        return update

    return fn


def build_level(
    level: Level,
    ask: Callable[[Any], Any],
    tracker: Tracker,
    *,
    gates: bool,
    checkpointer: Checkpointer | None = None,
) -> CompiledGraph:
    b = StateGraph(DictState if level.schema == "dict" else ModelState)
    for s in level.steps:
        for e in s:
            if isinstance(e, PNode):
                b.add_node(e.name, make_fn(e, ask, tracker))
            else:
                b.add_node(e.name, build_level(e.level, ask, tracker, gates=gates))
    prev = [START]
    for s in level.steps:
        for p in prev:
            for e in s:
                b.add_edge(p, e.name)
        prev = [e.name for e in s]
    for p in prev:
        b.add_edge(p, END)
    before = sorted(level.before) if gates else []
    return b.compile(checkpointer=checkpointer, interrupt_before=before)


PROP_INPUT = {"log": ["start"], "x": 5, "y": 0}


def walk_pauses(snap: StateSnapshot | None, depth: int = 0) -> list[tuple[int, str, str]]:
    """(nesting depth, id, node) of the unanswered pauses each nested snapshot's tasks hold
    (a snapshot keeps answered ones too, with their answers)."""
    out: list[tuple[int, str, str]] = []
    if snap is None:
        return out
    for t in snap.tasks:
        if t.state is None:
            out += [(depth, p.id, p.node) for p in t.pauses if not p.answered]
        else:
            out += walk_pauses(t.state, depth + 1)
    return out


def check_nesting(
    level: Level,
    make_checkpointer: Callable[[], Checkpointer],
    *,
    gates_in_map: bool,
    fresh_each_call: bool = False,
) -> None:
    """The nesting paused and resumed until done ends like the uninterrupted run.

    Interrupts are answered with ``resume={pause_id: answer}``; gates are released by
    ``invoke(None)`` or, with ``gates_in_map``, answered in the same map. With
    ``fresh_each_call`` every call builds new graphs on a new checkpointer object (on the
    same file), as a new process would.
    """
    try:
        _check_nesting(level, make_checkpointer, gates_in_map, fresh_each_call)
    except BaseException:
        prepare_failure_report()
        raise


def _check_nesting(
    level: Level,
    make_checkpointer: Callable[[], Checkpointer],
    gates_in_map: bool,
    fresh_each_call: bool,
) -> None:
    # The uninterrupted run: interrupts answered at once, no gates, no checkpointer.
    ref_tracker = Tracker()
    ref = build_level(level, answer_for, ref_tracker, gates=False).invoke(PROP_INPUT)
    assert ref.status == "done"
    ref_starts = ref_tracker.starts()
    node_paths, gated_paths = paths(level)
    assert ref_starts == Counter(dict.fromkeys(node_paths, 1))

    tracker = Tracker()
    opened: list[Checkpointer] = []

    def fresh() -> CompiledGraph:
        if opened and isinstance(opened[-1], SqliteCheckpointer):
            anyio.run(opened[-1].close)
        opened.append(make_checkpointer())
        return build_level(level, interrupt, tracker, gates=True, checkpointer=opened[-1])

    try:
        graph = fresh()
        result = graph.invoke(PROP_INPUT, thread_id="p")
        seen_pauses: list[tuple[int, Any]] = []
        rounds = 0
        while result.status != "done":
            assert result.status == "paused" and result.pauses
            rounds += 1
            assert rounds <= 4 * len(node_paths) + len(gated_paths) + 1, result.pauses
            seen_pauses += [(tracker.call, p) for p in result.pauses]
            # Each pause is at its dotted path in the nested snapshots, and at the root.
            snap = graph.get_state("p", subgraphs=True)
            assert snap is not None
            want = {(p.node.count("."), p.id, p.node) for p in result.pauses}
            assert set(walk_pauses(snap)) == want
            assert {p.id for p in snap.pauses if not p.answered} == {p.id for p in result.pauses}
            tracker.call += 1
            answers = {p.id: answer_for(p.value) for p in result.pauses if p.kind == "interrupt"}
            if gates_in_map and answers:
                answers.update({p.id: None for p in result.pauses if p.kind != "interrupt"})
            if fresh_each_call:
                graph = fresh()
            if answers:
                result = graph.invoke(None, thread_id="p", resume=answers)
            else:
                result = graph.invoke(None, thread_id="p")
        final = graph.get_state("p")
    finally:
        if opened and isinstance(opened[-1], SqliteCheckpointer):
            anyio.run(opened[-1].close)

    assert as_dict(result.state) == as_dict(ref.state)
    assert final is not None and final.next == () and as_dict(final.values) == as_dict(ref.state)

    unique = {p.id: p for _, p in seen_pauses}
    interrupts = [p for p in unique.values() if p.kind == "interrupt"]
    asked = Counter(p.id for _, p in seen_pauses if p.kind == "interrupt")
    assert all(n == 1 for n in asked.values()), asked  # an answered interrupt is not asked again
    # Per node at every level: the reference's executions plus one per interrupt pause hit.
    hits = Counter(p.node for p in interrupts)
    assert tracker.starts() == ref_starts + hits
    # Each gated element (a node or a subgraph) pauses at its gate exactly once.
    gate_hits = Counter(p.node for p in unique.values() if p.kind == "before")
    assert gate_hits == Counter(gated_paths)
    # Per task: one start plus one per interrupt pause; one done, last; a rerun sees the
    # state it saw before; never started twice in one call.
    by_task: dict[str, list[tuple[int, str, str, str, int]]] = {}
    for ev in tracker.events:
        by_task.setdefault(ev[1], []).append(ev)
    task_pauses = Counter(p.id.rsplit(":", 1)[0] for p in interrupts)
    for task_id, evs in by_task.items():
        kinds = [ev[3] for ev in evs]
        assert kinds.count("start") == 1 + task_pauses[task_id], (task_id, evs)
        assert kinds.count("done") == 1 and kinds[-1] == "done", (task_id, evs)
        assert len({ev[4] for ev in evs}) == 1, ("rerun saw another state", task_id, evs)
        calls = [ev[0] for ev in evs if ev[3] == "start"]
        assert calls == sorted(set(calls)), ("ran twice in one call", task_id, evs)

    if currently_in_test_context():
        event(f"depth: {depth_of(level)}")
        event(f"pause kinds: {'+'.join(sorted({p.kind for p in unique.values()})) or 'none'}")
        event(f"parallel: {any(len(s) > 1 for s in level.steps)}")


SETTINGS: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


@settings(max_examples=40, **SETTINGS)
@given(level=levels(), gates_in_map=st.booleans())
def test_random_nestings_resume_to_the_uninterrupted_state_memory(
    level: Level, gates_in_map: bool
) -> None:
    check_nesting(level, MemoryCheckpointer, gates_in_map=gates_in_map)


@settings(max_examples=10, **SETTINGS)
@given(level=levels(), gates_in_map=st.booleans(), fresh_each_call=st.booleans())
def test_random_nestings_resume_to_the_uninterrupted_state_sqlite(
    level: Level,
    gates_in_map: bool,
    fresh_each_call: bool,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    path = str(tmp_path_factory.mktemp("nest") / "graphflow.db")
    check_nesting(
        level,
        lambda: SqliteCheckpointer(path),
        gates_in_map=gates_in_map,
        fresh_each_call=fresh_each_call,
    )


def test_a_nested_pause_names_the_threads_checkpoint(tmp_path: Path) -> None:
    """A pause inside a subgraph carries the root's checkpoint id, which get_state reads."""
    leaf = StateGraph(DictState)
    leaf.add_node("deep", lambda s: {"log": [str(interrupt("q"))]})
    leaf.add_edge(START, "deep").add_edge("deep", END)
    root = StateGraph(DictState).add_node("inner", leaf.compile())
    root.add_edge(START, "inner").add_edge("inner", END)
    graph = root.compile(checkpointer=SqliteCheckpointer(tmp_path / "n.db"))
    result = graph.invoke({"log": [], "x": 0, "y": 0, "total": 0}, thread_id="t")
    (pause,) = result.pauses
    assert pause.node == "inner.deep" and pause.checkpoint_id == result.checkpoint_id
    snapshot = graph.get_state("t", checkpoint_id=pause.checkpoint_id)
    assert snapshot is not None and snapshot.next == ("inner",)
    assert [p.id for p in snapshot.pauses] == [pause.id]


def test_a_send_to_a_subgraph_passes_child_only_keys() -> None:
    """``Send(node, arg)`` to a subgraph node: keys of ``arg`` that only the child has reach it."""

    class Child(TypedDict):
        item: str
        log: Annotated[list[str], append]

    child = StateGraph(Child).add_node("work", lambda s: {"log": [f"did {s['item']}"]})
    child.add_edge(START, "work").add_edge("work", END)
    parent = StateGraph(DictState).add_node("each", child.compile())
    parent.add_conditional_edges(START, lambda s: [Send("each", {"item": i}) for i in "ab"])
    parent.add_edge("each", END)
    graph = parent.compile(checkpointer=MemoryCheckpointer())
    result = graph.invoke({"log": [], "x": 0, "y": 0, "total": 0}, thread_id="t")
    assert result.state["log"] == ["did a", "did b"]


def test_debug_checkpoint_events_of_a_subgraph_name_its_node_and_namespace() -> None:
    class C(TypedDict):
        x: int

    leaf = StateGraph(C).add_node("i", lambda s: {"x": s["x"] + 1})
    inner = leaf.add_edge(START, "i").add_edge("i", END).compile()
    b = StateGraph(C).add_node("sub", inner).add_edge(START, "sub").add_edge("sub", END)
    graph = b.compile(checkpointer=MemoryCheckpointer())
    events = [e for e in graph.stream({"x": 0}, thread_id="t", mode="debug")]
    checkpoints = [(e.node, e.data["ns"]) for e in events if e.type == "checkpoint"]
    root = [ns for node, ns in checkpoints if node is None]
    own = [ns for node, ns in checkpoints if node == "sub"]
    assert root == ["", ""] and len(own) == 2 and own[0] == own[1]
    assert own[0].startswith("sub:")  # the subgraph task's namespace of the thread
