"""``CommitBatch``: everything one transaction writes, built by what the commit is for.

A batch is made by one of its named constructors, each a kind of commit of the engine:
``input`` (a run's input checkpoint), ``step`` (a new checkpoint: a finished step, an
update, a fork), ``flush`` (records written while a step runs: finished siblings, memoized
steps, a task set back to pending; or nothing, for held answers alone) and ``stop`` (a step
that ends without a new checkpoint: its records and the thread's new status). The lease
flags and the answers riding with a run's first commit are set by the engine's committer,
in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from checkpoints.models import (
    AnswerRecord,
    ChannelWrite,
    CheckpointId,
    CheckpointRecord,
    MemoRecord,
    PauseId,
    PauseRecord,
    TaskRecord,
    ThreadStatus,
)


@dataclass(frozen=True, slots=True)
class ThreadUpdate:
    """Changes to the thread row made atomically with a commit."""

    status: ThreadStatus
    pending_pause_ids: tuple[PauseId, ...] = ()
    graph_name: str | None = None


@dataclass(slots=True)
class CommitBatch:
    """Everything one transaction writes; a backend commits all of it or none of it.

    When ``checkpoint`` is set it becomes the head of its namespace; for the root namespace
    the thread head is compared with ``expected_head`` first (compare-and-set).
    """

    ns: str = ""
    tasks: list[TaskRecord] = field(default_factory=list)
    memos: list[MemoRecord] = field(default_factory=list)
    checkpoint: CheckpointRecord | None = None
    channels: list[ChannelWrite] = field(default_factory=list)
    pauses: list[PauseRecord] = field(default_factory=list)
    answers: list[AnswerRecord] = field(default_factory=list)
    thread: ThreadUpdate | None = None
    expected_head: CheckpointId | None = None
    check_head: bool = False
    acquire_ttl: float | None = None
    """Take the thread's lease for this many seconds first, in the same transaction
    (creating the thread row when missing); ``LeaseHeldError`` if another live owner has it."""
    expected_status: ThreadStatus | None = None
    """With ``acquire_ttl``, for a thread that exists: the status it must still have (the one
    the run read before deciding to run), else ``HeadConflictError``. A run that ends paused
    changes the status but not the head, so the head alone does not show it."""
    release: bool = False
    """Give the lease up in the same transaction (the run's last commit)."""
    unleased: bool = False
    """Commit without holding the lease (``owner`` is not checked; the lease row is left as
    it is): an operator's ``freeze`` of a thread a live run holds. Fenced instead by the
    head, always compared with ``expected_head``, and by ``expected_updated_at``."""
    expected_updated_at: float | None = None
    """With ``unleased``: the thread row's ``updated_at`` as the caller read it, else
    ``ThreadChangedError`` (its status or pending pauses changed: a run that paused or
    failed meanwhile moved no head)."""
    runnable_at: float | None = None
    """With ``thread`` set: mark the thread runnable from this time (reason ``deferred``) in
    the same transaction, instead of clearing its mark (see ``RunnableMark``)."""
    durable: bool = True
    """False: the commit need not wait for an fsync. Only for a write that nothing durable
    depends on yet (a run's input checkpoint, made before any node runs): a store that keeps
    commits in order makes it durable with the next durable commit, and a crash before that
    loses only the call that had not returned."""

    @classmethod
    def step(
        cls,
        checkpoint: CheckpointRecord,
        channels: list[ChannelWrite],
        *,
        tasks: Sequence[TaskRecord] = (),
        memos: Sequence[MemoRecord] = (),
        pauses: Sequence[PauseRecord] = (),
        thread: ThreadUpdate | None = None,
        expected_head: CheckpointId | None = None,
        check_head: bool = False,
    ) -> CommitBatch:
        """A new checkpoint of ``checkpoint.ns`` (a finished step, an update or a fork), its
        channel values and the records that go with it; durable."""
        return cls(
            ns=checkpoint.ns,
            checkpoint=checkpoint,
            channels=channels,
            tasks=list(tasks),
            memos=list(memos),
            pauses=list(pauses),
            thread=thread,
            expected_head=expected_head,
            check_head=check_head,
        )

    @classmethod
    def input(
        cls,
        checkpoint: CheckpointRecord,
        channels: list[ChannelWrite],
        *,
        thread: ThreadUpdate | None = None,
        expected_head: CheckpointId | None = None,
        check_head: bool = False,
        expected_status: ThreadStatus | None = None,
    ) -> CommitBatch:
        """A run's input checkpoint, made before any node runs: nothing durable depends on
        it yet, so it need not wait for an fsync (``durable=False``)."""
        batch = cls.step(
            checkpoint, channels, thread=thread, expected_head=expected_head, check_head=check_head
        )
        batch.durable = False
        batch.expected_status = expected_status
        return batch

    @classmethod
    def flush(
        cls,
        ns: str = "",
        *,
        tasks: Sequence[TaskRecord] = (),
        memos: Sequence[MemoRecord] = (),
        expected_head: CheckpointId | None = None,
        check_head: bool = False,
    ) -> CommitBatch:
        """Records written while a step runs (task outcomes, memoized results), or none (a
        commit of the answers the committer holds)."""
        return cls(
            ns=ns,
            tasks=list(tasks),
            memos=list(memos),
            expected_head=expected_head,
            check_head=check_head,
        )

    @classmethod
    def stop(
        cls,
        ns: str,
        thread: ThreadUpdate | None,
        *,
        tasks: Sequence[TaskRecord] = (),
        memos: Sequence[MemoRecord] = (),
        pauses: Sequence[PauseRecord] = (),
    ) -> CommitBatch:
        """A step that ends without a new checkpoint (paused, failed, frozen, done): its
        records and the thread's new status (None in a subgraph's namespace)."""
        return cls(ns=ns, tasks=list(tasks), memos=list(memos), pauses=list(pauses), thread=thread)
