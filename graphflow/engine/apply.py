"""Applying a step's writes through reducers, and the checkpoint that follows: pure.

It also decides how each changed channel is stored: list channels that only grew are stored
as ``append`` rows holding the new items (promise 9). Every ``CHUNK_EVERY``-th append closes
its chain instead (a ``chunk`` write): the store keeps the chain's items and the new ones in
one row, linked to the chain's start, and the next appends chain from it. So a long list
is read from a chunk per ``CHUNK_EVERY`` items plus the appends since the last one, and
nothing stored is ever rewritten whole (the file grows with what was appended, not with its
square, which rewriting the list every so many appends cost: the scale benchmark's
10,000-step chat loop).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from checkpoints.models import ChannelWrite, CheckpointId, CheckpointRecord
from graphflow.engine import plan
from graphflow.errors import InvalidUpdateError
from graphflow.state import StateSchema
from graphflow.types import Send

CHUNK_EVERY = 128
"""Appends per chunk: a chunk write stores this many steps' items at most (a step's cost
stays bounded), and a value is read from one chunk row per this many appends."""


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
                elif (
                    not ch.append_only
                    and type(cur) in (list, dict)  # (a subclass's copy may not be one)
                    and cur is values.get(key)
                ):
                    # A reducer of the user's may change the value it is given in place
                    # (``a.extend(b); return a``): it gets a copy, so that the state before
                    # the step, which the writes are computed against, stays as it was.
                    cur = cast(Any, cur).copy()
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
            out.writes.append(_grow(key, version, delta, base, count))
            out.bases[key] = (base, count + 1) if count + 1 < CHUNK_EVERY else (version, 0)
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


def _grow(key: str, version: int, delta: list[Any], base: int, count: int) -> ChannelWrite:
    """The write of items appended to the chain from ``base`` (``count`` appends so far): an
    append, or every ``CHUNK_EVERY``-th one, the chunk that closes the chain."""
    if count + 1 < CHUNK_EVERY:
        return ChannelWrite(key, version, "append", delta, base)
    return ChannelWrite(key, version, "chunk", delta, base, count)


def set_write(key: str, version: int, value: Any) -> ChannelWrite:
    """A whole-value write of a channel."""
    return ChannelWrite(key, version, "set", value)


def _grew(old: list[Any], new: list[Any]) -> bool:
    """True when ``new`` starts with exactly the items of ``old`` (by identity)."""
    if len(new) < len(old):
        return False
    return all(a is b for a, b in zip(old, new, strict=False))


@dataclass(slots=True)
class NextCheckpoint:
    """The checkpoint a finished step commits, its writes, and the engine channels the run
    goes on with."""

    record: CheckpointRecord
    writes: list[ChannelWrite]
    hidden: dict[str, Any]


def user_values(applied: Applied) -> dict[str, Any]:
    """The state of ``applied`` without the engine's own channels."""
    return {k: v for k, v in applied.values.items() if not plan.is_hidden(k)}


def next_checkpoint(
    ck: CheckpointRecord,
    ck_id: CheckpointId,
    applied: Applied,
    hidden: Mapping[str, Any],
    task_writes: Sequence[tuple[str, Sequence[tuple[str, Any]]]],
    targets: Sequence[str | Send],
    joins: Sequence[tuple[tuple[str, ...], str]],
    collect: Mapping[str, str],
    version: int,
) -> NextCheckpoint:
    """The checkpoint after ``ck``'s step: ``applied`` (``apply_writes`` of ``task_writes``,
    in node-name order) and the step's ``targets`` (where its tasks routed), plus the join
    barriers the step advanced and, for a subgraph's run (``collect`` maps its keys to the
    parent's), what the step wrote to its parent's keys."""
    out_hidden = dict(hidden)
    writes, versions, bases = applied.writes, applied.versions, applied.bases
    targets = list(targets)
    if joins:
        fired, changed = plan.advance_joins(joins, out_hidden, [n for n, _ in task_writes])
        targets += fired
        for k, v in changed.items():
            out_hidden[k] = v
            writes.append(set_write(k, version, v))
            versions[k] = version
    if collect:  # a subgraph run keeps what it wrote to its parent's keys
        out = [[collect[k], v] for _, ws in task_writes for k, v in ws if k in collect]
        if out:
            collect_out(out_hidden, out, version, versions, bases, writes)
    frontier = plan.make_frontier(ck_id, ck.ns, targets)
    record = ck.child(
        ck_id, "loop", channel_versions=versions, channel_bases=bases, frontier=frontier
    )
    return NextCheckpoint(record, writes, out_hidden)


def collect_out(
    hidden: dict[str, Any],
    out: list[list[Any]],
    version: int,
    versions: dict[str, int],
    bases: dict[str, tuple[int, int]],
    writes: list[ChannelWrite],
) -> None:
    """Append writes to a parent's keys to a subgraph run's hidden output channel, stored as
    an append chain like a list channel (its size grows with what each step wrote)."""
    key = plan.OUT_KEY
    hidden[key] = [*hidden.get(key, []), *out]
    chain = bases.get(key) or ((versions[key], 0) if key in versions else None)
    if chain is not None:
        writes.append(_grow(key, version, out, *chain))
        bases[key] = (chain[0], chain[1] + 1) if chain[1] + 1 < CHUNK_EVERY else (version, 0)
    else:
        writes.append(set_write(key, version, hidden[key]))
        bases.pop(key, None)
    versions[key] = version
