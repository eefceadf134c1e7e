"""``engine.plan``: pure planning, tested on data (no store, no node runs)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from checkpoints.models import CheckpointId, PauseId, PauseRecord, TaskId, TaskRecord, TaskSpec
from graphflow import END, Send
from graphflow.engine import plan
from graphflow.errors import InvalidRouteError


def spec(node: str, i: int = 0, arg: Any = None, has_arg: bool = False) -> TaskSpec:
    return TaskSpec(plan.task_id("ck", "", node, i), node, has_arg, arg)


def test_task_ids_are_deterministic_and_distinct() -> None:
    assert plan.task_id("ck", "", "a", 0) == plan.task_id("ck", "", "a", 0)
    ids = {
        plan.task_id(c, ns, n, i)
        for c in ("ck", "ck2")
        for ns in ("", "x")
        for n in "ab"
        for i in (0, 1)
    }
    assert len(ids) == 16 and all(len(i) == 16 for i in ids)


def test_a_frontier_has_named_nodes_once_sorted_then_sends_in_order() -> None:
    frontier = plan.make_frontier("ck", "", ["b", Send("w", 1), "a", "b", END, Send("w", 2)])
    assert [(t.node, t.has_arg, t.arg) for t in frontier] == [
        ("a", False, None),
        ("b", False, None),
        ("w", True, 1),
        ("w", True, 2),
    ]
    assert len({t.id for t in frontier}) == 4


NODES = MappingProxyType({"a": None, "b": None})


@pytest.mark.parametrize(
    ("value", "path_map", "expected"),
    [
        ("a", None, ["a"]),
        (["a", "b"], None, ["a", "b"]),
        (END, None, [END]),
        (None, None, []),
        ("yes", {"yes": "b", "no": END}, ["b"]),
        (Send("a", 3), None, [Send("a", 3)]),
    ],
)
def test_router_results_become_targets(value: Any, path_map: Any, expected: list[Any]) -> None:
    assert plan.normalize_targets(value, NODES, "router", path_map) == expected


@pytest.mark.parametrize(
    ("value", "path_map"), [("zzz", None), (Send("zzz"), None), ("maybe", {"yes": "a"})]
)
def test_a_route_to_nowhere_names_it(value: Any, path_map: Any) -> None:
    with pytest.raises(InvalidRouteError, match="router"):
        plan.normalize_targets(value, NODES, "router", path_map)


def test_a_join_fires_once_every_source_finished_and_resets() -> None:
    joins = (((("a", "b")), "j"),)
    fired, changed = plan.advance_joins(joins, {}, ["a"])
    assert fired == [] and changed == {f"{plan.JOIN_PREFIX}0": ["a"]}
    fired, changed = plan.advance_joins(joins, changed, ["b"])
    assert fired == ["j"] and changed == {f"{plan.JOIN_PREFIX}0": []}


def record(t: TaskSpec, status: str, writes: Any = None) -> TaskRecord:
    return TaskRecord(CheckpointId("ck"), t.id, t.node, status, writes=writes)  # type: ignore[arg-type]


def test_plan_step_reuses_completed_tasks_and_runs_the_rest() -> None:
    a, b, c = spec("a"), spec("b"), spec("c")
    records = {a.id: record(a, "completed", [("x", 1)]), b.id: record(b, "failed")}
    out = plan.plan_step("", [a, b, c], records, set(), set())
    assert [s.node for s, _ in out.reused] == ["a"]
    assert [s.node for s in out.to_run] == ["b", "c"] and not out.gates and not out.held


def test_plan_step_gates_the_step_before_an_unanswered_interrupt_before() -> None:
    a, b = spec("a"), spec("b")
    out = plan.plan_step("", [a, b], {}, set(), {"b"})
    assert [(s.node, r.kind) for s, r in out.gates] == [("b", "before")]
    answered = {f"{b.id}:before"}
    assert plan.plan_step("", [a, b], {}, answered, {"b"}).gates == []


def test_plan_step_holds_a_subgraph_task_at_its_childs_gate() -> None:
    sub, other = spec("sub"), spec("other")
    inner = plan.child_namespace("", "sub", sub.id)
    gate = PauseRecord(
        PauseId("x:after"),
        "t",
        f"{inner}|deeper:1",
        CheckpointId("ck"),
        TaskId("x"),
        "n",
        "after",
        {},  # type: ignore[arg-type]
    )
    out = plan.plan_step("", [sub, other], {}, set(), set(), [gate])
    assert [(s.node, [p.id for p in ps]) for s, ps in out.held] == [("sub", ["x:after"])]
    assert [s.node for s in out.to_run] == ["other"]


def test_namespaces_nest() -> None:
    inner = plan.child_namespace("", "review", "abc")
    deeper = plan.child_namespace(inner, "check", "def")
    assert (inner, deeper) == ("review:abc", "review:abc|check:def")
    assert plan.in_namespace(deeper, inner) and plan.in_namespace(inner, inner)
    assert not plan.in_namespace("review:abcd", inner)


def test_gated_after_skips_gates_already_answered() -> None:
    a, b = spec("a"), spec("b")
    assert plan.gated_after({"a", "b"}, [a, b], {f"{a.id}:after"}) == [b]
    assert plan.gated_after(set(), [a, b], set()) == []
