"""Store reads that the calls from outside a run share (``history``, ``update``, ``threads``).

``naming`` makes a ``CorruptCheckpointError`` raised by a read name the thread and checkpoint
it was read for; ``carried_step`` moves a pending step's records and memoized steps to the
checkpoint that keeps the step (``update_state`` at the head, ``freeze``). Neither makes a
snapshot, so they are kept out of ``engine.history``: ``update`` and ``threads`` use them
without importing the snapshot code.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from checkpoints.base import Checkpointer
from checkpoints.errors import RESTORE, CorruptCheckpointError
from checkpoints.models import CheckpointId, CheckpointRecord, MemoRecord, TaskRecord
from graphflow.engine.witness import OUTBOX


@contextlib.contextmanager
def naming(thread_id: str, checkpoint_id: str | None = None) -> Iterator[None]:
    """Make a ``CorruptCheckpointError`` raised inside name the thread (and checkpoint)."""
    try:
        yield
    except CorruptCheckpointError as e:
        named = f"{thread_id!r}" in str(e)
        if named and e.thread_id is not None and (e.checkpoint_id or not checkpoint_id):
            raise
        msg = str(e) if named else f"thread {thread_id!r}: {e}"
        if e.checkpoint_id is None and checkpoint_id is not None:
            head, hint, tail = msg.rpartition(f"; {RESTORE}")  # (the checkpoint goes first)
            at = f" (checkpoint {checkpoint_id!r})"
            msg = f"{head}{at}{hint}{tail}" if hint else msg + at
        raise CorruptCheckpointError(
            msg, thread_id=thread_id, checkpoint_id=e.checkpoint_id or checkpoint_id
        ) from e


async def carried_step(
    store: Checkpointer, src: CheckpointRecord, ck_id: CheckpointId
) -> tuple[list[TaskRecord], list[MemoRecord]]:
    """The committed records and memoized steps of ``src``'s pending step, moved to the
    checkpoint ``ck_id`` that keeps that step as it is (``update_state`` at the head,
    ``freeze``): its tasks' answers, pauses and memos (an agent's model answers) carry over.

    For a ``freeze`` checkpoint, the records of the step where it was made (its parent) are
    taken too, the newest of each: a run that held the thread may have written more of them
    between the freeze's read and its commit (after the commit, the store refuses it)."""
    tid, ns = src.thread_id, src.ns
    with naming(tid, src.id):
        records = await store.load_tasks(tid, ns, src.id)
        steps = {t: dict(m) for t, m in (await store.load_memos(tid, ns, src.id)).items()}
        if src.source == "freeze" and src.parent_id is not None:
            parent = CheckpointId(src.parent_id)
            records = {**records, **await store.load_tasks(tid, ns, parent)}
            for task_id, memo in (await store.load_memos(tid, ns, parent)).items():
                if task_id != OUTBOX:  # (the outbox stays as the freeze committed it)
                    steps.setdefault(task_id, {}).update(memo)
    tasks = [dataclasses.replace(rec, checkpoint_id=ck_id) for rec in records.values()]
    memos = [MemoRecord(ck_id, t, k, v) for t, memo in steps.items() for k, v in memo.items()]
    return tasks, memos
