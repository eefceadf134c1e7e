"""Running a step's tasks: async nodes in a task group, sync nodes in worker threads.

``TaskRunner`` is the part of a run (``engine.loop.Run``) that calls nodes and turns what they
return or raise into outcomes; the run decides what to commit.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from pydantic import BaseModel

from checkpoints.blocking import inline_io
from checkpoints.models import (
    CheckpointRecord,
    CommitBatch,
    PauseRecord,
    TaskId,
    TaskRecord,
    TaskSpec,
    now,
)
from graphflow.engine import plan
from graphflow.engine.context import (
    NodeContext,
    PauseRequest,
    PauseSignal,
    reset_current,
    set_current,
)
from graphflow.errors import GraphflowError, InvalidUpdateError
from graphflow.retry import wait_before_retry
from graphflow.types import Command

if TYPE_CHECKING:
    from checkpoints import Checkpointer
    from graphflow.builder import NodeSpec
    from graphflow.compiled import CompiledGraph
    from graphflow.engine.loop import Run


@dataclass(slots=True)
class Outcome:
    """What running one task produced."""

    spec: TaskSpec
    status: str
    writes: list[tuple[str, Any]] = field(default_factory=list)
    routes: list[Any] | None = None
    pauses: list[PauseRequest] = field(default_factory=list)
    nested: list[PauseRecord] = field(default_factory=list)
    error: BaseException | None = None
    attempts: int = 1
    started_at: float = 0.0
    ended_at: float = 0.0


def _untraced(sig: PauseSignal) -> PauseSignal:
    """A pause without its traceback. A pause is control flow, not an error: its traceback
    would reference the frame that caught it, whose local holds the signal, a reference
    cycle that keeps the whole run (state, records, context) alive until the garbage
    collector runs, on every pause."""
    return sig.with_traceback(None)


class TaskRunner:
    """Runs tasks for a ``Run`` (which provides the attributes declared here)."""

    graph: CompiledGraph
    store: Checkpointer | None
    ns: str
    values: dict[str, Any]
    sink: Any
    mode: str
    answers: dict[str, Any]
    _unflushed: list[TaskRecord]
    _unrecorded: list[Outcome]
    _running: int
    _flush_lock: anyio.Lock | None

    def _emit(self, type_: str, node: str | None, step: int | None, data: Any) -> None:
        raise NotImplementedError

    def _node_path(self, node: str) -> str:
        raise NotImplementedError

    async def _commit(self, batch: CommitBatch, *, last: bool = False) -> None:
        raise NotImplementedError

    async def _run_tasks(
        self,
        specs: list[TaskSpec],
        step: int,
        ck: CheckpointRecord,
        memos: Mapping[TaskId, dict[str, Any]],
        records: Mapping[TaskId, TaskRecord],
        outcomes: dict[TaskId, Outcome],
    ) -> None:
        """Run a step's tasks: async nodes as tasks of a task group, sync nodes in threads.

        A step with a single task calls a sync node directly on the sync API's private
        event loop (``inline_io``): a thread hop costs more than most nodes, and nothing
        else shares that loop. On the caller's loop (the async API) it runs in a worker
        thread, so the loop never waits for the node.
        """
        view = self.graph.schema.view(self.values) if any(not s.has_arg for s in specs) else None

        def job(spec: TaskSpec) -> _Job:
            rec = records.get(spec.id)
            prior = rec.attempts if rec is not None else 0
            # A record left "running" is a retry that a crash interrupted: its budget goes on.
            spent = prior if rec is not None and rec.status == "running" else 0
            return _Job(spec, step, view, dict(memos.get(spec.id, {})), prior, spent, ck)

        if len(specs) == 1:
            self._running = 1
            o = await self._run_task(job(specs[0]), inline=inline_io.get())
            outcomes[o.spec.id] = o
            self._running = 0
            self._unrecorded.append(o)  # its record is made only if the step needs it
            return
        self._running = len(specs)

        async def finished(*done: Outcome) -> None:
            for o in done:
                outcomes[o.spec.id] = o
                self._unflushed.append(self._record(ck, o))
            self._running -= len(done)
            if self._running > 0:
                await self._flush()

        sync = [s for s in specs if not self.graph.nodes[s.node].is_async]
        async with task_group() as tg:
            for spec in specs:
                if self.graph.nodes[spec.node].is_async:
                    tg.start_soon(self._async_job, job(spec), finished)
            if sync:
                await self._sync_jobs([job(s) for s in sync], finished, tg)

    async def _async_job(
        self,
        job: _Job,
        finished: Callable[..., Awaitable[None]],
        first: _Attempt | None = None,
    ) -> None:
        await finished(await self._run_task(job, inline=False, first=first))

    async def _sync_jobs(
        self,
        jobs: list[_Job],
        finished: Callable[..., Awaitable[None]],
        tg: anyio.abc.TaskGroup,
    ) -> None:
        """Run the first attempts of sync nodes in a thread pool, waking the loop once per
        batch of completions; a failed attempt that may be retried goes on in its own task
        of the step (``_run_task``), so its wait holds up no sibling."""
        pool = _node_pool()
        by_future = {
            pool.submit(contextvars.copy_context().run, self._thread_attempt, j): j for j in jobs
        }
        pending = set(by_future)
        while pending:
            done, pending = await anyio.to_thread.run_sync(
                _wait_some, pending, abandon_on_cancel=True
            )
            ready: list[Outcome] = []
            for f in done:
                first = f.result()
                if self._retry_wait(by_future[f], first.error) is None:
                    ready.append(self._finish(first, by_future[f]))
                else:
                    tg.start_soon(self._async_job, by_future[f], finished, first)
            if ready:
                await finished(*sorted(ready, key=lambda o: o.spec.node))

    async def _flush(self) -> None:
        """Commit the records of tasks that finished while siblings still run."""
        if self._flush_lock is None:
            self._flush_lock = anyio.Lock()
        async with self._flush_lock:
            if not self._unflushed:
                return
            batch, self._unflushed = self._unflushed, []
            await self._commit(CommitBatch(ns=self.ns, tasks=batch))

    def _record(self, ck: CheckpointRecord, o: Outcome) -> TaskRecord:
        return TaskRecord(
            ck.id,
            o.spec.id,
            o.spec.node,
            o.status,  # type: ignore[arg-type]
            attempts=o.attempts,
            started_at=o.started_at,
            ended_at=o.ended_at,
            error=f"{type(o.error).__name__}: {o.error}" if o.error is not None else None,
            writes=o.writes if o.status == "completed" else None,
            routes=o.routes,
        )

    def _context(self, job: _Job) -> NodeContext:
        run: Run = self  # type: ignore[assignment]  # a TaskRunner is always the base of a Run
        return NodeContext(
            run,
            task_id=job.spec.id,
            node=self._node_path(job.spec.node),
            step=job.step,
            answers=self.answers,
            memos=job.memos,
            attempt=job.attempts,
        )

    def _retry_wait(self, job: _Job, error: BaseException | None) -> float | None:
        """Seconds to wait before retrying a failed attempt, or None: do not retry."""
        node = self.graph.nodes[job.spec.node]
        if not node.retry or error is None or isinstance(error, PauseSignal | GraphflowError):
            return None
        return wait_before_retry(node.retry, error, job.attempts - job.prior + job.spent)

    async def _run_task(self, job: _Job, *, inline: bool, first: _Attempt | None = None) -> Outcome:
        """Run a task, retrying it by its node's policy; ``first``: its first attempt, made
        in the node pool. The one retry loop: each retry's attempt count is committed
        before the wait, so a crash does not reset the budget."""
        node = self.graph.nodes[job.spec.node]
        state = job.spec.arg if job.spec.has_arg else job.view
        while True:
            if first is not None:
                attempt, first = first, None
            else:
                job.attempts += 1
                ctx = self._context(job)
                self._task_start(ctx, job)
                attempt = _Attempt(ctx)
                try:
                    attempt.result = await self._call(node, state, ctx, inline)
                except PauseSignal as e:
                    attempt.error = _untraced(e)
                except Exception as e:
                    attempt.error = e
            wait = self._retry_wait(job, attempt.error)
            if wait is None:
                return self._finish(attempt, job)
            await self._record_attempt(job, attempt.error)
            await anyio.sleep(wait)

    async def _record_attempt(self, job: _Job, error: BaseException | None) -> None:
        """Commit a task's attempts before it waits to retry (its record stays "running")."""
        if self.store is None:
            return
        rec = TaskRecord(
            job.checkpoint.id,
            job.spec.id,
            job.spec.node,
            "running",
            attempts=job.attempts,
            started_at=job.started,
            error=f"{type(error).__name__}: {error}" if error is not None else None,
        )
        if self._flush_lock is None:
            self._flush_lock = anyio.Lock()
        async with self._flush_lock:  # (sibling records may be committed meanwhile)
            await self._commit(CommitBatch(ns=self.ns, tasks=[rec]))

    def _thread_attempt(self, job: _Job) -> _Attempt:
        """One attempt of a sync node, run in a worker thread of the node pool."""
        node = self.graph.nodes[job.spec.node]
        state = job.spec.arg if job.spec.has_arg else job.view
        job.attempts += 1
        ctx = self._context(job)
        self._task_start(ctx, job)
        attempt = _Attempt(ctx)
        token = set_current(ctx)
        try:
            attempt.result = node.fn(state, ctx) if node.takes_ctx else node.fn(state)
        except PauseSignal as e:
            attempt.error = _untraced(e)
        except Exception as e:
            attempt.error = e
        finally:
            reset_current(token)
        return attempt

    def _task_start(self, ctx: NodeContext, job: _Job) -> None:
        if self.sink is not None and self.mode == "debug":
            data = {"task_id": job.spec.id, "attempt": ctx.attempt}
            self._emit("task_start", ctx.node, job.step, data)

    def _finish(self, attempt: _Attempt, job: _Job) -> Outcome:
        """The outcome of a task's last attempt."""
        spec, exc = job.spec, attempt.error
        if isinstance(exc, PauseSignal):
            o = Outcome(spec, "paused", pauses=exc.pauses, nested=exc.records)
        elif exc is not None:
            o = Outcome(spec, "failed", error=exc)
        else:
            try:
                writes, routes = self._normalize(spec.node, attempt.result)
                o = Outcome(spec, "completed", writes, routes)
            except GraphflowError as e:
                o = Outcome(spec, "failed", error=e)
        o.attempts = job.attempts
        o.started_at = job.started
        o.ended_at = now()
        if self.sink is not None and self.mode == "debug":
            data = {"task_id": spec.id, "status": o.status, "writes": self._as_update(o.writes)}
            self._emit("task_end", attempt.ctx.node, job.step, data)
        return o

    def _as_update(self, writes: Sequence[tuple[str, Any]]) -> dict[str, Any]:
        """A task's writes as one update: repeated keys (a subgraph's) through the reducer."""
        out: dict[str, Any] = {}
        for k, v in writes:
            ch = self.graph.schema.channels.get(k)
            reducer = ch.reducer if ch is not None else None
            out[k] = reducer(out[k], v) if k in out and reducer is not None else v
        return out

    async def _call(self, node: NodeSpec, state: Any, ctx: NodeContext, inline: bool) -> Any:
        fn = node.fn
        args = (state, ctx) if node.takes_ctx else (state,)
        token = set_current(ctx)
        try:
            if node.is_async:
                return await fn(*args)
            if inline:
                return fn(*args)
            return await anyio.to_thread.run_sync(fn, *args)
        finally:
            reset_current(token)

    def _normalize(self, node: str, result: Any) -> tuple[list[tuple[str, Any]], list[Any] | None]:
        routes: list[Any] | None = None
        if isinstance(result, Command):
            if result.goto is not None:
                routes = plan.normalize_targets(
                    result.goto, self.graph.nodes, f"Command.goto of node {node!r}"
                )
            result = result.update
        if result is None:
            return [], routes
        schema = self.graph.schema
        if type(result) is dict:  # the usual result: skip the checks below
            return list(schema.checked_update(result, node).items()), routes
        if isinstance(result, Writes):
            return schema.checked_writes(result, node), routes
        if isinstance(result, BaseModel) and schema.is_model:
            result = schema.model_update(result)
        if not isinstance(result, Mapping):
            raise InvalidUpdateError(
                f"node {node!r} returned {type(result).__name__}; return a dict of state keys, "
                "a Command or None",
                node=node,
            )
        return list(schema.checked_update(result, node).items()), routes

    # -- ending a step ------------------------------------------------------------------------


