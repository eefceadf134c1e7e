"""``TaskRunner``: running a step's tasks and turning what nodes return or raise into outcomes.

Async nodes run as tasks of a task group; sync nodes of a parallel step make their first
attempt in a process-wide thread pool that wakes the event loop once per batch of
completions (so siblings that finish together are committed together, not one fsync each);
a step's lone sync node runs inline on the sync API's private loop (a thread hop would cost
more than most nodes; not while the sync ``stream`` iterates, whose events must not wait
for the next node) and in a worker thread under the async API. Retries follow the node's
policies in one loop (``_run_task``), each retry's attempt count committed before its wait.
A task that finishes while siblings still run has its record committed at once; the step
(``StepTasks``) keeps the rest for the run to commit with the next checkpoint or the stop.
What a task carries between attempts and the outcome its last one comes to: ``attempts``.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.abc
import anyio.to_thread

from checkpoints.blocking import inline_io
from checkpoints.models import CheckpointRecord, TaskId, TaskRecord, TaskSpec
from graphflow._sync import call_inline, nodes_inline
from graphflow.engine.attempts import Attempt, Job, finish
from graphflow.engine.committer import Committer
from graphflow.engine.context import (
    FreezeSignal,
    NodeContext,
    PauseSignal,
    reset_current,
    set_current,
)
from graphflow.engine.events import Emitter
from graphflow.engine.outcomes import Outcome, StepTasks, Writes
from graphflow.engine.port import RunPort
from graphflow.errors import GraphflowError, node_exit
from graphflow.retry import wait_before_retry
from graphflow.spec import GraphSpec, NodeSpec

Subgraphs = Callable[[NodeSpec, Any, NodeContext], Awaitable["Writes"]]
"""Runs a subgraph node's child graph (``engine.subgraph``): its writes to the parent."""


