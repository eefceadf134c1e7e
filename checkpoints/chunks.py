"""Chunks of a list channel, as both stores keep them.

A list channel is stored as a chain: a start row (``set``: the whole value) followed by
``append`` rows holding the items each step added. Every so many appends the engine closes
the chain with a ``chunk`` write (``ChannelWriteKind``): the store then keeps one ``chunk``
row holding ``[start, items, lengths]``, where ``start`` is the version of the closed chain's
start row, ``items`` the closed chain's appended items followed by the write's own, and
``lengths`` how many items each of those writes added (files of schema 6 and before hold
chunks without it); later appends chain from the chunk row. A value is read back from its
chain's start: a ``set`` row's value, or a chunk's ``items`` after the value of the row it
links to (a ``set`` or an older chunk), and then the chain's appends.

Nothing is rewritten. The SQLite store also folds a closed chain into its chunk: it deletes
the chain's append rows in the chunk's transaction (each item is then stored once, a file no
larger than its messages' own store: ``benchmarks/chat_history.py``) and keeps a ``closed``
row in the chain pointing at the chunk, from which a checkpoint inside the chain reads its
value (``folded_items``: the first ``lengths`` of the chunk's items).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from checkpoints.errors import CorruptCheckpointError


def chunk_value(start: int, appended: Iterable[list[Any]], items: list[Any]) -> list[Any]:
    """The stored value of a chunk closing the chain from ``start`` (``appended``: the items
    of its appends in order; ``items``: the chunk write's own)."""
    out: list[Any] = []
    lengths: list[int] = []
    for part in appended:
        out.extend(part)
        lengths.append(len(part))
    out.extend(items)
    lengths.append(len(items))
    return [start, out, lengths]


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


def is_chunk(value: Any, version: int) -> bool:
    """Whether ``value`` is a chunk's stored value at ``version``: ``[start, items]`` or
    ``[start, items, lengths]``, its lengths counting its items."""
    if not (
        type(value) is list and len(value) in (2, 3) and type(value[0]) is int
        and type(value[1]) is list and value[0] < version
    ):  # fmt: skip
        return False
    if len(value) == 2:
        return True
    lengths = value[2]
    return (
        type(lengths) is list and len(lengths) > 0
        and all(type(n) is int and n >= 0 for n in lengths) and sum(lengths) == len(value[1])
    )  # fmt: skip


def folded_items(
    thread_id: str, channel: str, chunk: Any, version: int, start: int, count: int
) -> list[Any]:
    """The items the first ``count`` appends of the chain from ``start`` added, read from
    the chunk (decoded, at ``version``) that closed the chain and folded its appends."""
    if not is_chunk(chunk, version) or len(chunk) != 3 or chunk[0] != start:
        raise _damaged(thread_id, channel, version, "a folded chain's chunk is not its own")
    lengths = chunk[2]
    if not 0 <= count < len(lengths):
        raise _damaged(
            thread_id, channel, version, f"{count} appends read from a chunk of {len(lengths) - 1}"
        )
    return chunk[1][: sum(lengths[:count])]  # type: ignore[no-any-return]


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
        if not is_chunk(value, version):
            raise _damaged(thread_id, channel, version, "a chunk that is not [start, items]")
        parts.append(value[1])
        version = value[0]
        kind, value = row_at(version)
    if kind != "set" or type(value) is not list:
        raise _damaged(thread_id, channel, version, "a list chain's start is not a list")
    for items in reversed(parts):
        value.extend(items)
    return value
