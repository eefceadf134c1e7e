"""The channel values of ``MemoryCheckpointer``: reading a version back, and the chunks of
list channels (``checkpoints.chunks``).

A mixin over the store's ``_channels`` (``(thread, ns, channel, version) -> (kind, base,
bytes)``) and ``_chains`` (the versions of each chain's appends, in order).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from checkpoints import chunks, serde
from checkpoints.encoding import load_value, missing_channel
from checkpoints.models import ChannelWrite, ThreadId


class MemoryChannels:
    """The channel methods of ``MemoryCheckpointer``."""

    _channels: dict[tuple[str, str, str, int], tuple[str, int | None, bytes]]
    _chains: dict[tuple[str, str, str, int], list[int]]

    async def load_channels(
        self,
        thread_id: ThreadId,
        ns: str,
        versions: Mapping[str, int],
        bases: Mapping[str, tuple[int, int]],
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for channel, version in versions.items():
            base = bases.get(channel)
            if base is None:
                row = self._channels.get((thread_id, ns, channel, version))
                if row is None:
                    raise missing_channel(thread_id, channel, version)
                out[channel] = load_value(row[2], thread_id, None, f"channel {channel!r}")
                continue
            base_v = base[0]
            kind, start = self._start_row(thread_id, ns, channel, base_v)
            row_at = functools.partial(self._start_row, thread_id, ns, channel)
            value = chunks.start_value(thread_id, channel, base_v, kind, start, row_at)
            chain = self._chains.get((thread_id, ns, channel, base_v), [])
            count = 0
            for v in sorted(chain):
                if v > version:
                    break
                row = self._channels[(thread_id, ns, channel, v)]
                value.extend(load_value(row[2], thread_id, None, f"channel {channel!r}"))
                count += 1
            if count != base[1]:
                raise missing_channel(thread_id, channel, version)
            out[channel] = value
        return out

    def _start_row(self, thread_id: str, ns: str, channel: str, version: int) -> tuple[str, Any]:
        """The kind and decoded value of a chain's start row (a ``set`` or a ``chunk``)."""
        row = self._channels.get((thread_id, ns, channel, version))
        if row is None or row[0] not in ("set", "chunk"):  # the chain's start is missing
            raise missing_channel(thread_id, channel, version)
        return row[0], load_value(row[2], thread_id, None, f"channel {channel!r}")

    def _chunk_blob(self, thread_id: str, ns: str, c: ChannelWrite) -> bytes:
        """The stored bytes of a chunk write: the items of the chain it closes and its own."""
        assert c.base is not None and c.count is not None
        chain = [
            v for v in self._chains.get((thread_id, ns, c.channel, c.base), ()) if v < c.version
        ]
        chunks.check_chain(thread_id, c.channel, c.version, len(chain), c.count)
        what = f"channel {c.channel!r}"
        appended = [load_value(self._channels[(thread_id, ns, c.channel, v)][2], thread_id,
                               None, what) for v in chain]  # fmt: skip
        return serde.dumps(chunks.chunk_value(c.base, appended, c.value), key=c.channel)
