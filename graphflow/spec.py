"""``GraphSpec``: the frozen description of a compiled graph, which is what the engine runs.

``StateGraph.compile()`` validates the builder's nodes and edges and freezes them here, with
everything the engine asks about a graph computed once: its gates, its lease TTL and which
nodes may pause. A subgraph node holds its child's ``GraphSpec``. Nothing here runs a node;
the engine never sees the builder.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from graphflow.retry import RetryPolicy
from graphflow.state import StateSchema

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Branch:
    """A conditional edge: ``router(state)`` picks targets, optionally through ``path_map``."""

    source: str
    router: Callable[..., Any]
    path_map: Mapping[Hashable, str] | None
    targets: tuple[str, ...] | None
    """Every possible target when known from the path map; None: any node."""
    is_async: bool = False


@dataclass(frozen=True, slots=True)
class Edges:
    """All edges of a graph: plain edges, joins (wait for all sources) and branches."""

    static: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    joins: tuple[tuple[tuple[str, ...], str], ...] = ()
    branches: Mapping[str, tuple[Branch, ...]] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A node: its callable and how to call it, or the subgraph it runs."""

    name: str
    fn: Any
    """The callable, ``fn(state)`` or ``fn(state, ctx)``; None for a subgraph node."""
    takes_ctx: bool
    is_async: bool
    destinations: tuple[str, ...] | None = None
    retry: tuple[RetryPolicy, ...] = ()
    subgraph: GraphSpec | None = None
    """The child graph a subgraph node runs in its own namespace of the thread."""
    inputs: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """For a subgraph node: child key -> parent key it reads."""
    outputs: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """For a subgraph node: child key -> parent key its writes go to."""


@dataclass(frozen=True, slots=True)
class GraphSpec:
    """A validated graph, frozen: what the engine runs and the state API reads."""

    schema: StateSchema
    nodes: Mapping[str, NodeSpec]
    edges: Edges
    interrupt_before: frozenset[str] = frozenset()
    interrupt_after: frozenset[str] = frozenset()
    name: str | None = None
    lease_ttl: float = 30.0
    defer_retry: float = 30.0
    """Seconds after which a thread paused on a deferred call is due for re-evaluation."""
    pausing: tuple[str, ...] = ()
    """Nodes that may pause (gates, ``interrupt`` calls, confirmations, pausing subgraphs)."""

    @property
    def can_pause(self) -> bool:
        """Whether a run of this graph may pause (and so needs a checkpointer to resume)."""
        return bool(self.pausing)


def may_pause(fn: Any) -> bool:
    """Whether a node callable may pause: its code refers to ``interrupt`` (the function or
    ``ctx.interrupt``), or it runs an agent whose tools may need confirmation."""
    agent = getattr(fn, "agent", None)
    if agent is not None and getattr(agent, "may_need_confirmation", False):
        return True
    target = getattr(fn, "__call__", fn) if not hasattr(fn, "__code__") else fn  # noqa: B004
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    return code is not None and _mentions(code, "interrupt")


def _mentions(code: Any, name: str) -> bool:
    if name in code.co_names:
        return True
    return any(_mentions(c, name) for c in code.co_consts if hasattr(c, "co_names"))


def pausing_nodes(
    nodes: Mapping[str, NodeSpec], before: frozenset[str], after: frozenset[str]
) -> tuple[str, ...]:
    """The nodes that may pause, sorted (see ``GraphSpec.pausing``)."""
    gates = before | after
    return tuple(
        sorted(
            name
            for name, node in nodes.items()
            if name in gates
            or (node.subgraph.can_pause if node.subgraph is not None else may_pause(node.fn))
        )
    )
