"""The runnable index of ``MemoryCheckpointer`` (see ``Checkpointer.mark_runnable``).

A mixin over the store's dictionaries: ``_threads`` (thread rows) and ``_marks`` (thread id ->
``RunnableMark``). Every method runs without awaiting anything in between its test and its
write, so each is atomic on the event loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from checkpoints import serde
from checkpoints.batch import CommitBatch
from checkpoints.errors import LeaseHeldError
from checkpoints.fencing import answers_fenced
from checkpoints.lease import lease_free
from checkpoints.models import (
    RUNNABLE_REASONS,
    AnswerRecord,
    DecisionRecord,
    RunnableMark,
    RunnableReason,
    ThreadId,
    ThreadRecord,
    now,
)


def check_reason(reason: object) -> None:
    """Raise ``ValueError`` unless ``reason`` is a ``RunnableReason``."""
    if type(reason) is not str or reason not in RUNNABLE_REASONS:
        valid = sorted(RUNNABLE_REASONS)
        raise ValueError(f"runnable reason must be one of {valid}, not {reason!r}")


def check_limit(limit: object) -> int:
    """The limit of ``list_runnable``, checked."""
    if type(limit) is not int or limit < 0:
        raise ValueError(f"limit must be a non-negative int, not {limit!r}")
    return limit


def merged(old: RunnableMark | None, new: RunnableMark) -> RunnableMark:
    """The mark that replaces ``old``: the new one, due at the earlier of both times."""
    if old is not None and old.due_at < new.due_at:
        return dataclasses.replace(new, due_at=old.due_at, reason=old.reason)
    return new


class MemoryRunnable:
    """The runnable-index methods of ``MemoryCheckpointer``."""

    _threads: dict[str, ThreadRecord]
    _marks: dict[str, RunnableMark]

    if TYPE_CHECKING:

        async def put_decisions(self, decisions: Sequence[DecisionRecord]) -> None: ...

        async def put_answers(self, answers: Sequence[AnswerRecord]) -> None: ...

    def _mark(
        self,
        thread_id: str,
        reason: RunnableReason,
        due_at: float | None,
        if_updated_at: float | None,
    ) -> bool:
        rec = self._threads.get(thread_id)
        if rec is None or (if_updated_at is not None and rec.updated_at != if_updated_at):
            return False
        t = now()
        mark = RunnableMark(ThreadId(thread_id), reason, t if due_at is None else due_at, t)
        self._marks[thread_id] = merged(self._marks.get(thread_id), mark)
        return True

    def runnable_after_commit(self, thread_id: str, batch: CommitBatch) -> None:
        """What a commit does to the thread's mark (called inside ``commit``)."""
        if batch.thread is None:
            return
        self._marks.pop(thread_id, None)
        if batch.runnable_at is not None:
            t = now()
            self._marks[thread_id] = RunnableMark(
                ThreadId(thread_id), "deferred", batch.runnable_at, t
            )

    async def record_answers(
        self,
        thread_id: ThreadId,
        decisions: Sequence[DecisionRecord],
        answers: Sequence[AnswerRecord],
        *,
        runnable_if_updated_at: float | None = None,
        if_idle_at: float | None = None,
    ) -> bool:
        # Serialize everything first: a SerializationError writes nothing.
        for d in decisions:
            if d.extra:
                serde.dumps(d.extra, key=f"extra of decision {d.call_id!r}")
        for a in answers:
            serde.dumps(a.value, key=f"answer to {a.pause_id!r}")
        if if_idle_at is not None:
            rec = self._threads.get(thread_id)
            if (fenced := answers_fenced(thread_id, rec, if_idle_at, now())) is not None:
                raise fenced
        await self.put_decisions(decisions)  # (neither awaits anything: one atomic block)
        await self.put_answers(answers)
        if runnable_if_updated_at is None:
            return False
        return self._mark(thread_id, "answered", None, runnable_if_updated_at)

    async def mark_runnable(
        self,
        thread_id: ThreadId,
        *,
        reason: RunnableReason,
        due_at: float | None = None,
        if_updated_at: float | None = None,
    ) -> bool:
        check_reason(reason)
        return self._mark(thread_id, reason, due_at, if_updated_at)

    async def list_runnable(
        self, *, due_by: float | None = None, limit: int = 100
    ) -> list[RunnableMark]:
        limit = check_limit(limit)
        by = now() if due_by is None else due_by
        due = sorted(
            (m for m in self._marks.values() if m.due_at <= by),
            key=lambda m: (m.due_at, m.thread_id),
        )
        return [self._with_graph(m) for m in due[:limit]]

    def _with_graph(self, mark: RunnableMark) -> RunnableMark:
        rec = self._threads.get(mark.thread_id)
        return dataclasses.replace(mark, graph_name=rec.graph_name if rec else None)

    async def claim_runnable(
        self, thread_id: ThreadId, owner: str, ttl: float
    ) -> RunnableMark | None:
        mark = self._marks.get(thread_id)
        t = now()
        if mark is None or mark.due_at > t:
            return None
        rec = self._threads.get(thread_id)
        if rec is None:  # (a mark outlives no thread; dropped if one did)
            del self._marks[thread_id]
            return None
        if not lease_free(rec.lease_owner, rec.lease_expires_at, owner, t):
            raise LeaseHeldError(thread_id, rec.lease_owner)
        rec.lease_owner, rec.lease_expires_at = owner, t + ttl
        return self._with_graph(mark)

    async def unmark_runnable(self, mark: RunnableMark) -> bool:
        found = self._marks.get(mark.thread_id)
        if found is None or found.marked_at != mark.marked_at:
            return False
        del self._marks[mark.thread_id]
        return True
