"""Chunks of a list channel, as both stores keep them.

A list channel is stored as a chain: a start row (``set``: the whole value) followed by
``append`` rows holding the items each step added. Every so many appends the engine closes
the chain with a ``chunk`` write (``ChannelWriteKind``): the store then keeps one ``chunk``
row holding ``[start, items]``, where ``start`` is the version of the closed chain's start
row and ``items`` the closed chain's appended items followed by the write's own, and later
appends chain from the chunk row. A value is read back from its chain's start: a ``set``
row's value, or a chunk's ``items`` after the value of the row it links to (a ``set`` or
an older chunk), and then the chain's appends. Nothing is rewritten: a chunk copies only
what its own chain appended, and every row stays readable by the checkpoints that use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from checkpoints.errors import CorruptCheckpointError


def chunk_value(start: int, appended: Iterable[list[Any]], items: list[Any]) -> list[Any]:
    """The stored value of a chunk closing the chain from ``start`` (``appended``: the items
    of its appends in order; ``items``: the chunk write's own)."""
    out: list[Any] = []
    for part in appended:
        out.extend(part)
    out.extend(items)
    return [start, out]


def _damaged(thread_id: str, channel: str, version: int, detail: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"thread {thread_id!r}: stored value of channel {channel!r} at version {version} is "
        f"damaged ({detail}); restore the store from a backup",
        thread_id=thread_id,
    )


def check_chain(thread_id: str, channel: str, version: int, found: int, count: int) -> None:
    """A chunk write closes a chain of ``count`` appends: finding another number is damage
    (a chunk is never built from a chain with rows missing or added)."""
    if found != count:
        raise _damaged(thread_id, channel, version, f"{found} appends where {count} were made")


def start_value(
    thread_id: str,
    channel: str,
    version: int,
    kind: str,
    value: Any,
    row_at: Callable[[int], tuple[str, Any]],
) -> list[Any]:
    """The value of a chain's start row (``kind``, decoded ``value``, at ``version``): a
    ``set`` row's list, or a chunk's items after the value of the rows it links back to
    (``row_at(v)``: the kind and decoded value of the start row at ``v``)."""
    parts: list[list[Any]] = []
    while kind == "chunk":
        if not (
            type(value) is list and len(value) == 2 and type(value[0]) is int
            and type(value[1]) is list and value[0] < version
        ):  # fmt: skip
            raise _damaged(thread_id, channel, version, "a chunk that is not [start, items]")
        parts.append(value[1])
        version = value[0]
        kind, value = row_at(version)
    if kind != "set" or type(value) is not list:
        raise _damaged(thread_id, channel, version, "a list chain's start is not a list")
    for items in reversed(parts):
        value.extend(items)
    return value
