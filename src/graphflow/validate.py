"""Graph validation with networkx: every structural error is found at ``compile()``."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import networkx as nx

from graphflow.errors import GraphValidationError
from graphflow.types import END, START

if TYPE_CHECKING:
    from graphflow.builder import StateGraph


def to_networkx(builder: StateGraph) -> nx.DiGraph:
    """The graph as a networkx DiGraph over node names plus START and END.

    A conditional edge without a known set of targets leads to every node and END.
    """
    g = nx.DiGraph()
    g.add_nodes_from([START, *builder.nodes, END])
    for src, targets in builder.edges.static.items():
        for t in targets:
            g.add_edge(src, t, kind="edge")
    for sources, t in builder.edges.joins:
        for s in sources:
            g.add_edge(s, t, kind="join")
    for src, branches in builder.edges.branches.items():
        for br in branches:
            possible = br.targets if br.targets is not None else (*builder.nodes, END)
            for t in possible:
                g.add_edge(src, t, kind="conditional")
    for name, spec in builder.nodes.items():
        for t in spec.destinations or ():
            g.add_edge(name, t, kind="command")
    return g


def validate(
    builder: StateGraph,
    interrupt_before: Collection[str],
    interrupt_after: Collection[str],
    checkpointer: Any,
) -> None:
    """Raise ``GraphValidationError`` naming the offending nodes, or return."""
    problems: list[tuple[str, tuple[str, ...]]] = list(builder._errors)
    known = set(builder.nodes)

    def check_ref(name: str, what: str, *, allow_start: bool, allow_end: bool) -> None:
        ok = name in known or (allow_start and name == START) or (allow_end and name == END)
        if not ok:
            problems.append((f"{what} refers to unknown node {name!r}", (name,)))

    for src, targets in builder.edges.static.items():
        check_ref(src, f"edge {src!r} -> {targets}", allow_start=True, allow_end=False)
        for t in targets:
            check_ref(t, f"edge {src!r} -> {t!r}", allow_start=False, allow_end=True)
    for sources, t in builder.edges.joins:
        for s in sources:
            check_ref(s, f"join {list(sources)} -> {t!r}", allow_start=True, allow_end=False)
        check_ref(t, f"join {list(sources)} -> {t!r}", allow_start=False, allow_end=True)
    for src, branches in builder.edges.branches.items():
        check_ref(src, f"conditional edge from {src!r}", allow_start=True, allow_end=False)
        for br in branches:
            for t in br.targets or ():
                if t not in known and t != END:
                    problems.append(
                        (
                            f"path map of conditional edge from {src!r} names unknown node {t!r}",
                            (src, t),
                        )
                    )
    for name, spec in builder.nodes.items():
        for t in spec.destinations or ():
            check_ref(t, f"destinations of node {name!r}", allow_start=False, allow_end=True)
    for name in (*interrupt_before, *interrupt_after):
        if name not in known:
            problems.append((f"interrupt_before/after names unknown node {name!r}", (name,)))
    if problems:
        _raise(problems)

    if START not in builder.edges.static and START not in builder.edges.branches:
        _raise([("no edge from START: add builder.add_edge(START, 'first_node')", (START,))])

    g = to_networkx(builder)
    outgoing = {n for n in known if g.out_degree(n) > 0}
    dead = sorted(known - outgoing)
    if dead:
        problems.append(
            (
                f"dead end: nodes {dead} have no outgoing edge, conditional edge or declared "
                "destinations (add an edge to END)",
                tuple(dead),
            )
        )
    reachable = nx.descendants(g, START)
    unreachable = sorted(known - reachable)
    if unreachable:
        problems.append((f"nodes {unreachable} are unreachable from START", tuple(unreachable)))
    can_end = nx.ancestors(g, END)
    stuck = sorted((known & reachable) - can_end - set(dead))
    if stuck:
        problems.append((f"END cannot be reached from nodes {stuck}", tuple(stuck)))
    if problems:
        _raise(problems)


def check_resumable(builder: StateGraph) -> None:
    """Raise ``GraphValidationError`` when a graph run without a checkpointer nests subgraphs
    whose nodes can pause (nothing could resume them).

    Checked when such a graph is run as the root: at ``compile`` a graph without a
    checkpointer may still become a subgraph of one that has it.
    """
    from graphflow.subgraph import SubgraphNode, can_pause

    pausing = sorted(
        name
        for name, spec in builder.nodes.items()
        if isinstance(spec.fn, SubgraphNode) and can_pause(spec.fn.graph)
    )
    if pausing:
        raise GraphValidationError(
            f"subgraph nodes {pausing} can pause, so the graph that runs them needs a "
            "checkpointer (compile(checkpointer=...)) to resume them",
            pausing,
        )


def _raise(problems: list[tuple[str, tuple[str, ...]]]) -> None:
    nodes = tuple(dict.fromkeys(n for _, ns in problems for n in ns))
    raise GraphValidationError("; ".join(m for m, _ in problems), nodes)
