"""The readable text the commands print without ``--json`` (not a contract: use ``--json``
for scripts). Values are shown as compact JSON by ``graphflow.cli.encode``."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Sequence
from typing import Any

from graphflow.cli.common import printable, suggest
from graphflow.cli.encode import encode, request_fields, rfc3339

WIDTH = 160
"""Where a value shown in a summary line is cut (full values: ``--json``)."""

_REQUEST_FIRST = ("tool_name", "function_call_id", "args", "fingerprint", "agent")
_LABELS = {"tool_name": "tool", "function_call_id": "call id"}


def compact(value: Any, width: int | None = None) -> str:
    """``value`` as one line of JSON, cut at ``width`` characters when given (what JSON
    leaves as is of the control characters, C1 and bidi overrides, escaped)."""
    text = printable(json.dumps(encode(value), ensure_ascii=False, allow_nan=False))
    if width is not None and len(text) > width:
        return text[: width - 1] + "…"
    return text


CELL_MAX = 120
"""The longest cell of a table, in characters (the whole value is in ``--json``)."""


def cell(text: str) -> str:
    """``text`` as one table cell: control characters escaped (``\\n``: text from a model
    or an approver must not print as rows of its own), cut to ``CELL_MAX`` characters."""
    text = printable(text)
    return text if len(text) <= CELL_MAX else text[: CELL_MAX - 1] + "…"


def width(text: str) -> int:
    """How many terminal columns ``text`` takes: a wide (East Asian) character two, a
    combining mark or a zero-width character none, any other one."""
    if text.isascii():
        return len(text)
    import unicodedata

    cols = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        cols += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return cols


def _pad(text: str, cols: int) -> str:
    return text + " " * (cols - width(text))


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Left-aligned columns under ``headers``, each cell a ``cell``, aligned by the columns
    a terminal gives each character (``width``)."""
    body = [[cell(c) for c in r] for r in rows]
    widths = [max(width(h), *(width(r[i]) for r in body)) for i, h in enumerate(headers)]
    lines = ["  ".join(_pad(h, w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for r in body:
        lines.append("  ".join(_pad(c, w) for c, w in zip(r, widths, strict=True)).rstrip())
    return lines


def when(value: Any) -> str:
    """A datetime (or stored timestamp) as RFC 3339 UTC, or ``-``."""
    return rfc3339(value) if value is not None else "-"


def pause(p: Any, *, hints: bool = True) -> list[str]:
    """A pause in full: its ids and, for a tool confirmation, every field of the request;
    with ``hints``, the command that answers it."""
    lines = [
        f"pause {p.id}  {p.kind}  node {p.node}  thread {p.thread_id}  "
        f"checkpoint {p.checkpoint_id}  created {when(p.created_at)}"
    ]
    request = getattr(p, "request", None)
    if request is not None:
        fields = request_fields(request)
        names = [n for n in _REQUEST_FIRST if n in fields]
        names += [n for n in fields if n not in _REQUEST_FIRST]
        width = max(len(_LABELS.get(n, n)) for n in names)
        for name in names:
            value = fields[name]
            shown = value if isinstance(value, str) else compact(value)
            lines.append(f"  {_LABELS.get(name, name).ljust(width)}  {shown}")
    else:
        lines.append(f"  value  {compact(p.value)}")
    if p.answered:
        by = f" by {p.answered_by}" if p.answered_by else ""
        reason = f" ({printable(p.answer_reason)})" if p.answer_reason else ""
        lines.append(f"  answered{by} at {when(p.answered_at)}: {compact(p.answer)}{reason}")
    elif hints:
        lines.append(f"  answer with: {answer_hint(p)}")
    return lines


def answer_hint(p: Any) -> str:
    """The command line that answers pause ``p``."""
    thread = shlex.quote(p.thread_id)
    request = getattr(p, "request", None)
    if request is not None:
        call = shlex.quote(request.function_call_id)
        approve = suggest(f"graphflow approve {thread} {call}")
        return f"{approve}  |  {suggest(f'graphflow deny {thread} {call} --reason TEXT')}"
    if p.kind in ("before", "after"):
        return suggest(f"graphflow resume {thread} --graph MODULE:ATTR")
    return suggest(f"graphflow answer {thread} {shlex.quote(p.id)} VALUE_JSON")


def snapshot(s: Any, *, indent: str = "") -> list[str]:
    """A ``StateSnapshot``: its checkpoint, values, next nodes, tasks and pauses."""
    source = s.metadata.get("source", "?")
    lines = [
        f"{indent}checkpoint {s.checkpoint_id}  step {s.step}  source {source}  "
        f"created {when(s.created_at)}",
        f"{indent}parent     {s.parent_checkpoint_id or '-'}",
    ]
    values = encode(s.values)
    if isinstance(values, dict) and values:
        lines.append(f"{indent}values:")
        width = max(len(k) for k in values)
        lines += [f"{indent}  {k.ljust(width)}  {compact(v, WIDTH)}" for k, v in values.items()]
    else:
        lines.append(f"{indent}values: {compact(values, WIDTH)}")
    lines.append(f"{indent}next: {', '.join(s.next) if s.next else '(nothing: the run ended)'}")
    if s.tasks:
        lines.append(f"{indent}tasks:")
    for t in s.tasks:
        extra = f"  error {printable(t.error)}" if t.error else ""
        if t.result is not None:
            extra += f"  result {compact(t.result, WIDTH)}"
        lines.append(f"{indent}  {t.name}  {t.status}  attempts {t.attempts}  id {t.id}{extra}")
        if t.state is not None:
            lines += snapshot(t.state, indent=indent + "    ")
    if s.pauses:
        lines.append(f"{indent}pauses:")
        for p in s.pauses:
            lines += [f"{indent}  {line}" for line in pause(p, hints=False)]
    meta = {k: v for k, v in s.metadata.items() if k != "source"}
    if meta:
        lines.append(f"{indent}metadata: {compact(meta, WIDTH)}")
    return lines


def event(e: Any) -> str | None:
    """One line for a stream event (None for the last ones, which ``run`` sums up)."""
    step = f"[step {e.step}] " if e.step is not None else ""
    data = e.data
    if e.type == "updates":
        parts = [f"{node} -> {compact(update, WIDTH)}" for node, update in data.items()]
        return step + "; ".join(parts)
    if e.type == "task_start":
        return f"{step}{e.node} started (attempt {data.get('attempt')})"
    if e.type == "task_end":
        if data.get("status") == "paused":
            return None  # (its pause events follow, each a line saying what it asks)
        return f"{step}{e.node} {data.get('status')}"
    if e.type == "checkpoint":
        nxt = ", ".join(data.get("next") or []) or "nothing"
        return f"{step}checkpoint {data.get('checkpoint_id')} (next: {nxt})"
    if e.type == "custom":
        return f"{step}{e.node} emitted {data.get('name')}: {compact(data.get('data'), WIDTH)}"
    if e.type == "values":
        return f"{step}state {compact(data, WIDTH)}"
    if e.type == "pause":
        request = getattr(data, "request", None)
        what = (
            f"{request.tool_name} {compact(request_fields(request)['args'], WIDTH)} "
            f"(call {request.function_call_id})"
            if request is not None
            else compact(data.value, WIDTH)
        )
        return f"{step}{e.node} paused ({data.kind}): {what}"
    return None
