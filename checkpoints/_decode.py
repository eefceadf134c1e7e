"""Decoding stored values into typed errors: shared by every backend."""

from __future__ import annotations

from typing import Any

from checkpoints import serde
from checkpoints.errors import CorruptCheckpointError


def load_value(blob: bytes, thread_id: str, checkpoint_id: str | None, what: str) -> Any:
    """``serde.loads`` whose failure names the thread, the checkpoint and what was read."""
    try:
        return serde.loads(blob)
    except CorruptCheckpointError as e:
        raise CorruptCheckpointError(
            f"cannot decode {what} of thread {thread_id!r} checkpoint {checkpoint_id!r}: {e}",
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
        ) from e


def missing_channel(thread_id: str, channel: str, version: int) -> CorruptCheckpointError:
    """The error for a channel value a checkpoint refers to but the store does not have."""
    return CorruptCheckpointError(
        f"thread {thread_id!r}: stored value of channel {channel!r} at version {version} is "
        "missing",
        thread_id=thread_id,
    )