class Writes(list[tuple[str, Any]]):
    """A node result holding several writes, possibly to one key (a subgraph's output)."""


@asynccontextmanager
async def task_group() -> AsyncIterator[anyio.abc.TaskGroup]:
    """A task group that re-raises a lone error as itself, not as an ``ExceptionGroup``.

    Our task groups host sibling tasks of a step, whose own errors are caught;
    users should see the error a run raised, typed as documented.
    """
    try:
        async with anyio.create_task_group() as tg:
            yield tg
    except BaseExceptionGroup as group:
        errors = _leaves(group)
        if len(errors) == 1:
            raise errors[0] from errors[0].__cause__
        raise


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


@dataclass(slots=True)
class _Job:
    """What a task needs to run: its spec, step, the state it sees and its memos, and its
    attempts (``prior``: made by earlier runs; ``spent``: of those, the ones that count
    against this run's retry budget)."""

    spec: TaskSpec
    step: int
    view: Any
    memos: dict[str, Any]
    prior: int
    spent: int
    checkpoint: CheckpointRecord
    attempts: int = 0
    started: float = field(default_factory=now)

    def __post_init__(self) -> None:
        self.attempts = self.prior


@dataclass(slots=True)
class _Attempt:
    """One attempt at a task: its context and what the node returned or raised."""

    ctx: NodeContext
    result: Any = None
    error: BaseException | None = None


_POOL: list[ThreadPoolExecutor] = []


def _node_pool() -> ThreadPoolExecutor:
    """The process-wide pool sync nodes of parallel steps run in."""
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(max_workers=32, thread_name_prefix="graphflow-node"))
    return _POOL[0]


def _wait_some(
    pending: set[Future[_Attempt]],
) -> tuple[set[Future[_Attempt]], set[Future[_Attempt]]]:
    done, rest = wait(pending, return_when=FIRST_COMPLETED)
    return set(done), set(rest)
