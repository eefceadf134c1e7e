"""What a step's tasks produced: ``Outcome``s, and the records a step still has to commit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from checkpoints.models import CheckpointRecord, PauseRecord, TaskId, TaskRecord, TaskSpec
from graphflow.engine.pauses import PauseRequest
from graphflow.state import StateSchema

OutcomeStatus = Literal["completed", "paused", "failed", "frozen"]
"""How a task ended: its writes are ready, it stopped at pauses, it raised, or it froze the
thread (``ctx.freeze``)."""


class Writes(list[tuple[str, Any]]):
    """A node result holding several writes, possibly to one key (a subgraph's output)."""


@dataclass(slots=True)
class Outcome:
    """What running one task produced."""

    spec: TaskSpec
    status: OutcomeStatus
    writes: list[tuple[str, Any]] = field(default_factory=list)
    routes: list[Any] | None = None
    pauses: list[PauseRequest] = field(default_factory=list)
    nested: list[PauseRecord] = field(default_factory=list)
    """Pause records a subgraph task's run already stored."""
    error: BaseException | None = None
    reason: str | None = None
    """Why a frozen task froze its thread."""
    attempts: int = 1
    started_at: float = 0.0
    ended_at: float = 0.0

    def record(self, checkpoint_id: str) -> TaskRecord:
        """The task record of this outcome."""
        return TaskRecord(
            checkpoint_id,  # type: ignore[arg-type]
            self.spec.id,
            self.spec.node,
            "pending" if self.status == "frozen" else self.status,  # (it runs after unfreeze)
            attempts=self.attempts,
            started_at=self.started_at,
            ended_at=self.ended_at,
            error=f"{type(self.error).__name__}: {self.error}" if self.error else None,
            writes=self.writes if self.status == "completed" else None,
            routes=self.routes,
        )


@dataclass(slots=True)
class StepTasks:
    """The outcomes of a step's tasks, and their records not yet committed."""

    checkpoint: CheckpointRecord
    outcomes: dict[TaskId, Outcome] = field(default_factory=dict)
    unstored: list[Outcome] = field(default_factory=list)
    """Tasks that finished with the step (no sibling was left running): their records are
    implied by the checkpoint that applies the step, and written only when needed."""

    def stop_records(self) -> list[TaskRecord]:
        """Records a step that stops (paused or failed) commits: every unstored outcome."""
        records = [o.record(self.checkpoint.id) for o in self.unstored]
        self.unstored = []
        return records

    def kept_records(self) -> list[TaskRecord]:
        """Records a step that goes on commits with its next checkpoint: only those of
        retried tasks (their attempts); the checkpoint says the others completed."""
        records = [o.record(self.checkpoint.id) for o in self.unstored if o.attempts > 1]
        for r in records:
            r.writes = None
        self.unstored = []
        return records


def as_update(schema: StateSchema, writes: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """A task's writes as one update: repeated keys (a subgraph's) through the reducer."""
    out: dict[str, Any] = {}
    for k, v in writes:
        ch = schema.channels.get(k)
        reducer = ch.reducer if ch is not None else None
        out[k] = reducer(out[k], v) if k in out and reducer is not None else v
    return out


class RunStopped(Exception):
    """A run ended between two steps because ``Run.should_stop`` said so: its last step is
    committed and the thread is left ``paused`` with its pending work and no pending pause,
    to be continued (``invoke(None)``, or a worker: it is marked runnable)."""

    def __init__(self, thread_id: str):
        super().__init__(f"thread {thread_id!r}: the run stopped between steps, as asked")
        self.thread_id = thread_id


class StreamClosed(RunStopped):
    """A run ended between two steps because its stream's reader stopped reading: its last
    step is committed and the thread is left ``paused`` with its pending work and no pending
    pause, to be continued (``invoke(None)``)."""


def never() -> bool:
    """The default ``Run.should_stop``: never."""
    return False
