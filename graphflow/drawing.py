"""Mermaid drawing of a graph (from the same edge list validation walks).

The text is deterministic: nodes in the order they were added, edges sorted by name. A
conditional edge without a path map (it may lead anywhere) is one dotted edge to a ``?``
marker; a subgraph node is a Mermaid ``subgraph`` block holding the child's own drawing,
its ids prefixed with the block's so they stay unique.
"""

from __future__ import annotations

import re

from graphflow.spec import GraphSpec
from graphflow.types import END, START
from graphflow.validate import ANY_TARGET, edges_of

_ARROWS = {"edge": "-->", "join": "==>", "conditional": "-.->", "command": "-.->", "any": "-.->"}
_INDENT = "    "


class _Ids:
    """Mermaid ids, unique in one drawing: readable, with a suffix on a clash."""

    def __init__(self) -> None:
        self._ids: dict[tuple[str, ...], str] = {}
        self._used: set[str] = set()

    def get(self, key: tuple[str, ...], preferred: str) -> str:
        found = self._ids.get(key)
        if found is not None:
            return found
        candidate, n = preferred, 2
        while candidate in self._used:
            candidate, n = f"{preferred}_{n}", n + 1
        self._ids[key] = candidate
        self._used.add(candidate)
        return candidate


def _ident(name: str) -> str:
    if name == START:
        return "__start__"
    if name == END:
        return "__end__"
    return re.sub(r"[^0-9A-Za-z_]", "_", name)


def _label(name: str) -> str:
    return name.replace('"', "#quot;")


def draw_mermaid(spec: GraphSpec) -> str:
    """A ``flowchart TD`` of the graph: solid edges, thick joins, dotted conditional edges."""
    lines = ["flowchart TD"]
    _draw(spec, "", _Ids(), lines, _INDENT)
    return "\n".join(lines) + "\n"


def _draw(spec: GraphSpec, prefix: str, ids: _Ids, lines: list[str], indent: str) -> None:
    def ident(name: str) -> str:
        return ids.get((prefix, name), prefix + _ident(name))

    lines.append(f"{indent}{ident(START)}([START])")
    for name, node in spec.nodes.items():
        if node.subgraph is None:
            lines.append(f'{indent}{ident(name)}["{_label(name)}"]')
            continue
        block = ident(name)
        lines.append(f'{indent}subgraph {block}["{_label(name)}"]')
        _draw(node.subgraph, f"{block}_", ids, lines, indent + _INDENT)
        lines.append(f"{indent}end")
    lines.append(f"{indent}{ident(END)}([END])")
    seen: dict[tuple[str, str], str] = {}
    for src, dst, kind in edges_of(spec.nodes, spec.edges, expand=False):
        seen.setdefault((src, dst), kind)
    marker: dict[str, str] = {}
    for src, dst in sorted(seen):
        if dst == ANY_TARGET:
            marker[src] = ids.get((prefix, src, ANY_TARGET), f"{ident(src)}_any")
            lines.append(f'{indent}{marker[src]}(("?"))')
    for (src, dst), kind in sorted(seen.items()):
        target = marker[src] if dst == ANY_TARGET else ident(dst)
        lines.append(f"{indent}{ident(src)} {_ARROWS[kind]} {target}")
