"""Graph validation: every structural error is found at ``compile()``.

The checks are walks over the edge list in plain Python; ``to_networkx`` gives the same graph
as a networkx ``DiGraph`` for drawing and analysis, imported only when asked for, so that a
process resuming a thread does not pay for importing networkx.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from graphflow.errors import GraphValidationError
from graphflow.spec import Edges, GraphSpec, NodeSpec
from graphflow.types import END, START

ANY_TARGET = ""
"""The target of a conditional edge without a path map in ``edges_of(expand=False)`` (the
empty name is not a node's)."""


def edges_of(
    nodes: Mapping[str, NodeSpec], edges: Edges, *, expand: bool = True
) -> list[tuple[str, str, str]]:
    """Every edge as (source, target, kind) over node names plus START and END.

    A conditional edge without a known set of targets leads to every node and END; with
    ``expand=False`` it is one edge of kind ``"any"`` to ``ANY_TARGET`` instead (drawing).
    """
    out: list[tuple[str, str, str]] = []
    for src, targets in edges.static.items():
        out += [(src, t, "edge") for t in targets]
    for sources, t in edges.joins:
        out += [(s, t, "join") for s in sources]
    for src, branches in edges.branches.items():
        for br in branches:
            if br.targets is None and not expand:
                out.append((src, ANY_TARGET, "any"))
                continue
            possible = br.targets if br.targets is not None else (*nodes, END)
            out += [(src, t, "conditional") for t in possible]
    for name, spec in nodes.items():
        out += [(name, t, "command") for t in spec.destinations or ()]
    return out


def to_networkx(graph: Any) -> Any:
    """The graph (a ``GraphSpec``, or a compiled graph) as a ``networkx.DiGraph`` (for
    drawing and analysis).

    networkx is imported here, not at ``compile``: every process that resumes a thread
    compiles its graph, and importing networkx would be most of its start-up (benchmark W4).
    """
    import networkx as nx

    spec: GraphSpec = graph if isinstance(graph, GraphSpec) else graph.spec
    g = nx.DiGraph()
    g.add_nodes_from([START, *spec.nodes, END])
    for src, dst, kind in edges_of(spec.nodes, spec.edges):
        g.add_edge(src, dst, kind=kind)
    return g


def _reach(adjacency: Mapping[str, set[str]], start: str) -> set[str]:
    """Nodes reachable from ``start`` (excluded), by a graph walk."""
    seen: set[str] = set()
    stack = list(adjacency.get(start, ()))
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(adjacency.get(n, ()))
    return seen


def validate(
    nodes: Mapping[str, NodeSpec],
    edges: Edges,
    interrupt_before: Collection[str],
    interrupt_after: Collection[str],
    errors: Iterable[tuple[str, tuple[str, ...]]] = (),
    rejected: Collection[str] = (),
) -> None:
    """Raise ``GraphValidationError`` naming the offending nodes, or return.

    ``errors`` are problems the builder found as nodes were added; ``rejected`` the names it
    refused (reported once, by the builder: edges naming them are not errors again).
    """
    problems: list[tuple[str, tuple[str, ...]]] = list(errors)
    known = set(nodes)

    def check_ref(name: str, what: str, *, allow_start: bool, allow_end: bool) -> None:
        if name in known or name in rejected:
            return
        if name == START and not allow_start:
            problems.append((f"{what}: START cannot be the target of an edge", (name,)))
        elif name == END and not allow_end:
            problems.append(
                (f"{what}: END cannot be the source of an edge (a run stops at END)", (name,))
            )
        elif name not in (START, END):
            problems.append((f"{what} refers to unknown node {name!r}", (name,)))

    for src, targets in edges.static.items():
        for t in targets:
            what = f"edge {_show(src)} -> {_show(t)}"
            check_ref(src, what, allow_start=True, allow_end=False)
            check_ref(t, what, allow_start=False, allow_end=True)
    for sources, t in edges.joins:
        what = f"join [{', '.join(map(_show, sources))}] -> {_show(t)}"
        if not sources:
            why = "waits for no node: give add_edge a node or a list of the nodes to wait for"
            problems.append((f"{what} {why}", (t,)))
        if START in sources:
            why = "waits for START, which is no node that finishes: join nodes only"
            problems.append((f"{what} {why}", (START, t)))
        for s in sources:
            check_ref(s, what, allow_start=True, allow_end=False)
        check_ref(t, what, allow_start=False, allow_end=True)
    for src, branches in edges.branches.items():
        what = f"conditional edge from {_show(src)}"
        check_ref(src, what, allow_start=True, allow_end=False)
        for br in branches:
            for t in br.targets or ():
                if t in known or t in rejected or t == END:
                    continue
                if t == START:
                    problems.append(
                        (f"path map of {what} names START, which cannot be a target", (src, t))
                    )
                else:
                    problems.append((f"path map of {what} names unknown node {t!r}", (src, t)))
    for name, spec in nodes.items():
        for t in spec.destinations or ():
            check_ref(t, f"destinations of node {name!r}", allow_start=False, allow_end=True)
    for name in (*interrupt_before, *interrupt_after):
        if name not in known and name not in rejected:
            problems.append((f"interrupt_before/after names unknown node {name!r}", (name,)))
    if problems:
        _raise(problems)

    if START not in edges.static and START not in edges.branches:
        _raise([("no edge from START: add builder.add_edge(START, 'first_node')", (START,))])

    forward: dict[str, set[str]] = {}
    backward: dict[str, set[str]] = {}
    for src, dst, _ in edges_of(nodes, edges):
        forward.setdefault(src, set()).add(dst)
        backward.setdefault(dst, set()).add(src)
    outgoing = {n for n in known if forward.get(n)}
    dead = sorted(known - outgoing)
    if dead:
        problems.append(
            (
                f"dead end: nodes {dead} have no outgoing edge, conditional edge or declared "
                "destinations (add an edge to END)",
                tuple(dead),
            )
        )
    reachable = _reach(forward, START)
    unreachable = sorted(known - reachable)
    if unreachable:
        problems.append((f"nodes {unreachable} are unreachable from START", tuple(unreachable)))
    can_end = _reach(backward, END)
    stuck = sorted((known & reachable) - can_end - set(dead))
    if stuck:
        problems.append((f"END cannot be reached from nodes {stuck}", tuple(stuck)))
    if problems:
        _raise(problems)


def check_resumable(spec: GraphSpec) -> None:
    """Raise ``GraphValidationError`` when a graph run without a checkpointer has nodes that
    can pause (``interrupt()``, ``interrupt_before``/``interrupt_after``, tool
    confirmations, subgraphs whose nodes can pause): nothing could resume them.

    Checked when such a graph is run as the root: at ``compile`` a graph without a
    checkpointer may still become a subgraph of one that has it.
    """
    if spec.pausing:
        raise GraphValidationError(
            f"nodes {list(spec.pausing)} can pause (interrupt(), interrupt_before/"
            "interrupt_after, a tool confirmation or a pausing subgraph), so the graph that "
            "runs them needs a checkpointer (compile(checkpointer=...)) to resume them",
            spec.pausing,
        )


def _show(name: str) -> str:
    """A node name as users wrote it: START and END by their constant names."""
    return "START" if name == START else "END" if name == END else repr(name)


def _raise(problems: list[tuple[str, tuple[str, ...]]]) -> None:
    nodes = tuple(dict.fromkeys(n for _, ns in problems for n in ns))
    raise GraphValidationError("; ".join(m for m, _ in problems), nodes)
