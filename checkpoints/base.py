"""The async ``Checkpointer`` protocol every backend implements.

Contract shared by all backends (checked by ``checkpoints.testing``):

- ``commit`` is atomic: every record of a ``CommitBatch`` is durable, or none is. It is fenced
  by the lease: it raises ``LeaseLostError`` unless ``owner`` holds the thread's lease, and,
  when ``batch.check_head`` is set, ``HeadConflictError`` unless the root head equals
  ``batch.expected_head``. A failed commit changes nothing. With ``batch.acquire_ttl`` it
  first takes the lease in the same transaction (``LeaseHeldError`` when a live other owner
  holds it; ``HeadConflictError`` when the thread exists with another status than
  ``batch.expected_status``, if given); with ``batch.release`` it gives the lease up in it.
  ``batch.durable=False`` allows a commit that does not wait for an fsync, for a store that
  keeps commits in order.
- A ``frozen`` thread refuses (``FrozenThreadError``) every commit but one that takes the
  lease expecting ``frozen`` (unfreeze, cancel), and every ``claim_dispatch``: a run that held
  the thread when it was frozen writes and dispatches nothing more. ``batch.unleased`` (the
  freeze of a thread a run holds) commits without the lease, leaving it as it is, if the head
  is ``batch.expected_head`` and the row's ``updated_at`` is ``batch.expected_updated_at``
  (``HeadConflictError``, ``ThreadChangedError``). ``checkpoints.fencing`` decides all of it.
- Values inside records are serialized with ``checkpoints.serde`` when written; a value that
  cannot be stored raises ``SerializationError`` (naming the key) and nothing is written.
- Reads of records that cannot be decoded, or are not what was written (a durable backend
  checks what it reads: ``SqliteCheckpointer`` by checksums and counts), raise
  ``CorruptCheckpointError`` naming the thread and checkpoint; a backend never returns a
  partly decoded record, nor a damaged one as if it were sound.
- Pauses, answers, decisions and dispatch records are append-only.
- The runnable index (``mark_runnable`` and below) holds at most one ``RunnableMark`` per
  thread; a ``commit`` whose batch sets ``thread`` removes the thread's mark in the same
  transaction, or replaces it with a ``deferred`` one due at ``batch.runnable_at``.

Which error wins, when a call meets several (every backend, checked by ``checkpoints.testing``
on each): what the store finds before it looks at the values it was given. In order:

1. damage of what the call reads (``CorruptCheckpointError``: a damaged thread row, a tool
   call that was never claimed);
2. the lease (``LeaseHeldError`` when the commit takes it, ``LeaseLostError``);
3. the thread's status (``FrozenThreadError``; ``HeadConflictError`` when a commit that
   takes the lease finds another than it read), then the head (``HeadConflictError``);
4. arguments that are not values of their type (``ValueError``: a dispatch status);
5. a value that cannot be stored (``SerializationError``).

A call that raises writes nothing. ``first_error`` applies the rule to what a backend found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, get_args, runtime_checkable

from checkpoints.batch import CommitBatch
from checkpoints.models import (
    AnswerRecord,
    CallId,
    CheckpointId,
    CheckpointRecord,
    DecisionRecord,
    DispatchOutcome,
    DispatchRecord,
    PauseId,
    PauseRecord,
    ResumePoint,
    RunnableMark,
    RunnableReason,
    TaskId,
    TaskRecord,
    ThreadId,
    ThreadInfo,
    ThreadRecord,
    ThreadStatus,
    check_thread_status,
)


def first_error(*found: Exception | None) -> Exception | None:
    """The error that wins among those found (given in the order of the rule above)."""
    return next((e for e in found if e is not None), None)


def check_listing(status: object, limit: object = None, after: object = None) -> ValueError | None:
    """The error for arguments of ``list_threads`` (of ``count_threads``, with the defaults)
    that are not values of their type, naming the argument (None if they are); a backend
    raises it before it reads anything (see ``Checkpointer.list_threads``)."""
    if status is not None:
        try:
            check_thread_status(status)
        except ValueError as e:
            return e
    if limit is not None and (type(limit) is not int or limit < 1):
        return ValueError(
            f"limit must be a positive int (the most threads a page holds) or None, "
            f"not {limit!r:.80}"
        )
    if after is None:
        return None
    if type(after) is not str:
        return ValueError(
            "after must be a cursor: the thread_id (a str) of the last thread of the "
            f"previous page, or None; not {after!r:.80}"
        )
    try:
        after.encode("utf-8")
    except UnicodeEncodeError:
        return ValueError(
            f"after {after!r:.80} is not a cursor of the thread-id order: no thread id "
            "holds text that cannot be encoded as UTF-8"
        )
    return None


def check_dispatch_outcome(status: object) -> ValueError | None:
    """The error for a dispatch outcome that is not a ``DispatchOutcome`` (None if it is)."""
    if type(status) is str and status in get_args(DispatchOutcome):
        return None
    return ValueError(f"dispatch status must be 'succeeded' or 'failed', not {status!r}")


@runtime_checkable
class Checkpointer(Protocol):
    """Durable storage of threads, checkpoints, tasks, pauses and decisions.

    All methods are coroutines; backends that do blocking I/O run it off the event loop.
    Methods that take a ``thread_id`` of a thread that does not exist return ``None`` or an
    empty result unless documented otherwise.
    """

    async def setup(self) -> None:
        """Create storage (files, tables) when missing; idempotent; called before first use."""
        ...

    async def close(self) -> None:
        """Release connections; the checkpointer may be set up again afterwards."""
        ...

    # -- threads and leases ------------------------------------------------------------
    async def get_thread(self, thread_id: ThreadId) -> ThreadRecord | None:
        """The thread's row, or ``None`` when the thread does not exist."""
        ...

    async def acquire_lease(
        self, thread_id: ThreadId, owner: str, ttl: float, *, graph_name: str | None = None
    ) -> ThreadRecord:
        """Take the thread's lease for ``ttl`` seconds, creating the thread row when missing.

        Succeeds when the lease is free, expired, already ``owner``'s, or held by a process on
        this host that is no longer alive. Raises ``LeaseHeldError`` otherwise. Atomic.
        """
        ...

    async def renew_lease(self, thread_id: ThreadId, owner: str, ttl: float) -> None:
        """Extend ``owner``'s lease; raises ``LeaseLostError`` when it no longer holds it."""
        ...

    async def release_lease(self, thread_id: ThreadId, owner: str) -> None:
        """Give the lease up if ``owner`` holds it; otherwise do nothing."""
        ...

    async def resume_thread(
        self, thread_id: ThreadId, owner: str, ttl: float
    ) -> ResumePoint | None:
        """Take the lease of an existing thread and read what resuming it needs, atomically.

        ``None`` (and no lease taken) when the thread does not exist or has no checkpoint;
        ``LeaseHeldError`` as ``acquire_lease``; ``CorruptCheckpointError`` when its head
        checkpoint is missing or a record cannot be decoded, and then the lease is not taken.
        The same as ``acquire_lease`` followed by ``get_checkpoint``, ``load_channels``,
        ``get_pauses`` (the pending ones), ``load_answers``, ``load_tasks`` and ``load_memos``
        of the head, in one call (one transaction where the backend has them).
        """
        ...

    async def list_threads(
        self,
        status: ThreadStatus | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
    ) -> list[ThreadInfo]:
        """Threads (optionally of one status), from an index (no scan of checkpoints).

        Without ``limit`` and ``after``: every thread, most recently updated first. With
        either, a page in **thread-id order** (the code-point order of ``thread_id``, which
        is SQLite's order of its UTF-8 bytes): the threads whose id sorts after the cursor
        ``after`` (from the first when None), at most ``limit`` of them (all when None).
        The cursor of a page is the ``thread_id`` of its last thread; pass it as ``after``
        to get the next page. A page shorter than ``limit`` is the last one.

        A thread's place in the order never moves, so paging while threads are added and
        others change status returns exactly once each thread that existed from the first
        page to the last (with ``status``: that had the status all along), and no thread
        twice; a thread added (or changed to the status) meanwhile is seen when its id
        sorts after the cursor. (An order by update time would move a thread that changes
        behind or ahead of the cursor: missed, or seen twice.)

        Damage (``CorruptCheckpointError``): every thread read is checked; a listing, and a
        page holding a whole range (from the first thread, shorter than ``limit``), is
        compared with the count too. A page of part of a range cannot be: a thread whose
        stored id or status was damaged has moved out of it unseen.

        Raises ``ValueError``, before anything is read, for a ``status`` that is not a
        ``ThreadStatus``, a ``limit`` that is not a positive ``int``, or an ``after`` that
        is not a cursor (a ``str`` a thread id can be: encodable as UTF-8); see
        ``check_listing``.
        """
        ...

    async def count_threads(self, status: ThreadStatus | None = None) -> int:
        """How many threads there are (of one status): what ``list_threads(status)``
        would return as many of, from counts kept as threads are created and change
        status (no scan: the same time at any number of threads).

        Raises ``ValueError`` for a ``status`` that is not a ``ThreadStatus``;
        ``CorruptCheckpointError`` when a stored count is damaged.
        """
        ...

    # -- checkpoints and state -------------------------------------------------------------
    async def commit(self, thread_id: ThreadId, owner: str, batch: CommitBatch) -> None:
        """Write ``batch`` in one transaction (see the module docstring for the fencing)."""
        ...

    async def get_checkpoint(
        self, thread_id: ThreadId, ns: str = "", checkpoint_id: CheckpointId | None = None
    ) -> CheckpointRecord | None:
        """A checkpoint by id, or the newest of namespace ``ns`` when ``checkpoint_id`` is None.

        For the root namespace "newest" means the thread head.
        """
        ...

    async def list_checkpoints(
        self, thread_id: ThreadId, ns: str = "", *, limit: int | None = None
    ) -> list[CheckpointRecord]:
        """Checkpoints of one namespace, newest first."""
        ...

    async def load_channels(
        self,
        thread_id: ThreadId,
        ns: str,
        versions: Mapping[str, int],
        bases: Mapping[str, tuple[int, int]],
    ) -> dict[str, Any]:
        """Channel values at the given versions (a checkpoint's ``channel_versions``).

        A channel listed in ``bases`` is rebuilt from its ``set`` row at the base version
        followed by its ``append`` rows of that base up to the version, in version order.
        Raises ``CorruptCheckpointError`` when a referenced row (the ``set`` row of a chain
        included) is missing or cannot be decoded.
        """
        ...

    async def load_tasks(
        self, thread_id: ThreadId, ns: str, checkpoint_id: CheckpointId
    ) -> dict[TaskId, TaskRecord]:
        """Task records of one checkpoint's frontier, by task id."""
        ...

    async def load_memos(
        self, thread_id: ThreadId, ns: str, checkpoint_id: CheckpointId
    ) -> dict[TaskId, dict[str, Any]]:
        """Memoized step results of one checkpoint's tasks: task id -> key -> value."""
        ...

    # -- pauses and answers ------------------------------------------------------------
    async def get_pauses(
        self, thread_id: ThreadId, pause_ids: Sequence[PauseId]
    ) -> list[PauseRecord]:
        """Pause records by id, in the order asked; unknown ids are left out."""
        ...

    async def list_pauses(self, thread_id: ThreadId) -> list[PauseRecord]:
        """Every pause record of the thread, oldest first."""
        ...

    async def put_answers(self, answers: Sequence[AnswerRecord]) -> None:
        """Append answers to pauses (no lease needed: answers are applied by the next run)."""
        ...

    async def load_answers(
        self, thread_id: ThreadId, pause_ids: Sequence[PauseId] | None = None
    ) -> dict[PauseId, AnswerRecord]:
        """The latest answer per pause (all pauses of the thread when ``pause_ids`` is None)."""
        ...

    # -- tool-call decisions and dispatch ---------------------------------------------------
    async def put_decisions(self, decisions: Sequence[DecisionRecord]) -> None:
        """Append decisions (no lease needed)."""
        ...

    async def list_decisions(
        self, thread_id: ThreadId, call_id: CallId | None = None
    ) -> list[DecisionRecord]:
        """Decisions of a thread (optionally of one call), oldest first."""
        ...

    async def claim_dispatch(self, record: DispatchRecord) -> bool:
        """Record that a tool call is about to run; False if it was already claimed. Atomic.
        ``FrozenThreadError`` (nothing written) when the thread is frozen."""
        ...

    async def complete_dispatch(
        self,
        thread_id: ThreadId,
        call_id: CallId,
        *,
        status: str,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        """Record a claimed call's outcome (``succeeded`` or ``failed``)."""
        ...

    async def get_dispatch(self, thread_id: ThreadId, call_id: CallId) -> DispatchRecord | None:
        """The dispatch record of a call, with its outcome when known."""
        ...

    # -- the runnable index (what workers resume) -------------------------------------------
    async def record_answers(
        self,
        thread_id: ThreadId,
        decisions: Sequence[DecisionRecord],
        answers: Sequence[AnswerRecord],
        *,
        runnable_if_updated_at: float | None = None,
        if_idle_at: float | None = None,
    ) -> bool:
        """Append decisions and answers (no lease needed) and, with
        ``runnable_if_updated_at``, mark the thread runnable (``answered``, due now) if its
        row's ``updated_at`` still equals that value (its status and pending pauses did not
        change since it was read), all in one transaction. Every value is serialized first
        (``SerializationError``: nothing written). Returns whether the thread was marked.

        With ``if_idle_at`` (the row's ``updated_at`` as the caller read it) nothing is
        written unless, in the same transaction, the row still has it and no run holds a
        live lease (``answers_fenced``: ``ThreadChangedError``, ``LeaseHeldError``): a run
        that took the thread since it was read may be applying other answers to these
        pauses, and these would be recorded as the latest without taking effect."""
        ...

    async def mark_runnable(
        self,
        thread_id: ThreadId,
        *,
        reason: RunnableReason,
        due_at: float | None = None,
        if_updated_at: float | None = None,
    ) -> bool:
        """Mark the thread runnable from ``due_at`` (now when None), atomically; a mark it
        has is replaced, keeping the earlier due time. With ``if_updated_at``, only if the
        thread row's ``updated_at`` still equals it. False (nothing written) when the
        thread does not exist or changed."""
        ...

    async def list_runnable(
        self, *, due_by: float | None = None, limit: int = 100
    ) -> list[RunnableMark]:
        """Marks due by ``due_by`` (now when None), earliest due first, at most ``limit``,
        from an index (no scan of threads). Raises ``ValueError`` for a negative limit."""
        ...

    async def claim_runnable(
        self, thread_id: ThreadId, owner: str, ttl: float
    ) -> RunnableMark | None:
        """Take the lease of a thread that has a due mark, atomically (the test of the mark
        and the lease test-and-set in one transaction); return the mark, which stays until
        the run's commit removes it. None (no lease taken) when the thread has no due mark;
        ``LeaseHeldError`` as ``acquire_lease``."""
        ...

    async def unmark_runnable(self, mark: RunnableMark) -> bool:
        """Remove ``mark`` if it is still the thread's (same ``marked_at``); whether it was.
        Atomic: a newer mark of the thread is never removed."""
        ...
