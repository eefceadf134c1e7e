"""Mermaid drawing of a graph (from the same edge list validation walks)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from graphflow.types import END, START
from graphflow.validate import edges_of

if TYPE_CHECKING:
    from graphflow.builder import StateGraph

_ARROWS = {"edge": "-->", "join": "==>", "conditional": "-.->", "command": "-.->"}


def _ident(name: str) -> str:
    if name == START:
        return "__start__"
    if name == END:
        return "__end__"
    return re.sub(r"[^0-9A-Za-z_]", "_", name)


def draw_mermaid(builder: StateGraph) -> str:
    """A ``flowchart TD`` of the graph: solid edges, thick joins, dotted conditional edges."""
    lines = ["flowchart TD"]
    lines.append(f"    {_ident(START)}([START])")
    for name in builder.nodes:
        lines.append(f'    {_ident(name)}["{name}"]')
    lines.append(f"    {_ident(END)}([END])")
    seen: dict[tuple[str, str], str] = {}
    for src, dst, kind in edges_of(builder):
        seen.setdefault((src, dst), kind)
    for (src, dst), kind in sorted(seen.items()):
        lines.append(f"    {_ident(src)} {_ARROWS[kind]} {_ident(dst)}")
    return "\n".join(lines) + "\n"
