"""Planning, a pure function of data: task ids and the next frontier after a step."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from checkpoints.models import TaskId, TaskSpec
from graphflow.builder import Branch, Edges
from graphflow.errors import InvalidRouteError
from graphflow.types import END, Send

HIDDEN_PREFIX = "__gf:"
"""Channels the engine keeps for itself (never part of the user's state)."""

JOIN_PREFIX = "__gf:join:"
"""Reserved channels holding a join's sources seen so far."""

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


def branches_of(edges: Edges, node: str) -> list[Branch]:
    """Conditional edges leaving a node."""
    return edges.branches.get(node, [])


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
