"""A task's attempts and what they come to: ``Job``, what a task carries from one attempt to
the next (its attempt counts, the record committed before a retry's wait); ``Attempt``, what
one attempt returned or raised; and ``finish``, the ``Outcome`` of its last attempt (a node's
return value checked as writes and routes by ``normalize``).

Kept apart from ``engine.tasks``, which schedules the attempts (the task group, the node
pool, the retry loop): turning what a node did into an outcome awaits nothing, so it reads
without the machinery of a running step. ``finish`` and ``normalize`` are called once per
task, as the runner's methods they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from checkpoints.models import CheckpointRecord, TaskRecord, TaskSpec, now
from graphflow.engine import plan
from graphflow.engine.context import FreezeSignal, NodeContext, PauseSignal
from graphflow.engine.events import Emitter
from graphflow.engine.outcomes import Outcome, Writes, as_update
from graphflow.errors import GraphflowError, InvalidUpdateError
from graphflow.spec import GraphSpec
from graphflow.types import Command


@dataclass(slots=True)
class Job:
    """What a task needs to run: its spec, step, the state it sees, its memos and the
    answers of the run, and its attempts (``prior``: made by earlier runs; ``spent``: of
    those, the ones that count against this run's retry budget)."""

    spec: TaskSpec
    step: int
    state: Any
    memos: dict[str, Any]
    prior: int
    spent: int
    checkpoint: CheckpointRecord
    answers: Mapping[str, Any]
    attempts: int = 0
    started: float = field(default_factory=now)

    def __post_init__(self) -> None:
        self.attempts = self.prior

    def retrying(self, error: BaseException | None) -> TaskRecord:
        """The record committed before a retry's wait: its attempts so far."""
        return TaskRecord(
            self.checkpoint.id,
            self.spec.id,
            self.spec.node,
            "running",
            attempts=self.attempts,
            started_at=self.started,
            error=f"{type(error).__name__}: {error}" if error is not None else None,
        )


@dataclass(slots=True)
class Attempt:
    """One attempt at a task: its context and what the node returned or raised."""

    ctx: NodeContext
    result: Any = None
    error: BaseException | None = None


def finish(graph: GraphSpec, emitter: Emitter, attempt: Attempt, job: Job) -> Outcome:
    """The outcome of a task's last attempt (``task_end`` in debug mode)."""
    spec, exc = job.spec, attempt.error
    if isinstance(exc, PauseSignal):
        o = Outcome(spec, "paused", pauses=exc.pauses, nested=exc.records)
    elif isinstance(exc, FreezeSignal):
        o = Outcome(spec, "frozen", reason=exc.reason)
    elif exc is not None:
        o = Outcome(spec, "failed", error=exc)
    else:
        try:
            writes, routes = normalize(graph, spec.node, attempt.result)
            o = Outcome(spec, "completed", writes, routes)
        except GraphflowError as e:
            o = Outcome(spec, "failed", error=e)
    o.attempts = job.attempts
    o.started_at = job.started
    o.ended_at = now()
    if emitter.debug:
        data = {
            "task_id": spec.id,
            "status": o.status,
            "writes": as_update(graph.schema, o.writes),
        }
        emitter.emit("task_end", attempt.ctx.node, job.step, data)
    return o


def normalize(
    graph: GraphSpec, node: str, result: Any
) -> tuple[list[tuple[str, Any]], list[Any] | None]:
    """A node's return value as checked writes and, for a ``Command``, its routes."""
    routes: list[Any] | None = None
    if isinstance(result, Command):
        if result.goto is not None:
            routes = plan.normalize_targets(
                result.goto, graph.nodes, f"Command.goto of node {node!r}"
            )
        result = result.update
    if result is None:
        return [], routes
    schema = graph.schema
    if type(result) is dict:  # the usual result: skip the checks below
        return list(schema.checked_update(result, node).items()), routes
    if isinstance(result, Writes):
        return schema.checked_writes(result, node), routes
    from_model = isinstance(result, BaseModel) and schema.is_model
    if from_model:
        result = schema.model_update(result)
    if not isinstance(result, Mapping):
        raise InvalidUpdateError(
            f"node {node!r} returned {type(result).__name__}; return a dict of state keys, "
            "a Command or None",
            node=node,
        )
    return list(schema.checked_update(result, node, from_model=from_model).items()), routes
