"""Applying a step's writes through reducers, a pure function of data.

It also decides how each changed channel is stored: list channels that only grew are stored
as ``append`` rows holding the new items (promise 9), with a full ``set`` every
``COMPACT_EVERY`` appends so that rebuilding a value stays cheap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from checkpoints.models import ChannelWrite
from graphflow.errors import InvalidUpdateError
from graphflow.state import StateSchema

COMPACT_EVERY = 512


@dataclass(slots=True)
class Applied:
    """The outcome of applying writes: new values and versions, and what to store."""

    values: dict[str, Any]
    versions: dict[str, int]
    bases: dict[str, tuple[int, int]]
    writes: list[ChannelWrite] = field(default_factory=list)
    updated: set[str] = field(default_factory=set)


def apply_writes(
    schema: StateSchema,
    values: Mapping[str, Any],
    versions: Mapping[str, int],
    bases: Mapping[str, tuple[int, int]],
    task_writes: Iterable[tuple[str, Iterable[tuple[str, Any]]]],
    version: int,
    *,
    extra: Mapping[str, Any] | None = None,
    force_set: bool = False,
) -> Applied:
    """Apply ``(node, [(key, value), ...])`` in the given order through the reducers.

    ``extra`` holds engine channels (join barriers) written as whole values. ``version`` is
    the version every changed channel gets.
    """
    new_values = dict(values)
    changed: set[str] = set()
    for node, writes in task_writes:
        for key, value in writes:
            ch = schema.channels.get(key)
            if ch is None:
                raise InvalidUpdateError(
                    f"node {node!r} wrote unknown state key {key!r}", node=node, key=key
                )
            if ch.reducer is None:
                new_values[key] = value
            else:
                cur = new_values.get(key)
                if cur is None and key not in new_values and ch.default is not None:
                    cur = ch.default()
                try:
                    new_values[key] = ch.reducer(cur, value)
                except Exception as e:
                    raise InvalidUpdateError(
                        f"reducer of key {key!r} failed on the update of node {node!r}: "
                        f"{type(e).__name__}: {e}",
                        node=node,
                        key=key,
                    ) from e
            changed.add(key)
    out = Applied(new_values, dict(versions), dict(bases))
    for key in sorted(changed):
        ch = schema.channels[key]
        old = values.get(key) if key in values else None
        new = new_values[key]
        delta = None
        chain = bases.get(key)
        if (
            isinstance(new, list)
            and isinstance(old, list)
            and key in versions
            and not force_set
            and (ch.append_only or _grew(old, new))
        ):
            delta = new[len(old) :]
        if delta is not None:
            base, count = chain if chain is not None else (versions[key], 0)
            if count + 1 < COMPACT_EVERY:
                out.writes.append(ChannelWrite(key, version, "append", delta, base))
                out.bases[key] = (base, count + 1)
                out.versions[key] = version
                out.updated.add(key)
                continue
        out.writes.append(ChannelWrite(key, version, "set", new))
        out.bases.pop(key, None)
        out.versions[key] = version
        out.updated.add(key)
    for key, value in (extra or {}).items():
        out.values[key] = value
        out.writes.append(ChannelWrite(key, version, "set", value))
        out.bases.pop(key, None)
        out.versions[key] = version
    return out


def set_write(key: str, version: int, value: Any) -> ChannelWrite:
    """A whole-value write of a channel."""
    return ChannelWrite(key, version, "set", value)


def _grew(old: list[Any], new: list[Any]) -> bool:
    """True when ``new`` starts with exactly the items of ``old`` (by identity)."""
    if len(new) < len(old):
        return False
    return all(a is b for a, b in zip(old, new, strict=False))
