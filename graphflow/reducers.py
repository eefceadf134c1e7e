"""Built-in reducers for ``Annotated[T, reducer]`` state keys.

A reducer is ``fn(current, update) -> new``. The built-in ones return a new value; a
reducer of the user's that changes a list or dict ``current`` in place (``a.extend(b);
return a``) is given a copy of it, so that the state before the step, which the step's
writes are computed against, stays as it was (the engine keeps it until they are
committed). Other mutable values a reducer should not change in place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def append(current: list[T] | None, update: Iterable[T] | T) -> list[T]:
    """Append items: a list (or tuple) update is added item by item, anything else as one item."""
    base = list(current) if current is not None else []
    if isinstance(update, list | tuple):
        return base + list(update)
    return [*base, update]  # type: ignore[list-item]


def merge(current: Mapping[str, Any] | None, update: Mapping[str, Any]) -> dict[str, Any]:
    """Shallow-merge mappings: keys of ``update`` replace those of ``current``."""
    out = dict(current) if current is not None else {}
    out.update(update)
    return out


def add_messages(current: list[Any] | None, update: Any) -> list[Any]:
    """Merge chat messages: a message whose id is already present replaces it; others
    append; dicts such as ``{"role": "user", "content": "hi"}`` become ``Message``s. The
    same reducer as ``graphflow.messages.add_messages``, whatever else is imported."""
    # Imported when first used: the message models are pydantic classes, which a process
    # whose graph has no chat transcript should not pay to build (benchmark W4's import).
    from graphflow.messages import add_messages as merge

    return merge(current, update)


APPEND_ONLY: frozenset[Callable[..., Any]] = frozenset({append})
"""Reducers whose result is always ``current`` followed by new items (stored as deltas)."""

__all__ = ["APPEND_ONLY", "add_messages", "append", "merge"]
