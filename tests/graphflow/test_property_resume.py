"""Property: pause and resume change nothing (DESIGN.md promise 7).

A run paused and resumed anywhere, with the same answers, ends in the same state as the
uninterrupted run. Graphs are generated: chains, fan-out/joins, fan-outs without a join,
bounded loops (a conditional edge back to an earlier node) and ``Send`` fan-out, over a
TypedDict or pydantic state with an ``append`` log, last-write-wins ints and an
``operator.add`` int. Pause points are generated too: nodes that call ``interrupt`` once
or twice, and random ``interrupt_before`` / ``interrupt_after`` sets.

The reference run is the same graph whose ``interrupt`` calls return the known answer at
once, compiled without gates and without a checkpointer. Answers are a pure function of the
pause value, so the paused run gets the same answers the reference used.
"""

from __future__ import annotations

import itertools
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from hypothesis import HealthCheck, currently_in_test_context, event, example, given, settings
from hypothesis import strategies as st

from checkpoints import MemoryCheckpointer
from graphflow import END, START, Send, StateGraph, interrupt

try:  # another engineer is finishing it: skip that variant when it is not usable yet
    from checkpoints import SqliteCheckpointer

    def _sqlite_usable() -> str | None:
        with tempfile.TemporaryDirectory() as d:
            cp = SqliteCheckpointer(str(Path(d) / "probe.db"))
            try:
                anyio.run(cp.setup)
            finally:
                anyio.run(cp.close)
        return None

    SQLITE_PROBLEM = _sqlite_usable()
except Exception as e:  # pragma: no cover - depends on the state of the backend
    SQLITE_PROBLEM = f"SqliteCheckpointer not usable: {type(e).__name__}: {e}"

needs_sqlite = pytest.mark.skipif(SQLITE_PROBLEM is not None, reason=str(SQLITE_PROBLEM))


# -- state ------------------------------------------------------------------------------------


# -- graph specs ------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeCfg:
    name: str
    worker: bool  # a Send target: called with the Send argument instead of the state
    interrupts: int  # interrupt() calls per execution
    key: str | None  # last-write-wins key it writes, if any
    mul: int  # weight of its operator.add write


@dataclass
class GraphSpec:
    schema: str  # "dict" or "model"
    nodes: dict[str, NodeCfg] = field(default_factory=dict)
    # ("edge", src, dst) | ("join", (srcs...), dst) | ("loop", check, entry, exit, bound)
    # | ("send", dispatcher, worker, fan)
    edges: list[tuple[Any, ...]] = field(default_factory=list)
    before: frozenset[str] = frozenset()
    after: frozenset[str] = frozenset()
    x0: int = 0


