"""Records that every checkpointer stores (see DESIGN.md, "Stored records").

Records are plain slotted dataclasses: they are built on every step, so they must be cheap.
Values inside them (channel values, task writes, memoized results, pause values, answers)
are arbitrary Python data that the backend serializes with ``checkpoints.serde``.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, NewType, get_args

ThreadId = NewType("ThreadId", str)
CheckpointId = NewType("CheckpointId", str)
TaskId = NewType("TaskId", str)
PauseId = NewType("PauseId", str)
CallId = NewType("CallId", str)

ThreadStatus = Literal["running", "paused", "done", "failed", "cancelled", "frozen"]
"""Lifecycle of a thread.

- ``running``: a run is executing it, or it crashed mid-run (``invoke(None)`` continues it).
- ``paused``: it waits for answers to its pending pauses.
- ``done``: its frontier is empty; a new input starts a new run on it.
- ``failed``: a node raised; ``invoke(None)`` retries the failed task alone.
- ``cancelled``: ended by ``cancel``; it never runs again.
- ``frozen``: stopped by an operator; nothing runs until it is unfrozen.
"""

TaskStatus = Literal["pending", "running", "completed", "paused", "failed"]
"""Lifecycle of a task (one node execution in one step).

- ``pending``: planned, not started.  ``running``: started, outcome not committed.
- ``completed``: its writes are committed.  ``paused``: it stopped at a pause.
- ``failed``: it raised; its error is recorded.
"""

PauseKind = Literal["interrupt", "before", "after", "tool_confirmation"]
"""Why a run paused: ``interrupt()`` in a node, a static gate before or after a node, or a
tool call that needs a human's confirmation."""

CheckpointSource = Literal["input", "loop", "update", "fork", "cancel", "freeze", "unfreeze"]
"""What created a checkpoint: a new input, a finished step, ``update_state``, or a fork."""

ChannelWriteKind = Literal["set", "append", "chunk"]
"""``set`` stores a channel's whole value; ``append`` stores items added to a list channel;
``chunk`` stores items added to a list channel and closes the chain of appends they extend:
the store keeps the chain's items and these in one row, which later appends chain from."""

DispatchStatus = Literal["claimed", "succeeded", "failed"]
"""A tool call's dispatch lifecycle: claimed before it runs, then its outcome."""

DispatchOutcome = Literal["succeeded", "failed"]
"""The outcome ``complete_dispatch`` records of a claimed call."""

Verdict = Literal["approve", "deny"]
"""A human's decision on a tool call."""

THREAD_STATUSES: frozenset[str] = frozenset(get_args(ThreadStatus))
TASK_STATUSES: frozenset[str] = frozenset(get_args(TaskStatus))
PAUSE_KINDS: frozenset[str] = frozenset(get_args(PauseKind))
CHECKPOINT_SOURCES: frozenset[str] = frozenset(get_args(CheckpointSource))
DISPATCH_STATUSES: frozenset[str] = frozenset(get_args(DispatchStatus))
VERDICTS: frozenset[str] = frozenset(get_args(Verdict))
"""The values of each lifecycle type, for checking what is passed in or read back."""


def check_thread_status(status: object) -> None:
    """Raise ``ValueError`` unless ``status`` is a ``ThreadStatus`` (``None`` is not one)."""
    if type(status) is not str or status not in THREAD_STATUSES:
        valid = ", ".join(repr(s) for s in get_args(ThreadStatus))
        raise ValueError(f"thread status must be one of {valid}, not {status!r}")


def now() -> float:
    """Wall-clock seconds since the epoch (what records store)."""
    return time.time()


def to_datetime(ts: float) -> datetime:
    """Convert a stored timestamp to an aware UTC datetime."""
    return datetime.fromtimestamp(ts, tz=UTC)


_id_lock = threading.Lock()
_id_last = [0]
_id_node = os.urandom(3).hex()


def next_version() -> int:
    """A process-wide strictly increasing integer (microseconds since the epoch, bumped on ties).

    Channel versions use it, so versions written by two branches of a forked thread never
    collide and a later version is always a larger number.
    """
    with _id_lock:
        t = time.time_ns() // 1000
        if t <= _id_last[0]:
            t = _id_last[0] + 1
        _id_last[0] = t
    return t


