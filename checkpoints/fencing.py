"""What fences off a write to a thread, as both backends decide it (``checkpoints.base``).

A commit is fenced by the thread's lease (``LeaseLostError``; for one that takes the lease
in its transaction, ``LeaseHeldError``), then by the thread's status (``FrozenThreadError``
on a frozen thread; ``HeadConflictError`` when it is not the one a lease-taking commit
read), then by the head (``HeadConflictError``).

A frozen thread refuses every write of the run that held it when it was frozen, whatever
the write is (a memoized step, a task record, the run's stop or its cleanup) and every
tool-dispatch claim: only a commit that takes the lease expecting ``frozen`` (``unfreeze``,
``cancel``) writes to it. An ``unleased`` commit (``freeze``, which must not wait for the
run it stops) checks no lease and leaves it to its holder, whose run then ends at its next
write or claim: it is fenced by the head and the row's ``updated_at`` as its caller read them.
"""

from __future__ import annotations

from checkpoints.batch import CommitBatch
from checkpoints.errors import (
    CheckpointError,
    FrozenThreadError,
    HeadConflictError,
    LeaseHeldError,
    LeaseLostError,
    ThreadChangedError,
)
from checkpoints.lease import lease_free
from checkpoints.models import ThreadRecord


def status_conflict(
    thread_id: str, batch: CommitBatch, rec: ThreadRecord
) -> HeadConflictError | None:
    """For a commit that takes the lease of the existing thread ``rec``: the error when the
    thread is no longer in ``batch.expected_status`` (a run paused it meanwhile, which no
    new head shows), None otherwise."""
    status = batch.expected_status
    if status is not None and rec.status != status:
        return HeadConflictError(thread_id, batch.expected_head, rec.head)
    return None


def frozen_conflict(
    thread_id: str, batch: CommitBatch, rec: ThreadRecord
) -> FrozenThreadError | None:
    """For a commit to the existing thread ``rec``: the error when the thread is frozen and
    the commit is neither unleased nor one that takes the lease expecting ``frozen``."""
    if rec.status != "frozen" or batch.unleased:
        return None
    if batch.acquire_ttl is not None and batch.expected_status == "frozen":
        return None
    return FrozenThreadError(thread_id)


def unleased_conflict(
    thread_id: str, batch: CommitBatch, rec: ThreadRecord | None
) -> CheckpointError | None:
    """For an ``unleased`` commit: the error when the thread's head is not
    ``batch.expected_head`` (``HeadConflictError``) or its row's ``updated_at`` is not
    ``batch.expected_updated_at`` (``ThreadChangedError``), None otherwise."""
    head = rec.head if rec is not None else None
    if rec is None or head != batch.expected_head:
        return HeadConflictError(thread_id, batch.expected_head, head)
    at = batch.expected_updated_at
    if at is not None and rec.updated_at != at:
        return ThreadChangedError(thread_id)
    return None


def commit_fence(
    thread_id: str, owner: str, batch: CommitBatch, rec: ThreadRecord | None, at: float
) -> CheckpointError | None:
    """The error that fences off ``owner``'s commit of ``batch`` to the thread ``rec`` (None
    when it does not exist) at time ``at``, in the order of ``checkpoints.base``; None when
    the commit may write."""
    if batch.unleased:
        return unleased_conflict(thread_id, batch, rec)
    found: CheckpointError | None = None
    if batch.acquire_ttl is not None:
        if rec is None:  # created with the commit (so a head expected is not there)
            expected = batch.expected_head
            if batch.check_head and expected is not None:
                return HeadConflictError(thread_id, expected, None)
            return None
        if not lease_free(rec.lease_owner, rec.lease_expires_at, owner, at):
            return LeaseHeldError(thread_id, rec.lease_owner)
        found = frozen_conflict(thread_id, batch, rec) or status_conflict(thread_id, batch, rec)
    elif rec is None or rec.lease_owner != owner:
        return LeaseLostError(thread_id, owner)
    else:
        found = frozen_conflict(thread_id, batch, rec)
    if found is None and batch.check_head and rec.head != batch.expected_head:
        found = HeadConflictError(thread_id, batch.expected_head, rec.head)
    return found


def claim_refused(
    thread_id: str, rec: ThreadRecord | None, owner: str
) -> FrozenThreadError | LeaseLostError | None:
    """For ``claim_dispatch`` by ``owner``: the error when the thread ``rec`` is frozen (a
    run that held it when it was frozen dispatches nothing more), or when ``owner`` does
    not hold its lease (a run whose lease lapsed, while its process was stopped, and was
    taken or given up since: ``unfreeze`` may have run), None otherwise (also for a thread
    not stored yet)."""
    if rec is None:
        return None
    if rec.status == "frozen":
        return FrozenThreadError(thread_id)
    if rec.lease_owner != owner:
        return LeaseLostError(thread_id, owner)
    return None


def answers_fenced(
    thread_id: str, rec: ThreadRecord | None, idle_at: float, at: float
) -> CheckpointError | None:
    """For ``record_answers(..., if_idle_at=...)``: the error when the thread is not as its
    caller read it, idle (no live lease: ``LeaseHeldError``) with the ``updated_at`` it
    read (``ThreadChangedError``), None otherwise."""
    if rec is None or rec.updated_at != idle_at:
        return ThreadChangedError(thread_id)
    if not lease_free(rec.lease_owner, rec.lease_expires_at, "", at):
        return LeaseHeldError(thread_id, rec.lease_owner)
    return None