@st.composite
def graph_specs(draw: st.DrawFn, *, max_interrupts: int = 2, max_blocks: int = 3) -> GraphSpec:
    """A valid graph: every node is reachable from START and can reach END.

    The graph is a series of blocks; each block is built knowing the node (or END) its exit
    leads to, so validity holds by construction. Blocks: a chain; a fan-out whose branches
    meet in a join (``add_edge([...], join)``, branches of unequal length allowed); a fan-out
    of single nodes without a join; a ``Send`` fan-out to a worker; and (at the top level
    only) a loop whose body is one or two blocks followed by a check node with a conditional
    edge back to the body entry, bounded by how often the check node ran.

    The graph has 1 to ``max_blocks`` top-level blocks. Each node calls ``interrupt`` 0 to
    ``max_interrupts`` times; any node may have an
    ``interrupt_before`` and/or an ``interrupt_after`` gate.
    """
    spec = GraphSpec(schema=draw(st.sampled_from(["dict", "model"])))
    spec.x0 = draw(st.integers(0, 50))

    def node(worker: bool = False) -> str:
        name = f"{'w' if worker else 'n'}{len(spec.nodes)}"
        spec.nodes[name] = NodeCfg(
            name,
            worker,
            draw(st.integers(0, max_interrupts)),
            None if worker else draw(st.sampled_from([None, "x", "y"])),
            draw(st.integers(0, 3)),
        )
        return name

    def chain(n: int, target: str) -> str:
        names = [node() for _ in range(n)]
        for a, b in zip(names, [*names[1:], target], strict=True):
            spec.edges.append(("edge", a, b))
        return names[0]

    def block(target: str, top: bool) -> str:
        kinds = ["chain", "join", "fan", "send"] + (["loop"] if top else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "chain":
            return chain(draw(st.integers(1, 3)), target)
        if kind == "join":
            join = node()
            spec.edges.append(("edge", join, target))
            lasts, firsts = [], []
            for _ in range(draw(st.integers(2, 3))):
                branch = [node() for _ in range(draw(st.integers(1, 2)))]
                for a, b in itertools.pairwise(branch):
                    spec.edges.append(("edge", a, b))
                firsts.append(branch[0])
                lasts.append(branch[-1])
            head = node()
            spec.edges += [("edge", head, f) for f in firsts]
            spec.edges.append(("join", tuple(lasts), join))
            return head
        if kind == "fan":  # single-node branches all lead to target: it runs once
            branches = [node() for _ in range(draw(st.integers(2, 3)))]
            spec.edges += [("edge", b, target) for b in branches]
            head = node()
            spec.edges += [("edge", head, b) for b in branches]
            return head
        if kind == "send":
            worker = node(worker=True)
            spec.edges.append(("edge", worker, target))
            dispatcher = node()
            spec.edges.append(("send", dispatcher, worker, draw(st.integers(1, 3))))
            return dispatcher
        # loop
        check = node()
        entry = check
        for _ in range(draw(st.integers(1, 2))):
            entry = block(entry, top=False)
        spec.edges.append(("loop", check, entry, target, draw(st.integers(1, 3))))
        return entry

    target = END
    for _ in range(draw(st.integers(1, max_blocks))):
        target = block(target, top=True)
    spec.edges.append(("edge", START, target))

    names = sorted(spec.nodes)
    spec.before = frozenset(draw(st.sets(st.sampled_from(names))))
    spec.after = frozenset(draw(st.sets(st.sampled_from(names))))
    return spec


# -- running ----------------------------------------------------------------------------------


def make_fn(cfg: NodeCfg, ask: Callable[[Any], Any], tracker: Tracker) -> Callable[..., Any]:
    def fn(state: Any, ctx: Any) -> dict[str, Any]:
        if cfg.worker:
            seen = crc(sorted(state.items()))
        else:
            s = as_dict(state)
            seen = crc((s["log"], s["x"], s["y"], s["total"]))
        tracker.add(ctx.task_id, cfg.name, "start", seen)
        answers = [ask({"node": cfg.name, "idx": i, "seen": seen}) for i in range(cfg.interrupts)]
        h = crc((cfg.name, seen, answers))
        update: dict[str, Any] = {
            "log": [f"{cfg.name}|{seen % 10007}|{','.join(answers)}"],
            "total": (h % 7) * cfg.mul,
        }
        if cfg.key is not None:
            update[cfg.key] = h % 1000
        tracker.add(ctx.task_id, cfg.name, "done", seen)
        return update

    return fn


def _runs_of(check: str) -> Callable[[Any], int]:
    prefix = f"{check}|"
    return lambda state: sum(1 for e in as_dict(state)["log"] if e.startswith(prefix))


def build(spec: GraphSpec, ask: Callable[[Any], Any], tracker: Tracker) -> StateGraph:
    builder = StateGraph(DictState if spec.schema == "dict" else ModelState)
    for cfg in spec.nodes.values():
        builder.add_node(cfg.name, make_fn(cfg, ask, tracker))
    for e in spec.edges:
        if e[0] == "edge":
            builder.add_edge(e[1], e[2])
        elif e[0] == "join":
            builder.add_edge(list(e[1]), e[2])
        elif e[0] == "loop":
            _, check, entry, exit_, bound = e
            runs = _runs_of(check)

            def route(state: Any, runs: Any = runs, bound: int = bound) -> str:
                return "again" if runs(state) < bound else "exit"

            builder.add_conditional_edges(check, route, {"again": entry, "exit": exit_})
        else:
            _, dispatcher, worker, fan = e

            def sends(state: Any, worker: str = worker, fan: int = fan) -> list[Send]:
                s = as_dict(state)
                n = 1 + (s["x"] + len(s["log"])) % fan
                return [Send(worker, {"i": i, "base": crc(s["log"]) % 101}) for i in range(n)]

            builder.add_conditional_edges(dispatcher, sends, [worker])
    return builder


def start_input(spec: GraphSpec) -> dict[str, Any]:
    return {"x": spec.x0, "y": 0}


def reference(spec: GraphSpec) -> tuple[dict[str, Any], Counter[str]]:
    """The uninterrupted run: every interrupt answered at once, no gates, no checkpointer."""
    tracker = Tracker()
    graph = build(spec, answer_for, tracker).compile()
    result = graph.invoke(start_input(spec))
    assert result.status == "done"
    return as_dict(result.state), tracker.starts()


@dataclass
class PausedRun:
    final: dict[str, Any]
    snapshot: Any
    tracker: Tracker
    pauses: list[tuple[int, Any]]  # (invoke call, pause) for every pause returned, in order
    last_step: tuple[str, ...] = ()  # the nodes of the step that ended the run


def paused_run(
    spec: GraphSpec,
    make_checkpointer: Callable[[], Any],
    *,
    gates_in_resume_map: bool,
    fresh_graph_each_call: bool = False,
    max_rounds: int = 100,
) -> PausedRun:
    """Run with interrupts and gates; answer every pending pause until the thread is done.

    Interrupt pauses get ``resume={pause_id: answer}``; gates are released by
    ``invoke(None)`` (or, with ``gates_in_resume_map``, answered in the same map). With
    ``fresh_graph_each_call`` every call uses a new compiled graph and a new checkpointer
    object (on the same file), as a new process would.
    """
    tracker = Tracker()
    builder = build(spec, interrupt, tracker)
    tid = "prop-thread"
    opened: list[Any] = []

    def graph() -> Any:
        if opened and not fresh_graph_each_call:
            return opened[-1][1]
        if opened:
            anyio.run(opened[-1][0].close)
        cp = make_checkpointer()
        b = build(spec, interrupt, tracker) if fresh_graph_each_call else builder
        g = b.compile(checkpointer=cp, interrupt_before=spec.before, interrupt_after=spec.after)
        opened.append((cp, g))
        return g

    seen_pauses: list[tuple[int, Any]] = []
    try:
        result = graph().invoke(start_input(spec), thread_id=tid)
        rounds = 0
        while result.status != "done":
            assert result.status == "paused" and result.pauses
            seen_pauses += [(tracker.call, p) for p in result.pauses]
            rounds += 1
            assert rounds <= max_rounds, (
                f"not done after {max_rounds} resumes; last pauses: "
                f"{[(p.id, p.kind, p.node) for p in result.pauses]}"
            )
            tracker.call += 1
            answers = {p.id: answer_for(p.value) for p in result.pauses if p.kind == "interrupt"}
            if gates_in_resume_map and answers:
                answers.update({p.id: None for p in result.pauses if p.kind != "interrupt"})
            g = graph()
            if answers:
                result = g.invoke(None, thread_id=tid, resume=answers)
            else:
                result = g.invoke(None, thread_id=tid)
        snapshot = graph().get_state(tid)
        history = graph().get_state_history(tid, limit=2)
    finally:
        for cp, _ in opened[-1:]:
            anyio.run(cp.close)
    last = history[1].next if len(history) > 1 else ()
    return PausedRun(as_dict(result.state), snapshot, tracker, seen_pauses, last)


def run_and_check(
    spec: GraphSpec,
    make_checkpointer: Callable[[], Any],
    *,
    gates_in_map: bool,
    fresh_graph_each_call: bool = False,
) -> None:
    """The paused run ends like the reference and runs each node as often as it should."""
    try:
        _run_and_check(spec, make_checkpointer, gates_in_map, fresh_graph_each_call)
    except BaseException:
        prepare_failure_report()
        raise


def _run_and_check(
    spec: GraphSpec,
    make_checkpointer: Callable[[], Any],
    gates_in_map: bool,
    fresh_graph_each_call: bool,
) -> None:
    ref_state, ref_starts = reference(spec)
    # Each task pauses at most once per interrupt call and once per gate.
    per_task = max(cfg.interrupts for cfg in spec.nodes.values()) + 2
    run = paused_run(
        spec,
        make_checkpointer,
        gates_in_resume_map=gates_in_map,
        fresh_graph_each_call=fresh_graph_each_call,
        max_rounds=per_task * sum(ref_starts.values()) + 1,
    )

    # Same final state, and get_state agrees with the result.
    assert run.final == ref_state
    assert run.snapshot is not None
    assert as_dict(run.snapshot.values) == run.final
    assert run.snapshot.next == ()

    unique = {p.id: p for _, p in run.pauses}
    interrupts = [p for p in unique.values() if p.kind == "interrupt"]
    # An answered interrupt is never asked again.
    asked = Counter(p.id for _, p in run.pauses if p.kind == "interrupt")
    assert all(n == 1 for n in asked.values()), asked

    # Per node: the reference's executions plus one per interrupt pause the node hit.
    hits = Counter(p.node for p in interrupts)
    starts = run.tracker.starts()
    for name in spec.nodes:
        assert starts[name] == ref_starts[name] + hits[name], (name, starts, ref_starts, hits)

    # Gates: each task of a gated node pauses exactly once at its gate; a gate after the step
    # that ends the run has nothing left to hold and does not pause.
    ends = Counter(run.last_step)
    for kind, gated in (("before", spec.before), ("after", spec.after)):
        gate_hits = Counter(p.node for p in unique.values() if p.kind == kind)
        expected = {n: ref_starts[n] - (ends[n] if kind == "after" else 0) for n in gated}
        assert gate_hits == Counter({n: k for n, k in expected.items() if k}), kind

    # Per task: it runs once plus once per interrupt pause; once it completed it never runs
    # again (completed siblings of a paused node are reused); a rerun sees the same state.
    by_task: dict[str, list[tuple[int, str, str, str, int]]] = {}
    for ev in run.tracker.events:
        by_task.setdefault(ev[1], []).append(ev)
    task_pauses = Counter(p.id.rsplit(":", 1)[0] for p in interrupts)
    for task_id, evs in by_task.items():
        kinds = [ev[3] for ev in evs]
        assert kinds.count("start") == 1 + task_pauses[task_id], (task_id, evs)
        assert kinds.count("done") == 1 and kinds[-1] == "done", (task_id, evs)
        assert len({ev[4] for ev in evs}) == 1, ("rerun saw another state", task_id, evs)
        start_calls = [ev[0] for ev in evs if ev[3] == "start"]
        assert start_calls == sorted(set(start_calls)), ("ran twice in one call", task_id, evs)
    assert set(task_pauses) <= set(by_task)

    # A task behind an interrupt_before gate starts only after the last call that returned
    # its gate.
    last_gate_call: dict[str, int] = {}
    for call, p in run.pauses:
        if p.kind == "before":
            last_gate_call[p.id.rsplit(":", 1)[0]] = call
    for task_id, call in last_gate_call.items():
        assert all(ev[0] > call for ev in by_task[task_id]), (task_id, by_task[task_id])

    if currently_in_test_context():
        _record_events(spec, run)


def _record_events(spec: GraphSpec, run: PausedRun) -> None:
    """What the examples covered (see ``pytest --hypothesis-show-statistics``)."""
    unique = {p.id: p for _, p in run.pauses}
    kinds_hit = sorted({p.kind for p in unique.values()})
    event(f"pause kinds: {'+'.join(kinds_hit) or 'none'}")
    event(f"blocks: {'+'.join(sorted({e[0] for e in spec.edges}))}")
    rounds = max((c for c, _ in run.pauses), default=0)
    event(f"resumes: {min(rounds, 10)}{'+' if rounds >= 10 else ''}")


# -- the properties ---------------------------------------------------------------------------
SETTINGS = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}

