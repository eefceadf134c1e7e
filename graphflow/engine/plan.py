"""Planning, pure functions of data (STYLE.md 4): task ids, what a step runs, where it goes.

``plan_step`` decides, for a checkpoint's frontier, which tasks are reused (their completed
records), which stay held at a gate, and which run; ``make_frontier`` turns a step's targets
into the next checkpoint's tasks, in a deterministic order (named nodes sorted, then
``Send``s in order); ``advance_joins`` keeps the barriers of joins. Nothing here does I/O or
calls user code.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checkpoints.models import PauseRecord, TaskId, TaskRecord, TaskSpec
from graphflow import state
from graphflow.engine.pauses import PauseRequest, make_pause_id
from graphflow.errors import InvalidRouteError
from graphflow.spec import Branch, Edges
from graphflow.types import END, Send

HIDDEN_PREFIX = state.HIDDEN_PREFIX
"""Channels the engine keeps for itself (never part of the user's state)."""

JOIN_PREFIX = "__gf:join:"
"""Reserved channels holding a join's sources seen so far."""

PRINCIPAL_KEY = "__gf:principal"
"""The principal a thread's run was started for (bound to the thread across resumes)."""

OUT_KEY = "__gf:out"
"""A subgraph run's writes to its parent's keys, accumulated over its steps."""


def is_hidden(key: str) -> bool:
    """Whether a channel is the engine's own."""
    return key.startswith(HIDDEN_PREFIX)


def task_id(checkpoint_id: str, ns: str, node: str, trigger: int) -> TaskId:
    """A deterministic task id from (checkpoint, namespace, node, trigger index)."""
    h = hashlib.blake2b(f"{checkpoint_id}|{ns}|{node}|{trigger}".encode(), digest_size=8)
    return TaskId(h.hexdigest())


def make_frontier(
    checkpoint_id: str, ns: str, targets: Iterable[str | Send]
) -> tuple[TaskSpec, ...]:
    """Tasks for a checkpoint: named nodes once each (sorted), then each ``Send`` in order."""
    names = sorted({t for t in targets if isinstance(t, str) and t != END})
    sends = [t for t in targets if isinstance(t, Send)]
    out = [TaskSpec(task_id(checkpoint_id, ns, n, 0), n) for n in names]
    for i, s in enumerate(sends, start=1):
        out.append(TaskSpec(task_id(checkpoint_id, ns, s.node, i), s.node, True, s.arg))
    return tuple(out)


def normalize_targets(
    value: Any, known: Mapping[str, Any], where: str, path_map: Mapping[Any, str] | None = None
) -> list[str | Send]:
    """Turn a router result or ``Command.goto`` into a list of node names and ``Send``s."""
    items: Sequence[Any]
    if value is None:
        items = []
    elif isinstance(value, str | Send) or not isinstance(value, list | tuple | set | frozenset):
        items = [value]
    else:
        items = list(value)
    out: list[str | Send] = []
    for item in items:
        if isinstance(item, Send):
            if item.node not in known:
                raise InvalidRouteError(f"{where} sent to unknown node {item.node!r}")
            out.append(item)
            continue
        target = item
        if path_map is not None:
            if item not in path_map:
                raise InvalidRouteError(
                    f"{where} returned {item!r}, which is not in its path map {list(path_map)}"
                )
            target = path_map[item]
        if target != END and target not in known:
            raise InvalidRouteError(f"{where} routed to unknown node {target!r}")
        out.append(target)
    return out


def static_targets(edges: Edges, node: str) -> list[str | Send]:
    """Targets of a node's plain edges."""
    return list(edges.static.get(node, ()))


def branches_of(edges: Edges, node: str) -> Sequence[Branch]:
    """Conditional edges leaving a node."""
    return edges.branches.get(node, ())


def advance_joins(
    joins: Sequence[tuple[tuple[str, ...], str]],
    seen: Mapping[str, list[str]],
    finished: Iterable[str],
) -> tuple[list[str], dict[str, list[str]]]:
    """Record finished sources on every join; return fired targets and changed join channels."""
    done = set(finished)
    fired: list[str] = []
    changed: dict[str, list[str]] = {}
    for i, (sources, target) in enumerate(joins):
        key = f"{JOIN_PREFIX}{i}"
        before = list(seen.get(key) or [])
        now = sorted(set(before) | (done & set(sources)))
        if set(now) >= set(sources):
            fired.append(target)
            now = []
        if now != before:
            changed[key] = now
    return fired, changed


def child_namespace(parent_ns: str, node: str, task_id: str) -> str:
    """The namespace of a subgraph task's run: ``<parent ns>|<node>:<task id>``."""
    return f"{parent_ns}|{node}:{task_id}" if parent_ns else f"{node}:{task_id}"


def in_namespace(ns: str, inner: str) -> bool:
    """Whether namespace ``ns`` is ``inner`` or nested below it."""
    return ns == inner or ns.startswith(inner + "|")


@dataclass(slots=True)
class StepPlan:
    """What a step does with each task of its checkpoint's frontier."""

    reused: list[tuple[TaskSpec, TaskRecord]] = field(default_factory=list)
    """Tasks whose completion was committed: their writes are reused, they do not run."""
    held: list[tuple[TaskSpec, list[PauseRecord]]] = field(default_factory=list)
    """Subgraph tasks held by unanswered gates inside them."""
    gates: list[tuple[TaskSpec, PauseRequest]] = field(default_factory=list)
    """``interrupt_before`` gates not yet answered: the whole step is held."""
    to_run: list[TaskSpec] = field(default_factory=list)


def plan_step(
    ns: str,
    frontier: Sequence[TaskSpec],
    records: Mapping[TaskId, TaskRecord],
    answers: Collection[str],
    before: Collection[str],
    child_gates: Sequence[PauseRecord] = (),
) -> StepPlan:
    """Plan a step of namespace ``ns``: reuse completed tasks, hold tasks whose subgraph
    waits at an unanswered gate (``child_gates``), and gate the step on any unanswered
    ``interrupt_before`` of its tasks (``answers`` holds answered pause ids)."""
    out = StepPlan()
    for spec in frontier:
        rec = records.get(spec.id)
        if rec is not None and rec.status == "completed" and rec.writes is not None:
            out.reused.append((spec, rec))
            continue
        if child_gates:
            inner = child_namespace(ns, spec.node, spec.id)
            mine = [p for p in child_gates if in_namespace(p.ns, inner)]
            if mine:
                out.held.append((spec, mine))
                continue
        if spec.node in before and make_pause_id(spec.id, "before") not in answers:
            out.gates.append((spec, PauseRequest("before", "before", {"node": spec.node})))
        out.to_run.append(spec)
    return out


def gated_after(
    after: Collection[str], done: Iterable[TaskSpec], answers: Collection[str]
) -> list[TaskSpec]:
    """The finished tasks whose ``interrupt_after`` gate pauses at the next checkpoint (a
    gate already answered at this one, stored by an older version, does not)."""
    return [
        spec
        for spec in done
        if spec.node in after and make_pause_id(spec.id, "after") not in answers
    ]
