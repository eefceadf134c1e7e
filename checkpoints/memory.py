"""``MemoryCheckpointer``: the in-process store users test their graphs with.

It keeps the same records as the durable backends and serializes every value with
``checkpoints.serde`` when it is written, so a value that a durable store would refuse is
refused here too, and a stored value is never aliased by the running graph.

One object may serve several threads at once (a web server's threads calling the sync API,
each on an event loop of its own, and the lease keeper's): every public method runs under
the object's lock (``_atomic``), so that taking a lease or claiming a dispatch is one step
for all of them. No method awaits anything that suspends, so a method holds the lock from
its start to its end without letting its event loop run meanwhile.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from checkpoints import serde
from checkpoints.base import check_dispatch_outcome, first_error
from checkpoints.batch import CommitBatch
from checkpoints.channels_memory import MemoryChannels
from checkpoints.encoding import encode_batch, frontier_entry, load_value
from checkpoints.errors import (
    LeaseHeldError,
    LeaseLostError,
    SerializationError,
    head_missing,
    never_claimed,
)
from checkpoints.fencing import claim_refused, commit_fence
from checkpoints.lease import lease_free
from checkpoints.listing_memory import MemoryListing
from checkpoints.models import (
    AnswerRecord,
    CallId,
    CheckpointId,
    CheckpointRecord,
    DecisionRecord,
    DispatchRecord,
    PauseId,
    PauseRecord,
    ResumePoint,
    TaskId,
    TaskRecord,
    ThreadId,
    ThreadRecord,
    now,
)
from checkpoints.runnable_memory import MemoryRunnable

C = TypeVar("C", bound=type)


def _dump(value: Any, key: str) -> bytes:
    return serde.dumps(value, key=key)


def _locked(fn: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return await fn(self, *args, **kwargs)

    return method


def _atomic(cls: C) -> C:
    """Run every public coroutine method of ``cls`` (its mixins' too) under ``self._lock``
    (re-entrant: a method may call another)."""
    names = {
        name
        for klass in cls.__mro__
        for name, fn in vars(klass).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(fn)
    }
    for name in sorted(names):  # (each wrapped once, the method the class resolves to)
        setattr(cls, name, _locked(getattr(cls, name)))
    return cls


@_atomic
class MemoryCheckpointer(MemoryChannels, MemoryListing, MemoryRunnable):
    """A ``Checkpointer`` that keeps everything in this process's memory."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        """Held by every public method (``_atomic``)."""
        self._threads: dict[str, ThreadRecord] = {}
        # (thread, ns) -> checkpoint id -> (record, frontier blob)
        self._checkpoints: dict[tuple[str, str], dict[str, tuple[CheckpointRecord, bytes]]] = {}
        # (thread, ns, channel, version) -> (kind, base, blob)
        self._channels: dict[tuple[str, str, str, int], tuple[str, int | None, bytes]] = {}
        # (thread, ns, channel, base) -> sorted list of append versions
        self._chains: dict[tuple[str, str, str, int], list[int]] = {}
        self._tasks: dict[tuple[str, str, str], dict[str, tuple[TaskRecord, bytes | None]]] = {}
        self._memos: dict[tuple[str, str, str], dict[str, dict[str, bytes]]] = {}
        self._pauses: dict[str, dict[str, tuple[PauseRecord, bytes]]] = {}
        self._answers: dict[str, list[tuple[AnswerRecord, bytes]]] = {}
        self._decisions: dict[str, list[tuple[DecisionRecord, bytes | None]]] = {}
        self._dispatch: dict[tuple[str, str], tuple[DispatchRecord, bytes]] = {}
        self._marks = {}  # the runnable index (runnable_memory)
        self._ids, self._by_status = [], {}  # sorted thread ids: all, by status (listing_memory)

    async def setup(self) -> None:
        """Nothing to create."""

    async def close(self) -> None:
        """Nothing to release; the data stays for the life of the object."""

    # -- threads and leases ------------------------------------------------------------
    async def get_thread(self, thread_id: ThreadId) -> ThreadRecord | None:
        rec = self._threads.get(thread_id)
        return dataclasses.replace(rec) if rec is not None else None

    async def acquire_lease(
        self, thread_id: ThreadId, owner: str, ttl: float, *, graph_name: str | None = None
    ) -> ThreadRecord:
        t = now()
        rec = self._threads.get(thread_id)
        if rec is None:
            rec = ThreadRecord(thread_id, "running", None, graph_name=graph_name)
            self._threads[thread_id] = rec
            self._index(thread_id, None, rec.status)
        elif not lease_free(rec.lease_owner, rec.lease_expires_at, owner, t):
            raise LeaseHeldError(thread_id, rec.lease_owner)
        rec.lease_owner = owner
        rec.lease_expires_at = t + ttl
        return dataclasses.replace(rec)

    async def renew_lease(self, thread_id: ThreadId, owner: str, ttl: float) -> None:
        rec = self._threads.get(thread_id)
        if rec is None or rec.lease_owner != owner:
            raise LeaseLostError(thread_id, owner)
        rec.lease_expires_at = now() + ttl

    async def release_lease(self, thread_id: ThreadId, owner: str) -> None:
        rec = self._threads.get(thread_id)
        if rec is not None and rec.lease_owner == owner:
            rec.lease_owner = None
            rec.lease_expires_at = None

    async def resume_thread(
        self, thread_id: ThreadId, owner: str, ttl: float
    ) -> ResumePoint | None:
        rec = self._threads.get(thread_id)
        if rec is None or rec.head is None:
            return None
        if not lease_free(rec.lease_owner, rec.lease_expires_at, owner, now()):
            raise LeaseHeldError(thread_id, rec.lease_owner)
        ck = await self.get_checkpoint(thread_id, "", rec.head)
        if ck is None:
            raise head_missing(thread_id, rec.head)
        point = ResumePoint(
            rec,
            ck,
            await self.load_channels(thread_id, "", ck.channel_versions, ck.channel_bases),
            await self.get_pauses(thread_id, rec.pending_pause_ids),
            await self.load_answers(thread_id),
            await self.load_tasks(thread_id, "", ck.id),
            await self.load_memos(thread_id, "", ck.id),
        )
        # Taken last: a read that fails leaves the lease as it was.
        point.thread = await self.acquire_lease(thread_id, owner, ttl)
        return point

    # -- commit ----------------------------------------------------------------------------
    async def commit(self, thread_id: ThreadId, owner: str, batch: CommitBatch) -> None:
        rec = self._threads.get(thread_id)
        before = rec.status if rec is not None else None
        take = batch.acquire_ttl is not None
        fenced = commit_fence(thread_id, owner, batch, rec, now())
        if fenced is not None:
            raise fenced
        if rec is None:  # created with the commit, never alone (nothing to undo on error)
            name = batch.thread.graph_name if batch.thread is not None else None
            rec = ThreadRecord(thread_id, "running", None, graph_name=name)
        ns = batch.ns
        # Serialize everything first: a SerializationError leaves the store unchanged.
        enc = encode_batch(batch, blobs=False)
        enc.channels = [(c, self._chunk_blob(thread_id, ns, c) if c.kind == "chunk" else blob)
                        for c, blob in enc.channels]  # fmt: skip
        # Apply.
        if take:
            rec.lease_owner, rec.lease_expires_at = owner, now() + (batch.acquire_ttl or 0.0)
        for t, task_blob in enc.tasks:
            key = (thread_id, ns, t.checkpoint_id)
            self._tasks.setdefault(key, {})[t.task_id] = (dataclasses.replace(t), task_blob)
        for m, blob in enc.memos:
            key = (thread_id, ns, m.checkpoint_id)
            self._memos.setdefault(key, {}).setdefault(m.task_id, {})[m.key] = blob
        for c, blob in enc.channels:
            base = c.version if c.kind == "chunk" else c.base  # (a chunk starts a chain)
            self._channels[(thread_id, ns, c.channel, c.version)] = (c.kind, base, blob)
            if c.kind == "append" and c.base is not None:
                chain = self._chains.setdefault((thread_id, ns, c.channel, c.base), [])
                if c.version not in chain:
                    bisect.insort(chain, c.version)
        for p, blob in enc.pauses:
            self._pauses.setdefault(thread_id, {})[p.id] = (p, blob)
        for a, blob in enc.answers:
            self._answers.setdefault(thread_id, []).append((a, blob))
        if batch.checkpoint is not None and enc.body is not None:
            ck = dataclasses.replace(
                batch.checkpoint,
                frontier=(),
                metadata={},
                channel_versions=dict(batch.checkpoint.channel_versions),
                channel_bases=dict(batch.checkpoint.channel_bases),
            )
            self._checkpoints.setdefault((thread_id, ns), {})[ck.id] = (ck, enc.body)
            if ns == "":
                rec.head = ck.id
        if batch.thread is not None:
            rec.status = batch.thread.status
            rec.pending_pause_ids = batch.thread.pending_pause_ids
            if batch.thread.graph_name is not None:
                rec.graph_name = batch.thread.graph_name
            rec.updated_at = now()
        if batch.release:
            rec.lease_owner = rec.lease_expires_at = None
        self._threads[thread_id] = rec
        self._index(thread_id, before, rec.status)
        self.runnable_after_commit(thread_id, batch)

    # -- reads -----------------------------------------------------------------------------
    def _revive_checkpoint(self, ck: CheckpointRecord, blob: bytes) -> CheckpointRecord:
        frontier, metadata = load_value(blob, ck.thread_id, ck.id, "checkpoint")
        return dataclasses.replace(
            ck,
            frontier=tuple(frontier_entry(t) for t in frontier),
            metadata=metadata,
            channel_versions=dict(ck.channel_versions),
            channel_bases=dict(ck.channel_bases),
        )

    async def get_checkpoint(
        self, thread_id: ThreadId, ns: str = "", checkpoint_id: CheckpointId | None = None
    ) -> CheckpointRecord | None:
        table = self._checkpoints.get((thread_id, ns))
        if not table:
            return None
        if checkpoint_id is None:
            if ns == "":
                rec = self._threads.get(thread_id)
                checkpoint_id = rec.head if rec is not None else None
            else:
                checkpoint_id = CheckpointId(max(table))
            if checkpoint_id is None:
                return None
        found = table.get(checkpoint_id)
        return self._revive_checkpoint(*found) if found is not None else None

    async def list_checkpoints(
        self, thread_id: ThreadId, ns: str = "", *, limit: int | None = None
    ) -> list[CheckpointRecord]:
        table = self._checkpoints.get((thread_id, ns), {})
        ids = sorted(table, reverse=True)
        if limit is not None:
            ids = ids[:limit]
        return [self._revive_checkpoint(*table[i]) for i in ids]

    async def load_tasks(
        self, thread_id: ThreadId, ns: str, checkpoint_id: CheckpointId
    ) -> dict[TaskId, TaskRecord]:
        out: dict[TaskId, TaskRecord] = {}
        for tid, (t, blob) in self._tasks.get((thread_id, ns, checkpoint_id), {}).items():
            writes, routes = (
                (None, None)
                if blob is None
                else load_value(blob, thread_id, checkpoint_id, f"task {t.node!r}")
            )
            out[TaskId(tid)] = dataclasses.replace(t, writes=writes, routes=routes)
        return out

    async def load_memos(
        self, thread_id: ThreadId, ns: str, checkpoint_id: CheckpointId
    ) -> dict[TaskId, dict[str, Any]]:
        table = self._memos.get((thread_id, ns, checkpoint_id), {})
        return {
            TaskId(tid): {
                k: load_value(b, thread_id, checkpoint_id, f"step {k!r}") for k, b in memo.items()
            }
            for tid, memo in table.items()
        }

    # -- pauses and answers ------------------------------------------------------------
    def _revive_pause(self, p: PauseRecord, blob: bytes) -> PauseRecord:
        value = load_value(blob, p.thread_id, p.checkpoint_id, f"pause {p.id!r}")
        return dataclasses.replace(p, value=value)

    async def get_pauses(
        self, thread_id: ThreadId, pause_ids: Sequence[PauseId]
    ) -> list[PauseRecord]:
        table = self._pauses.get(thread_id, {})
        return [self._revive_pause(*table[i]) for i in pause_ids if i in table]

    async def list_pauses(self, thread_id: ThreadId) -> list[PauseRecord]:
        table = self._pauses.get(thread_id, {})
        recs = sorted(table.values(), key=lambda pb: pb[0].created_at)
        return [self._revive_pause(*pb) for pb in recs]

    async def put_answers(self, answers: Sequence[AnswerRecord]) -> None:
        blobs = [(a, _dump(a.value, f"answer to {a.pause_id!r}")) for a in answers]
        for a, blob in blobs:
            self._answers.setdefault(a.thread_id, []).append((a, blob))

    async def load_answers(
        self, thread_id: ThreadId, pause_ids: Sequence[PauseId] | None = None
    ) -> dict[PauseId, AnswerRecord]:
        wanted = set(pause_ids) if pause_ids is not None else None
        out: dict[PauseId, AnswerRecord] = {}
        for a, blob in self._answers.get(thread_id, []):
            if wanted is None or a.pause_id in wanted:
                value = load_value(blob, thread_id, None, f"answer to {a.pause_id!r}")
                out[a.pause_id] = dataclasses.replace(a, value=value)
        return out

    # -- decisions and dispatch ------------------------------------------------------------
    async def put_decisions(self, decisions: Sequence[DecisionRecord]) -> None:
        rows = [
            (dataclasses.replace(d, extra={}),
             _dump(d.extra, f"extra of decision {d.call_id!r}") if d.extra else None)
            for d in decisions
        ]  # fmt: skip
        for row in rows:
            self._decisions.setdefault(row[0].thread_id, []).append(row)

    async def list_decisions(
        self, thread_id: ThreadId, call_id: CallId | None = None
    ) -> list[DecisionRecord]:
        return [
            d if blob is None else dataclasses.replace(
                d, extra=load_value(blob, thread_id, None, f"extra of decision {d.call_id!r}")
            )
            for d, blob in self._decisions.get(thread_id, [])
            if call_id is None or d.call_id == call_id
        ]  # fmt: skip

    async def claim_dispatch(self, record: DispatchRecord) -> bool:
        refused = claim_refused(record.thread_id, self._threads.get(record.thread_id), record.owner)
        if refused is not None:
            raise refused
        key = (record.thread_id, record.call_id)
        if key in self._dispatch:
            return False
        self._dispatch[key] = (record, _dump(None, "result"))
        return True

    async def complete_dispatch(
        self,
        thread_id: ThreadId,
        call_id: CallId,
        *,
        status: str,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        key = (thread_id, call_id)
        found = self._dispatch.get(key)
        problem: SerializationError | None = None
        try:
            blob = _dump(result, f"result of tool call {call_id!r}")
        except SerializationError as e:
            problem = e
        # The order of checkpoints.base: never claimed, the status, then the result.
        wins = first_error(
            never_claimed(thread_id, call_id) if found is None else None,
            check_dispatch_outcome(status),
            problem,
        )
        if wins is not None:
            raise wins
        assert found is not None
        rec = dataclasses.replace(found[0], error=error, completed_at=now())
        object.__setattr__(rec, "status", status)
        self._dispatch[key] = (rec, blob)

    async def get_dispatch(self, thread_id: ThreadId, call_id: CallId) -> DispatchRecord | None:
        found = self._dispatch.get((thread_id, call_id))
        if found is None:
            return None
        rec, blob = found
        return dataclasses.replace(rec, result=load_value(blob, thread_id, None, "tool result"))


__all__ = ["MemoryCheckpointer"]