all_graphs = graph_specs()
# SQLite commits are fsync'd: smaller graphs keep those variants fast.
small_graphs = graph_specs(max_blocks=2)


def _spec(nodes: dict[str, int], edges: list[tuple[Any, ...]], **gates: Any) -> GraphSpec:
    return GraphSpec(
        "dict",
        {n: NodeCfg(n, False, k, None, 1) for n, k in nodes.items()},
        edges,
        frozenset(gates.get("before", ())),
        frozenset(gates.get("after", ())),
    )


# Minimal reproductions of a bug the properties found (and shrank to these): a resume loaded
# only the answers of the pauses pending at that moment while the step re-checks every pause
# point of its tasks, so answers given by an earlier resume of the same step were lost and
# asked again forever. Fixed in Run._load_answers; kept as regression examples.
REPRO_TWO_INTERRUPTS = _spec({"a": 2}, [("edge", START, "a"), ("edge", "a", END)])
REPRO_BEFORE_THEN_INTERRUPT = _spec(
    {"a": 1}, [("edge", START, "a"), ("edge", "a", END)], before={"a"}
)
REPRO_SIBLING_GATES = _spec(
    {"h": 0, "a": 0, "b": 0},
    [
        ("edge", START, "h"),
        ("edge", "h", "a"),
        ("edge", "h", "b"),
        ("edge", "a", END),
        ("edge", "b", END),
    ],
    before={"a"},
    after={"a", "b"},
)