def new_checkpoint_id() -> CheckpointId:
    """A time-ordered, unique id: sorting ids as strings sorts them by creation time."""
    return CheckpointId(f"{next_version():014x}-{_id_node}")


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One entry of a checkpoint's frontier: a node to run in the next step.

    ``arg`` is the ``Send`` argument when ``has_arg`` is true (the node gets it as input).
    """

    id: TaskId
    node: str
    has_arg: bool = False
    arg: Any = None


@dataclass(slots=True, kw_only=True)
class CheckpointRecord:
    """A committed step boundary of one namespace of a thread (built with keywords, or as the
    ``child`` of its parent)."""

    id: CheckpointId
    thread_id: ThreadId
    ns: str
    parent_id: CheckpointId | None
    step: int
    source: CheckpointSource
    channel_versions: dict[str, int]
    frontier: tuple[TaskSpec, ...]
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=now)
    channel_bases: dict[str, tuple[int, int]] = field(default_factory=dict)
    """For list channels whose latest version is an ``append``: (version of the ``set`` the
    chain of appends starts from, number of appends in the chain)."""

    def child(
        self,
        id: CheckpointId,
        source: CheckpointSource,
        *,
        step: int | None = None,
        channel_versions: dict[str, int] | None = None,
        channel_bases: dict[str, tuple[int, int]] | None = None,
        frontier: tuple[TaskSpec, ...] = (),
        metadata: dict[str, Any] | None = None,
    ) -> CheckpointRecord:
        """A checkpoint of the same thread and namespace whose parent is this one (its step
        is the next unless given; versions and bases default to this one's)."""
        return CheckpointRecord(
            id=id,
            thread_id=self.thread_id,
            ns=self.ns,
            parent_id=self.id,
            step=self.step + 1 if step is None else step,
            source=source,
            channel_versions=dict(self.channel_versions)
            if channel_versions is None
            else channel_versions,
            frontier=frontier,
            metadata=metadata if metadata is not None else {},
            channel_bases=dict(self.channel_bases) if channel_bases is None else channel_bases,
        )


@dataclass(slots=True)
class ChannelWrite:
    """A new version of one channel, committed with the checkpoint that introduces it."""

    channel: str
    version: int
    kind: ChannelWriteKind
    value: Any
    """The whole value for ``set``; the list of appended items for ``append`` and ``chunk``."""
    base: int | None = None
    """For ``append`` and ``chunk``: the version of the row (``set`` or ``chunk``) the chain
    of appends starts from."""
    count: int | None = None
    """For ``chunk``: the number of appends of the chain it closes (checked by the store,
    which never builds a chunk from a chain it finds damaged)."""


@dataclass(slots=True)
class TaskRecord:
    """The lifecycle and outcome of one task of one checkpoint's frontier.

    ``writes`` holds the task's update as ``(channel, value)`` pairs once it completed, so that a
    re-planned step reuses it instead of running the node again. It is ``None`` when the
    writes were committed in the same transaction as the checkpoint that applied them.
    """

    checkpoint_id: CheckpointId
    task_id: TaskId
    node: str
    status: TaskStatus
    attempts: int = 0
    started_at: float | None = None
    ended_at: float | None = None
    error: str | None = None
    writes: list[tuple[str, Any]] | None = None
    routes: list[Any] | None = None
    """Where the task routes next (``Command.goto`` / conditional results), when completed."""


@dataclass(slots=True)
class MemoRecord:
    """A memoized step result of a task (``ctx.step_once``): replayed, never re-run."""

    checkpoint_id: CheckpointId
    task_id: TaskId
    key: str
    value: Any
    created_at: float = field(default_factory=now)


@dataclass(frozen=True, slots=True)
class PauseRecord:
    """A pause a run stopped at; append-only."""

    id: PauseId
    thread_id: ThreadId
    ns: str
    checkpoint_id: CheckpointId
    task_id: TaskId
    node: str
    kind: PauseKind
    value: Any
    created_at: float = field(default_factory=now)


@dataclass(frozen=True, slots=True)
class AnswerRecord:
    """An answer to a pause (``resume=``, a gate release); append-only, latest wins."""

    pause_id: PauseId
    thread_id: ThreadId
    value: Any
    by: str | None = None
    reason: str | None = None
    created_at: float = field(default_factory=now)


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """A human's decision on a tool call, keyed by function call id; append-only.

    ``applied`` is false when the decision was recorded but ignored (for example because its
    fingerprint did not match the proposed call); ``note`` says why. ``pause_id`` is the
    pause the decision answered, when known; ``extra`` holds further fields the engine
    records (serialized with ``checkpoints.serde``, so its values must be storable).
    """

    thread_id: ThreadId
    call_id: CallId
    verdict: Verdict
    fingerprint: str | None = None
    by: str | None = None
    reason: str | None = None
    applied: bool = True
    note: str | None = None
    created_at: float = field(default_factory=now)
    pause_id: PauseId | None = None
    """The pause the decision answered (None when it matched no pending pause)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """More facts about the decision (stored serialized; empty for most)."""


@dataclass(frozen=True, slots=True)
class DispatchRecord:
    """The claim, and later the outcome, of executing one approved tool call."""

    thread_id: ThreadId
    call_id: CallId
    tool: str
    fingerprint: str | None
    owner: str
    status: DispatchStatus = "claimed"
    result: Any = None
    error: str | None = None
    claimed_at: float = field(default_factory=now)
    completed_at: float | None = None


@dataclass(slots=True)
class ThreadRecord:
    """A thread's row: status, head checkpoint and lease."""

    thread_id: ThreadId
    status: ThreadStatus
    head: CheckpointId | None
    graph_name: str | None = None
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    pending_pause_ids: tuple[PauseId, ...] = ()
    created_at: float = field(default_factory=now)
    updated_at: float = field(default_factory=now)


@dataclass(slots=True)
class ResumePoint:
    """What resuming a thread needs, read with its lease taken (``Checkpointer.resume_thread``).

    ``checkpoint`` is the thread head (root namespace); ``channels`` its state values;
    ``pauses`` the records of the thread's pending pauses that exist; ``answers`` the latest
    answer per pause of the thread; ``tasks`` and ``memos`` those of the head checkpoint.
    """

    thread: ThreadRecord
    checkpoint: CheckpointRecord
    channels: dict[str, Any]
    pauses: list[PauseRecord]
    answers: dict[PauseId, AnswerRecord]
    tasks: dict[TaskId, TaskRecord]
    memos: dict[TaskId, dict[str, Any]]


@dataclass(slots=True)
class ThreadInfo:
    """What ``list_threads`` reports of a thread.

    Times are kept as the stored timestamps and turned into datetimes when read, so that
    listing many threads builds no datetime it does not need.
    """

    thread_id: str
    status: ThreadStatus
    updated_ts: float
    pending_pauses: int
    graph_name: str | None = None
    created_ts: float | None = None

    @property
    def updated_at(self) -> datetime:
        """When the thread's status or pending pauses last changed (aware, UTC)."""
        return to_datetime(self.updated_ts)

    @property
    def created_at(self) -> datetime | None:
        """When the thread was created (aware, UTC)."""
        return to_datetime(self.created_ts) if self.created_ts is not None else None

    @classmethod
    def from_record(cls, rec: ThreadRecord) -> ThreadInfo:
        """Build the public view of a stored thread row."""
        return cls(
            rec.thread_id,
            rec.status,
            rec.updated_at,
            len(rec.pending_pause_ids),
            rec.graph_name,
            rec.created_at,
        )


# -- the runnable index (what a worker resumes; see ``Checkpointer.list_runnable``) -----------
RunnableReason = Literal["answered", "deferred", "recovery"]
"""Why a thread is marked runnable.

- ``answered``: every pending pause of a paused thread is answered (``submit``).
- ``deferred``: it paused on a deferred call, which is evaluated again when the mark is due.
- ``recovery``: it was left ``running`` by an owner whose lease expired or who died.
"""

RUNNABLE_REASONS: frozenset[str] = frozenset(get_args(RunnableReason))


@dataclass(frozen=True, slots=True)
class RunnableMark:
    """A thread's entry in the runnable index: a worker may resume it from ``due_at``.

    At most one per thread. A commit that changes the thread's status removes it (or, with
    ``CommitBatch.runnable_at``, replaces it); ``marked_at`` tells one mark from a later one
    of the same thread (``unmark_runnable`` removes only the mark it was given).
    ``graph_name`` is the thread's, read with the mark.
    """

    thread_id: ThreadId
    reason: RunnableReason
    due_at: float
    marked_at: float
    graph_name: str | None = None
