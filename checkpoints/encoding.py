"""What every backend does alike to the values it stores: encoding a batch, decoding a value.

Values inside records are serialized with ``checkpoints.serde`` when written. A batch is
encoded whole before anything is written (``encode_batch``): a value that cannot be stored
raises ``SerializationError`` naming the key it was found at (the channel, ``writes of task
'n'``, ``step 'k'``, ``pause 'p'``, ``answer to 'p'``, ``frontier``, ...), and the store is
left unchanged. Stored values that cannot be decoded raise ``CorruptCheckpointError`` naming
the thread, the checkpoint and what was read (``load_value``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checkpoints import serde
from checkpoints.batch import CommitBatch
from checkpoints.errors import CorruptCheckpointError, SerializationError, damaged
from checkpoints.models import (
    AnswerRecord,
    ChannelWrite,
    MemoRecord,
    PauseRecord,
    TaskId,
    TaskRecord,
    TaskSpec,
)

dumps = serde.dumps


@dataclass(slots=True)
class EncodedBatch:
    """The serialized values of a ``CommitBatch``, each beside its record."""

    tasks: list[tuple[TaskRecord, bytes | None]]
    """A task's ``[writes, routes]`` (None when both are None)."""
    memos: list[tuple[MemoRecord, bytes]]
    channels: list[tuple[ChannelWrite, bytes]]
    pauses: list[tuple[PauseRecord, bytes]]
    answers: list[tuple[AnswerRecord, bytes]]
    body: bytes | None = None
    """The checkpoint's ``[frontier as [id, node, has_arg, arg] lists, metadata]``."""
    versions: bytes | None = None
    """The checkpoint's channel versions (with ``blobs=True``)."""
    bases: bytes | None = None
    """The checkpoint's channel bases, None when it has none (with ``blobs=True``)."""
    pending: bytes | None = None
    """The thread update's pending pause ids, None when none (with ``blobs=True``)."""

    def nbytes(self) -> int:
        """The bytes of the serialized values."""
        groups: tuple[Sequence[tuple[Any, bytes | None]], ...] = (
            self.tasks, self.memos, self.channels, self.pauses, self.answers,
        )  # fmt: skip
        blobs = (self.body, self.versions, self.bases, self.pending)
        return sum(len(b) for g in groups for _, b in g if b is not None) + sum(
            len(b) for b in blobs if b is not None
        )


def encode_batch(batch: CommitBatch, *, blobs: bool = True) -> EncodedBatch:
    """Serialize every value of ``batch``; ``blobs``: also what a row store keeps as blobs
    (channel versions and bases, pending pause ids).

    Raises:
        SerializationError: a value cannot be stored (naming its key); nothing was encoded.
    """
    enc = EncodedBatch(
        [(t, None if t.writes is None and t.routes is None
          else dumps([t.writes, t.routes], key=f"writes of task {t.node!r}"))
         for t in batch.tasks] if batch.tasks else [],
        [(m, dumps(m.value, key=f"step {m.key!r}")) for m in batch.memos] if batch.memos else [],
        [(c, dumps(c.value, key=c.channel)) for c in batch.channels] if batch.channels else [],
        [(p, dumps(p.value, key=f"pause {p.id!r}")) for p in batch.pauses] if batch.pauses else [],
        [(a, dumps(a.value, key=f"answer to {a.pause_id!r}")) for a in batch.answers]
        if batch.answers else [],
    )  # fmt: skip
    ck = batch.checkpoint
    if ck is not None:
        try:
            # TaskSpecs as plain lists: msgpack packs them in C, several times faster.
            enc.body = dumps([[[s.id, s.node, s.has_arg, s.arg] for s in ck.frontier], ck.metadata])
        except SerializationError:
            dumps((ck.frontier, ck.metadata), key="frontier")  # the message names the key
            raise
        if blobs:
            enc.versions = dumps(ck.channel_versions, key="channel_versions")
            if ck.channel_bases:
                bases = {k: list(v) for k, v in ck.channel_bases.items()}
                enc.bases = dumps(bases, key="channel_bases")
    upd = batch.thread
    if blobs and upd is not None and upd.pending_pause_ids:
        enc.pending = dumps(list(upd.pending_pause_ids), key="pending_pause_ids")
    return enc


def load_value(blob: bytes, thread_id: str, checkpoint_id: str | None, what: str) -> Any:
    """``serde.loads`` whose failure names the thread, the checkpoint and what was read."""
    try:
        return serde.loads(blob)
    except CorruptCheckpointError as e:
        at = f" checkpoint {checkpoint_id!r}" if checkpoint_id is not None else ""
        raise CorruptCheckpointError(
            f"cannot decode {what} of thread {thread_id!r}{at}: {e}",
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
        ) from e


def frontier_entry(entry: list[Any]) -> TaskSpec:
    """A frontier entry of a checkpoint's body (``[id, node, has_arg, arg]``)."""
    return TaskSpec(TaskId(entry[0]), entry[1], entry[2], entry[3])


def missing_channel(thread_id: str, channel: str, version: int) -> CorruptCheckpointError:
    """The error for a channel value a checkpoint refers to but the store does not have."""
    return damaged(
        f"thread {thread_id!r}: stored value of channel {channel!r} at version {version} is "
        "missing",
        thread_id=thread_id,
    )
