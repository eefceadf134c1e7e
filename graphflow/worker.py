"""``Worker``: resumes runnable threads under their leases (API.md, "Worker").

A thread is runnable when the store's runnable index holds a due mark for it
(``Checkpointer.list_runnable``): ``submit`` marks a paused thread whose pending pauses are
all answered, in the transaction that stores the answers; a run that pauses on a deferred
call marks it due ``defer_retry`` seconds later; and the worker itself marks threads left
``running`` by an owner whose lease expired or who is known dead (recovery makes a thread
runnable again rather than running it in place). A run's commit that changes the thread's
status removes the mark.

Claiming is one transaction of the store (``claim_runnable``: the mark is there and the
lease is free, then the lease is taken), so any number of workers, in any number of
processes, never run one thread twice at once; a thread another run holds is ``busy``. The
run itself is the engine's (``engine.execute``) under the claimed lease, renewed every third
of its TTL by the process's lease keeper, and given up by the run's last commit (or
released here after an error). Finished work is never redone and an approved tool call runs
at most once (DESIGN.md promises 1 and 4), whichever worker resumes the thread.

A stop (``stop()``, SIGINT or SIGTERM in ``run_forever``) claims nothing more; runs in
flight end after their current step, their threads left ``running`` and marked runnable
for the next worker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import signal
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from checkpoints.base import Checkpointer
from checkpoints.errors import LeaseHeldError
from checkpoints.lease import lease_free
from checkpoints.models import RunnableMark, ThreadId, now
from graphflow.compiled import CompiledGraph
from graphflow.engine.execute import execute
from graphflow.engine.outcomes import RunStopped
from graphflow.errors import GraphMismatchError, InvalidArgumentError, ThreadBusyError

__all__ = ["Worker", "WorkerResult"]

WorkerStatus = Literal["done", "paused", "failed", "busy"]
"""What became of a thread a worker tried: ``done`` (its run finished), ``paused`` (it waits
for answers again; or the worker stopped it between steps, which ``error`` says: it waits on
its pending work, still runnable), ``failed`` (its run raised, or the worker lacks its
graph: ``error`` says which), ``busy`` (another run held it, or it was no longer runnable
when claimed)."""


@dataclass(frozen=True, slots=True)
class WorkerResult:
    """One thread a worker resumed or tried to claim."""

    thread_id: str
    status: WorkerStatus
    error: str | None = None
    graph_name: str | None = None
    reason: str | None = None
    """Why the thread was runnable: ``answered``, ``deferred`` or ``recovery``."""

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready dict (``graphflow worker --json``)."""
        return dataclasses.asdict(self)


