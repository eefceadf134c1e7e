"""``Committer``: the one place a run writes to its store (DESIGN.md promises 2, 3, 4).

A run and its subgraph runs share one committer. It alone calls ``store.commit``, and it
owns what every commit must get right:

- the lease: a new input's first commit takes it in the same transaction (``take_lease``);
  the run's last commit of the root namespace gives it up (``last=True``); a commit fenced
  off by another runner (``LeaseHeldError``, ``LeaseLostError``, ``HeadConflictError``) is
  ``ThreadBusyError``; a write or dispatch claim the store refuses because the thread was
  frozen under the run (``FrozenThreadError``: ``graph.freeze``) is ``ThreadFrozenError``,
  and the run then writes nothing more (its cleanup neither: the thread stays ``frozen``);
- the answers a resume brings: they ride with the run's first commit (one fsync fewer), or
  are written at once when a side effect must see them durable (``flush_answers``);
- the records written while a step runs: finished siblings' records, memoized steps, the
  attempts of a task about to be retried, the claim and outcome of a tool dispatch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import anyio

from checkpoints.base import Checkpointer
from checkpoints.batch import CommitBatch, ThreadUpdate
from checkpoints.errors import (
    FrozenThreadError,
    HeadConflictError,
    LeaseHeldError,
    LeaseLostError,
    StoreLockedError,
)
from checkpoints.models import (
    AnswerRecord,
    CallId,
    CheckpointId,
    DecisionRecord,
    DispatchRecord,
    MemoRecord,
    TaskId,
    TaskRecord,
    ThreadId,
    ThreadStatus,
)
from graphflow.errors import ThreadBusyError, ThreadFrozenError


class Committer:
    """Commits of one run of ``thread_id`` on ``store`` under the lease of ``owner``."""

    def __init__(self, store: Checkpointer, thread_id: ThreadId, owner: str, lease_ttl: float):
        self.store = store
        self.thread_id = thread_id
        self.owner = owner
        self.lease_ttl = lease_ttl
        self.take_lease = False
        """The next commit takes the thread's lease (a new input's first commit)."""
        self.released = False
        """The lease is not the run's to give up: its last commit gave it up, or its first,
        which was to take it, never got the store's write lock (so it took nothing)."""
        self.frozen = False
        """The store refused a write or claim: the thread was frozen under the run."""
        self._answers: list[AnswerRecord] = []

    # -- answers ---------------------------------------------------------------------------
    def hold_answers(self, answers: Sequence[AnswerRecord]) -> None:
        """Answers to write with the run's next commit."""
        self._answers = [*self._answers, *answers]

    @property
    def held_answers(self) -> Sequence[AnswerRecord]:
        """Answers taken but not yet written."""
        return self._answers

    async def flush_answers(self) -> None:
        """Write the held answers now (before a side effect that must see them durable)."""
        if self._answers:
            await self.commit(CommitBatch.flush())

    # -- commits ---------------------------------------------------------------------------
    async def commit(self, batch: CommitBatch, *, last: bool = False) -> None:
        """Commit ``batch`` under the lease; ``last`` (root namespace) gives the lease up in
        the same transaction."""
        if self.take_lease:
            batch.acquire_ttl = self.lease_ttl
        answers, self._answers = self._answers, []
        if answers:
            batch.answers = [*answers, *batch.answers]
        batch.release = last and batch.ns == ""
        try:
            try:
                await self.store.commit(self.thread_id, self.owner, batch)
            except StoreLockedError:
                # It never had the write lock, so it wrote nothing: the lease it was to take
                # is not the run's, and a release would wait for that lock all over again.
                self.released = self.released or self.take_lease
                raise
        except FrozenThreadError as e:
            raise await self._frozen() from e
        except LeaseHeldError as e:
            raise ThreadBusyError(self.thread_id, e.owner) from e
        except (LeaseLostError, HeadConflictError) as e:
            raise ThreadBusyError(self.thread_id, None) from e
        except BaseException:
            self._answers = [*answers, *self._answers]  # not written: keep them
            raise
        self.take_lease = False
        self.released = batch.release

    async def task_records(self, ns: str, records: Sequence[TaskRecord]) -> None:
        """Commit records of tasks that finished (or will be retried) while siblings run."""
        if records:
            await self.commit(CommitBatch.flush(ns, tasks=records))

    async def memo(
        self, ns: str, checkpoint_id: CheckpointId, task_id: str, key: str, value: Any
    ) -> None:
        """Commit a memoized step result of a running task (``ctx.step_once``)."""
        memo = MemoRecord(checkpoint_id, TaskId(task_id), key, value)
        await self.commit(CommitBatch.flush(ns, memos=[memo]))

    async def mark_failed(self, graph_name: str | None) -> bool:
        """``leave`` the thread ``failed`` (after an error that stopped the run)."""
        return await self.leave("failed", graph_name)

    async def leave(self, status: ThreadStatus, graph_name: str | None) -> bool:
        """Leave the thread ``status`` (``failed``; ``paused`` with its pending work and no
        pending pause, when its stream's reader went away) and give the lease up, best
        effort; whether that was written. A run that never held the lease (its first
        commit, which was to take it, did not happen) writes nothing: the thread is another
        run's, which may have paused it meanwhile; nor does a run whose thread was frozen
        under it (``frozen``)."""
        if self.take_lease or self.frozen:
            return False
        batch = CommitBatch.stop("", ThreadUpdate(status, (), graph_name))
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await self.commit(batch, last=True)
            return True
        return False

    # -- decisions and dispatch -------------------------------------------------------------
    async def decisions(self, records: Sequence[DecisionRecord]) -> None:
        """Append decision records (they need no lease)."""
        if records:
            await self.store.put_decisions(records)

    async def claim_dispatch(
        self, key: str, tool: str, fingerprint: str | None
    ) -> DispatchRecord | None:
        """Claim a tool call before it runs, the decision that allowed it durable first:
        None when this run claimed it, else the existing record (claimed earlier)."""
        await self.flush_answers()
        record = DispatchRecord(self.thread_id, CallId(key), tool, fingerprint, self.owner)
        try:
            if await self.store.claim_dispatch(record):
                return None
        except FrozenThreadError as e:
            raise await self._frozen() from e
        except LeaseLostError as e:  # (its lease lapsed and was taken: the call is not run)
            raise ThreadBusyError(self.thread_id, None) from e
        found = await self.store.get_dispatch(self.thread_id, CallId(key))
        return found if found is not None else record

    async def complete_dispatch(
        self, key: str, status: str, result: Any, error: str | None
    ) -> None:
        """Record a claimed call's outcome."""
        await self.store.complete_dispatch(
            self.thread_id, CallId(key), status=status, result=result, error=error
        )

    async def _frozen(self) -> ThreadFrozenError:
        """The error of a write or claim refused because the thread was frozen under the run,
        with the freeze's reason when its checkpoint can be read (best effort)."""
        self.frozen = True
        reason = None
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            th = await self.store.get_thread(self.thread_id)
            if th is not None and th.head is not None:
                head = await self.store.get_checkpoint(self.thread_id, "", th.head)
                found = (head.metadata.get("frozen") or {}) if head is not None else {}
                reason = found.get("reason") if isinstance(found, dict) else None
        return ThreadFrozenError(self.thread_id, reason if isinstance(reason, str) else None)