class TaskRunner:
    """Runs the tasks of one namespace of a run (see the module docstring)."""

    def __init__(
        self,
        spec: GraphSpec,
        port: RunPort,
        committer: Committer | None,
        emitter: Emitter,
        subgraphs: Subgraphs,
        *,
        ns: str,
        path_prefix: str,
    ):
        self.spec = spec
        self.port = port
        self.committer = committer
        self.emitter = emitter
        self.subgraphs = subgraphs
        self.ns = ns
        self.path_prefix = path_prefix
        self._lock: anyio.Lock | None = None  # orders commits of sibling tasks

    async def run_step(
        self,
        specs: Sequence[TaskSpec],
        step: int,
        ck: CheckpointRecord,
        view: Any,
        memos: Mapping[TaskId, dict[str, Any]],
        records: Mapping[TaskId, TaskRecord],
        answers: Mapping[str, Any],
    ) -> StepTasks:
        """Run ``specs`` (tasks of ``ck``'s frontier) and return their outcomes."""
        out = StepTasks(ck)

        def job(s: TaskSpec) -> Job:
            rec = records.get(s.id)
            prior = rec.attempts if rec is not None else 0
            # A record left "running" is a retry that a crash interrupted: its budget goes on.
            spent = prior if rec is not None and rec.status == "running" else 0
            state = s.arg if s.has_arg else view
            return Job(s, step, state, dict(memos.get(s.id, {})), prior, spent, ck, answers)

        if len(specs) == 1:
            inline = inline_io.get() and nodes_inline.get()  # (not while a sync stream runs)
            o = await self._run_task(job(specs[0]), inline=inline)
            out.outcomes[o.spec.id] = o
            out.unstored.append(o)
            return out
        running = len(specs)

        async def finished(*done: Outcome) -> None:
            nonlocal running
            for o in done:
                out.outcomes[o.spec.id] = o
                out.unstored.append(o)
            running -= len(done)
            if running > 0 and self.committer is not None:  # siblings still run: commit now
                async with self._ordered():
                    batch = [o.record(ck.id) for o in out.unstored]
                    out.unstored = []
                    await self.committer.task_records(self.ns, batch)

        sync = [job(s) for s in specs if not self.spec.nodes[s.node].is_async]
        async with task_group() as tg:
            for s in specs:
                if self.spec.nodes[s.node].is_async:
                    tg.start_soon(self._async_job, job(s), finished)
            if sync:
                await self._sync_jobs(sync, finished, tg)
        return out

    def _ordered(self) -> anyio.Lock:
        if self._lock is None:
            self._lock = anyio.Lock()
        return self._lock

    async def _async_job(
        self, job: Job, finished: Callable[..., Awaitable[None]], first: Attempt | None = None
    ) -> None:
        await finished(await self._run_task(job, inline=False, first=first))

    async def _sync_jobs(
        self, jobs: list[Job], finished: Callable[..., Awaitable[None]], tg: anyio.abc.TaskGroup
    ) -> None:
        """First attempts of sync nodes in the node pool; a failed attempt that may be
        retried goes on in its own task of the step, so its wait holds up no sibling."""
        _ = self.port.token  # found here, on the loop's thread, for nodes' ctx.run_sync
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
                    ready.append(finish(self.spec, self.emitter, first, by_future[f]))
                else:
                    tg.start_soon(self._async_job, by_future[f], finished, first)
            if ready:
                await finished(*sorted(ready, key=lambda o: o.spec.node))

    # -- one task ------------------------------------------------------------------------------
    def _context(self, job: Job) -> NodeContext:
        return NodeContext(
            self.port,
            task_id=job.spec.id,
            node=f"{self.path_prefix}{job.spec.node}",
            step=job.step,
            answers=job.answers,
            memos=job.memos,
            attempt=job.attempts,
        )

    def _retry_wait(self, job: Job, error: BaseException | None) -> float | None:
        """Seconds to wait before retrying a failed attempt, or None: do not retry."""
        node = self.spec.nodes[job.spec.node]
        stops = PauseSignal | FreezeSignal | GraphflowError
        if not node.retry or error is None or isinstance(error, stops):
            return None
        return wait_before_retry(node.retry, error, job.attempts - job.prior + job.spent)

    async def _run_task(self, job: Job, *, inline: bool, first: Attempt | None = None) -> Outcome:
        """Run a task, retrying it by its node's policies; ``first``: its first attempt,
        made in the node pool."""
        node = self.spec.nodes[job.spec.node]
        while True:
            if first is not None:
                attempt, first = first, None
            else:
                job.attempts += 1
                ctx = self._context(job)
                self._task_start(ctx, job)
                attempt = Attempt(ctx)
                try:
                    attempt.result = await self._call(node, job.state, ctx, inline)
                except (PauseSignal, FreezeSignal) as e:
                    attempt.error = _untraced(e)
                except Exception as e:
                    attempt.error = e
            wait = self._retry_wait(job, attempt.error)
            if wait is None:
                return finish(self.spec, self.emitter, attempt, job)
            if self.committer is not None:  # its attempts, before the wait (a crash keeps them)
                async with self._ordered():
                    await self.committer.task_records(self.ns, [job.retrying(attempt.error)])
            await anyio.sleep(wait)

    def _thread_attempt(self, job: Job) -> Attempt:
        """One attempt of a sync node, run in a worker thread of the node pool."""
        node = self.spec.nodes[job.spec.node]
        job.attempts += 1
        ctx = self._context(job)
        self._task_start(ctx, job)
        attempt = Attempt(ctx)
        token = set_current(ctx)
        try:
            attempt.result = node.fn(job.state, ctx) if node.takes_ctx else node.fn(job.state)
        except (PauseSignal, FreezeSignal) as e:
            attempt.error = _untraced(e)
        except Exception as e:
            attempt.error = e
        except (SystemExit, KeyboardInterrupt) as e:  # (as in _call: the task fails)
            attempt.error = node_exit(e, on_thread=True) or e
            attempt.error.__cause__ = e
        finally:
            reset_current(token)
        return attempt

    async def _call(self, node: NodeSpec, state: Any, ctx: NodeContext, inline: bool) -> Any:
        if node.subgraph is not None:
            return await self.subgraphs(node, state, ctx)
        fn = node.fn
        args = (state, ctx) if node.takes_ctx else (state,)
        token = set_current(ctx)
        try:
            if node.is_async:
                return await fn(*args)
            if inline:
                return call_inline(fn, *args)
            return await anyio.to_thread.run_sync(fn, *args)
        except (SystemExit, KeyboardInterrupt) as e:  # (the task fails: errors.node_exit)
            failure = node_exit(e, on_thread=not (node.is_async or inline))
            if failure is None:
                raise  # the user's Ctrl-C
            raise failure from e
        finally:
            reset_current(token)

    def _task_start(self, ctx: NodeContext, job: Job) -> None:
        if self.emitter.debug:
            data = {"task_id": job.spec.id, "attempt": ctx.attempt}
            self.emitter.emit("task_start", ctx.node, job.step, data)


S = TypeVar("S", bound=BaseException)


def _untraced(sig: S) -> S:
    """A pause without its traceback. A pause is control flow, not an error: its traceback
    would reference the frame that caught it, whose local holds the signal, a reference
    cycle that keeps the whole run (state, records, context) alive until the garbage
    collector runs, on every pause."""
    return sig.with_traceback(None)


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


_POOL: list[ThreadPoolExecutor] = []


def _node_pool() -> ThreadPoolExecutor:
    """The process-wide pool sync nodes of parallel steps make their first attempt in."""
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(max_workers=32, thread_name_prefix="graphflow-node"))
    return _POOL[0]


def _wait_some(
    pending: set[Future[Attempt]],
) -> tuple[set[Future[Attempt]], set[Future[Attempt]]]:
    done, rest = wait(pending, return_when=FIRST_COMPLETED)
    return set(done), set(rest)