@pytest.mark.parametrize(
    "spec",
    [REPRO_TWO_INTERRUPTS, REPRO_BEFORE_THEN_INTERRUPT, REPRO_SIBLING_GATES],
    ids=["two-interrupts-in-a-node", "before-gate-then-interrupt", "sibling-gates"],
)
@pytest.mark.parametrize("gates_in_map", [False, True])
def test_answers_of_earlier_resumes_of_a_step_are_kept(spec: GraphSpec, gates_in_map: bool) -> None:
    run_and_check(spec, MemoryCheckpointer, gates_in_map=gates_in_map)


@settings(max_examples=60, **SETTINGS)
@example(spec=REPRO_SIBLING_GATES, gates_in_map=False)
@example(spec=REPRO_TWO_INTERRUPTS, gates_in_map=False)
@given(spec=all_graphs, gates_in_map=st.booleans())
def test_pause_resume_matches_uninterrupted_run_memory(spec: GraphSpec, gates_in_map: bool) -> None:
    run_and_check(spec, MemoryCheckpointer, gates_in_map=gates_in_map)


@needs_sqlite
@settings(max_examples=15, **SETTINGS)
@example(spec=REPRO_SIBLING_GATES, gates_in_map=False)
@example(spec=REPRO_TWO_INTERRUPTS, gates_in_map=False)
@given(spec=small_graphs, gates_in_map=st.booleans())
def test_pause_resume_matches_uninterrupted_run_sqlite(
    spec: GraphSpec, gates_in_map: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = str(tmp_path_factory.mktemp("prop") / "graphflow.db")
    run_and_check(spec, lambda: SqliteCheckpointer(path), gates_in_map=gates_in_map)


@needs_sqlite
@settings(max_examples=15, **SETTINGS)
@example(spec=REPRO_SIBLING_GATES, gates_in_map=False)
@example(spec=REPRO_TWO_INTERRUPTS, gates_in_map=False)
@given(spec=small_graphs, gates_in_map=st.booleans())
def test_resume_in_fresh_graph_and_checkpointer_sqlite(
    spec: GraphSpec, gates_in_map: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = str(tmp_path_factory.mktemp("prop") / "graphflow.db")
    run_and_check(
        spec,
        lambda: SqliteCheckpointer(path),
        gates_in_map=gates_in_map,
        fresh_graph_each_call=True,
    )