class Worker:
    """Resumes the runnable threads of ``graphs`` (one compiled graph or a list).

    Args:
        graphs: the graphs whose threads it runs, matched by the graph name stored with each
            thread; each needs a checkpointer (graphs on one store are served together).
        concurrency: threads run at once in this process.
        lease_seconds: the lease TTL of the threads it runs (default: each graph's).
        poll_interval: seconds ``run_forever`` waits when nothing is runnable.
        batch: how many marks are read from the index at a time.
        on_result: called with each ``WorkerResult`` as it is made (progress output).
    """

    def __init__(
        self,
        graphs: CompiledGraph | Sequence[CompiledGraph],
        *,
        concurrency: int = 1,
        lease_seconds: float | None = None,
        poll_interval: float = 1.0,
        batch: int = 100,
        on_result: Callable[[WorkerResult], None] | None = None,
    ) -> None:
        listed = [graphs] if isinstance(graphs, CompiledGraph) else list(graphs)
        if not listed or not all(isinstance(g, CompiledGraph) for g in listed):
            raise InvalidArgumentError(
                f"Worker needs a compiled graph or a list of them, not {graphs!r}"
            )
        _positive("concurrency", concurrency, integer=True)
        _positive("batch", batch, integer=True)
        _positive("poll_interval", poll_interval)
        if lease_seconds is not None:
            _positive("lease_seconds", lease_seconds)
        self._stores: list[tuple[Checkpointer, dict[str | None, CompiledGraph]]] = []
        for g in listed:
            if g.checkpointer is None:
                raise InvalidArgumentError(
                    f"graph {g.name!r} has no checkpointer: a worker resumes stored threads "
                    "(compile(checkpointer=...))"
                )
            names = self._graphs_of(g.checkpointer)
            if g.name in names:
                raise InvalidArgumentError(
                    f"two graphs named {g.name!r} on one store: threads are matched to graphs "
                    "by name (compile(name=...))"
                )
            names[g.name] = g
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.batch = batch
        self.on_result = on_result
        self.id = f"{socket.gethostname()}:{os.getpid()}:w{os.urandom(4).hex()}"
        """This worker's id (fresh per worker, so per process start); its lease owners are
        ``<id>-<n>``, and they read as this host and process (dead-owner takeover)."""
        self._claims = itertools.count()
        self._claimed = 0  # threads claimed so far (run_forever sleeps when none was)
        self._stopping = False
        self._wake: anyio.Event | None = None
        self._loop: tuple[int, anyio.lowlevel.EventLoopToken] | None = None

    def _graphs_of(self, store: Checkpointer) -> dict[str | None, CompiledGraph]:
        for s, graphs in self._stores:
            if s is store:
                return graphs
        graphs = {}
        self._stores.append((store, graphs))
        return graphs

    # -- one pass --------------------------------------------------------------------------
    async def run_once(self, *, handle_signals: bool = False) -> list[WorkerResult]:
        """Resume every thread that is runnable now (``concurrency`` at a time); one result
        per thread resumed or tried, in the order the index listed them. With
        ``handle_signals`` (on the main thread), SIGINT or SIGTERM stop it as ``stop()``
        does, and it returns what it did."""
        if not handle_signals:
            return await self._pass()
        async with anyio.create_task_group() as tg:
            await tg.start(self._watch_signals)
            results = await self._pass()
            tg.cancel_scope.cancel()
        return results

    async def _pass(self) -> list[WorkerResult]:
        results: list[WorkerResult] = []
        for store, graphs in self._stores:
            await next(iter(graphs.values()))._ready()
            await self._recover(store, graphs)
            tried: set[str] = set()
            limiter = anyio.CapacityLimiter(self.concurrency)
            while not self._stopping:
                listed = await store.list_runnable(limit=len(tried) + self.batch)
                fresh = [m for m in listed if m.thread_id not in tried]
                if not fresh:
                    break
                slots: list[WorkerResult | None] = [None] * len(fresh)
                async with anyio.create_task_group() as tg:
                    for i, mark in enumerate(fresh):
                        tried.add(mark.thread_id)
                        tg.start_soon(self._one, store, graphs, mark, limiter, slots, i)
                results += [r for r in slots if r is not None]
        return results

    async def _recover(self, store: Checkpointer, graphs: Mapping[str | None, Any]) -> None:
        """Mark runnable the threads of these graphs left ``running`` with a lease that
        expired or whose owner is known dead (the status index, then each thread's row)."""
        for info in await store.list_threads("running"):
            if info.graph_name not in graphs:
                continue  # another worker's: left alone
            th = await store.get_thread(ThreadId(info.thread_id))
            if th is None or th.status != "running" or th.head is None:
                continue
            owner, expires = th.lease_owner, th.lease_expires_at
            # (whether a local owner is dead reads /proc: off the event loop)
            free = await anyio.to_thread.run_sync(lease_free, owner, expires, "", now())
            if free:
                await store.mark_runnable(
                    th.thread_id, reason="recovery", if_updated_at=th.updated_at
                )

    async def _one(
        self,
        store: Checkpointer,
        graphs: Mapping[str | None, CompiledGraph],
        mark: RunnableMark,
        limiter: anyio.CapacityLimiter,
        slots: list[WorkerResult | None],
        i: int,
    ) -> None:
        tid, name = mark.thread_id, mark.graph_name
        graph = graphs.get(name)
        found: WorkerResult | None = None
        if graph is None:
            have = ", ".join(sorted(graph_label(n) for n in graphs))
            found = WorkerResult(
                tid,
                "failed",
                f"thread {tid!r} is of {graph_label(name)}, which this worker does not have "
                f"(it has {have}): left as it is",
                name,
                mark.reason,
            )
        else:
            async with limiter:
                if not self._stopping:
                    found = await self._resume(store, graph, mark)
        slots[i] = found
        if found is not None and self.on_result is not None:
            self.on_result(found)

    async def _resume(
        self, store: Checkpointer, graph: CompiledGraph, mark: RunnableMark
    ) -> WorkerResult:
        """Claim one thread and run it under the claimed lease."""
        tid = mark.thread_id
        owner = f"{self.id}-{next(self._claims):x}"
        ttl = self.lease_seconds if self.lease_seconds is not None else graph.spec.lease_ttl

        def result(status: WorkerStatus, error: str | None = None) -> WorkerResult:
            return WorkerResult(tid, status, error, mark.graph_name, mark.reason)

        try:
            claimed = await store.claim_runnable(tid, owner, ttl)
        except LeaseHeldError as e:
            return result("busy", f"thread {tid!r} is held by {e.owner!r}")
        if claimed is None:
            return result("busy", f"thread {tid!r} is no longer runnable (another worker took it)")
        self._claimed += 1
        try:
            try:
                run = await execute(
                    graph.spec,
                    store,
                    tid,
                    None,
                    evidence=graph.evidence,
                    owner=owner,
                    lease_ttl=ttl,
                    should_stop=lambda: self._stopping,
                )
            except BaseException:
                # A run gives its lease up as it ends, unless it failed before it held it:
                # the claim's lease is given up here (a no-op once the run gave it up).
                with anyio.CancelScope(shield=True):
                    await store.release_lease(tid, owner)
                raise
        except RunStopped:
            th = await store.get_thread(tid)
            if th is not None:  # left paused on its pending work: the next worker goes on
                await store.mark_runnable(tid, reason="recovery", if_updated_at=th.updated_at)
            return result(
                "paused",
                f"thread {tid!r} stopped between steps (the worker stopped); it stays "
                "runnable, and the next worker continues it",
            )
        except ThreadBusyError as e:
            return result("busy", str(e))
        except GraphMismatchError as e:  # another (unnamed) graph's: still runnable, for it
            return result("failed", f"{e}: left as it is")
        except Exception as e:
            await store.unmark_runnable(claimed)  # not again and again: it needs a person
            return result("failed", f"{type(e).__name__}: {e}")
        # A run that ended done removed the mark with its last commit (which changed the
        # thread's status); one that changed nothing (its answers did not resolve its
        # pauses) must not be picked up again and again. (W8: a store call fewer per thread.)
        if run.status != "done":
            await store.unmark_runnable(claimed)
        return result(run.status)

    # -- forever -----------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask ``run_forever`` to return: nothing more is claimed, runs in flight stop after
        their current step (their threads stay runnable), leases are released. Safe to call
        from any thread (a node's, a signal handler's)."""
        self._stopping = True
        wake, loop = self._wake, self._loop
        if wake is None or loop is None:
            return
        if threading.get_ident() == loop[0]:
            wake.set()
        else:  # the event belongs to the worker's loop: set it there
            with contextlib.suppress(RuntimeError):  # (that loop has ended)
                anyio.from_thread.run_sync(wake.set, token=loop[1])

    async def arun_forever(self, *, handle_signals: bool = True) -> None:
        """Resume runnable threads until ``stop()`` (or SIGINT/SIGTERM, when
        ``handle_signals`` and on the main thread), polling every ``poll_interval``."""
        self._stopping = False
        self._wake = anyio.Event()
        self._loop = (threading.get_ident(), anyio.lowlevel.current_token())
        async with anyio.create_task_group() as tg:
            if handle_signals:
                await tg.start(self._watch_signals)
            while not self._stopping:
                claims = self._claimed
                await self.run_once()
                if self._claimed == claims and not self._stopping:  # nothing was runnable
                    with anyio.move_on_after(self.poll_interval):
                        await self._wake.wait()
            tg.cancel_scope.cancel()
        self._wake = self._loop = None

    async def _watch_signals(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            task_status.started()
            async for _ in signals:
                self.stop()
                return

    def run_forever(self) -> None:
        """``arun_forever`` on an event loop of its own (sync); returns once stopped."""
        anyio.run(self.arun_forever)


def _positive(name: str, value: Any, *, integer: bool = False) -> None:
    kind = int if integer else (int, float)
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        what = "a positive int" if integer else "a positive number"
        raise InvalidArgumentError(f"Worker {name} must be {what}, not {value!r}")


def graph_label(name: str | None) -> str:
    """A graph as a message names it: ``graph 'x'``, or ``an unnamed graph``."""
    return f"graph {name!r}" if name is not None else "an unnamed graph"
