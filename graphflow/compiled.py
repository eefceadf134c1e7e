"""``CompiledGraph``: the runnable graph and its public API (API.md, "Running" on).

A compiled graph is a ``GraphSpec`` (what the engine runs) and a checkpointer. Every method
checks its arguments, sets the store up, and calls a public engine function
(``engine.execute``, ``engine.history``, ``engine.update``, ``engine.answering``,
``engine.threads``); each sync
method is generated from its async twin (``_sync``).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any, get_args

import anyio

from checkpoints.base import Checkpointer, check_listing
from checkpoints.errors import CorruptCheckpointError
from checkpoints.models import DecisionRecord, ThreadId, ThreadInfo, ThreadStatus
from graphflow import _sync, arguments, builder
from graphflow.audit import AuditEntry, audit, check_evidence, open_existing, resolve_log
from graphflow.drawing import draw_mermaid
from graphflow.engine import answering, answers, history, threads, update
from graphflow.engine.execute import execute
from graphflow.engine.pauses import UNSET
from graphflow.errors import InvalidArgumentError, ThreadNotFoundError
from graphflow.evidence import EvidenceLog
from graphflow.spec import GraphSpec
from graphflow.types import Event, Pause, RunResult, StateSnapshot, StreamMode

STREAM_MODES: tuple[str, ...] = get_args(StreamMode)


NO_THREAD: Any = object()  # (``_ready`` of a call that names no thread)


class CompiledGraph:
    """A validated graph, ready to run. Build it with ``StateGraph.compile()``."""

    def __init__(
        self,
        spec: GraphSpec,
        checkpointer: Checkpointer | None = None,
        *,
        evidence: EvidenceLog | bool | None = None,
    ):
        ttl = spec.lease_ttl
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl):
            ttl = -1.0
        if ttl <= 0:
            raise InvalidArgumentError(
                f"lease_ttl must be a positive number of seconds, not {spec.lease_ttl!r}: a "
                "run holds its thread's lease for that long after its last renewal"
            )
        retry = spec.defer_retry
        if isinstance(retry, bool) or not isinstance(retry, int | float) or not retry >= 0:
            raise InvalidArgumentError(
                f"defer_retry must be a number of seconds >= 0, not {retry!r}: a deferred "
                "call is due for re-evaluation that long after its thread paused"
            )
        self.spec = spec
        self.checkpointer = checkpointer
        self._evidence = check_evidence(evidence)
        self._setup_done = False
        open_existing(self._evidence, checkpointer, self)

    @property
    def evidence(self) -> EvidenceLog | None:
        """The evidence log the graph writes to (None: ``compile(evidence=False)``); the
        default one is opened when first asked for (``graphflow.audit``)."""
        return resolve_log(self._evidence, self.checkpointer, self)

    @property
    def name(self) -> str | None:
        """The graph's name (stored with its threads)."""
        return self.spec.name

    # -- helpers ------------------------------------------------------------------------------
    async def _ready(self, thread_id: Any = NO_THREAD) -> Checkpointer:
        """The store, set up; a damaged file's error names the thread asked about (checked
        first: ``arguments.thread_id``)."""
        thread_id = None if thread_id is NO_THREAD else arguments.thread_id(thread_id)
        store = self.checkpointer
        if store is None:
            raise InvalidArgumentError(
                "this graph has no checkpointer: compile(checkpointer=...) to keep threads"
            )
        if not self._setup_done:
            try:
                await store.setup()
            except CorruptCheckpointError as e:
                if thread_id is None or e.thread_id is not None:
                    raise
                raise CorruptCheckpointError(
                    f"thread {thread_id!r}: {e}", thread_id=thread_id
                ) from e
            self._setup_done = True
        return store

    def _thread_id(self, thread_id: str | None) -> str:
        if thread_id is None:
            if self.checkpointer is not None:
                raise InvalidArgumentError("thread_id is required when a checkpointer is set")
            return f"run-{uuid.uuid4().hex}"
        return arguments.thread_id(thread_id)

    @staticmethod
    def _check_limit(recursion_limit: Any) -> int:
        if (
            isinstance(recursion_limit, bool)
            or not isinstance(recursion_limit, int)
            or recursion_limit < 1
        ):
            raise InvalidArgumentError(
                f"recursion_limit must be a positive int (supersteps per run), not "
                f"{recursion_limit!r}"
            )
        return recursion_limit

    # -- running ------------------------------------------------------------------------------
    async def ainvoke(
        self,
        input: Any,
        *,
        thread_id: str | None = None,
        decisions: Mapping[str, Any] | None = None,
        resume: Any = UNSET,
        checkpoint_id: str | None = None,
        principal: Any = None,
        recursion_limit: int = 100,
    ) -> RunResult:
        """Run the graph until it finishes or pauses (see API.md, "Running")."""
        return await self._execute(
            input, thread_id, decisions, resume, checkpoint_id, principal, recursion_limit
        )

    async def _execute(
        self,
        input: Any,
        thread_id: str | None,
        decisions: Mapping[str, Any] | None,
        resume: Any,
        checkpoint_id: str | None,
        principal: Any,
        recursion_limit: int,
        sink: Any = None,
        mode: StreamMode = "values",
    ) -> RunResult:
        tid = self._thread_id(thread_id)
        arguments.principal(principal)
        checked = answers.check_decisions(decisions)
        limit = self._check_limit(recursion_limit)
        store = await self._ready(tid) if self.checkpointer is not None else None
        return await execute(
            self.spec,
            store,
            tid,
            input,
            resume=resume,
            decisions=checked,
            checkpoint_id=checkpoint_id,
            principal=principal,
            recursion_limit=limit,
            sink=sink,
            mode=mode,
            evidence=self.evidence,
        )

    async def astream(
        self,
        input: Any,
        *,
        thread_id: str | None = None,
        mode: StreamMode = "values",
        decisions: Mapping[str, Any] | None = None,
        resume: Any = UNSET,
        checkpoint_id: str | None = None,
        principal: Any = None,
        recursion_limit: int = 100,
    ) -> AsyncIterator[Event]:
        """Run the graph and yield events as they happen (see API.md, "Events"). To stop
        early, close it (``contextlib.aclosing``): the run stops after its step."""
        if mode not in STREAM_MODES:
            raise InvalidArgumentError(
                f"stream mode must be values, updates or debug, not {mode!r}"
            )
        self._check_limit(recursion_limit)
        send, recv = anyio.create_memory_object_stream[Event](math.inf)
        failure: list[BaseException] = []

        async def produce() -> None:
            async with send:
                try:
                    await self._execute(
                        input,
                        thread_id,
                        decisions,
                        resume,
                        checkpoint_id,
                        principal,
                        recursion_limit,
                        send,
                        mode,
                    )
                except Exception as e:
                    failure.append(e)

        closed = False
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            try:
                async with recv:
                    async for ev in recv:
                        yield ev
            except GeneratorExit:  # closed by its reader (aclose): the run, reader gone,
                closed = True  # stops after its step; the task group waits for that
        if failure and not closed:
            raise failure[0]

    # -- pauses, threads, decisions ----------------------------------------------------------
    async def apending_pauses(self, thread_id: str) -> list[Pause]:
        """The pauses a thread waits on (empty when it is not paused), each answered if
        ``submit`` stored an answer that no run has applied yet."""
        return await answering.pending_pauses(await self._ready(thread_id), thread_id)

    async def alist_threads(
        self,
        status: ThreadStatus | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
    ) -> list[ThreadInfo]:
        """Threads (of one status), from an index, most recently updated first; with ``limit``
        or ``after``, a page in thread-id order after the cursor (``Checkpointer.list_threads``)."""
        if (bad := check_listing(status, limit, after)) is not None:
            raise InvalidArgumentError(str(bad))
        store = await self._ready()
        return await store.list_threads(status, limit=limit, after=after)

    async def acount_threads(self, status: ThreadStatus | None = None) -> int:
        """How many threads the store holds (of one status), from its counts (no scan)."""
        if (bad := check_listing(status)) is not None:
            raise InvalidArgumentError(str(bad))
        store = await self._ready()
        return await store.count_threads(status)

    async def asubmit(
        self,
        thread_id: str,
        *,
        decisions: Mapping[str, Any] | None = None,
        resume: Any = UNSET,
        by: Any = None,
        reason: str | None = None,
    ) -> tuple[DecisionRecord, ...]:
        """Record answers durably without running; the next run of the thread applies them.

        The same rules as ``invoke`` (``graphflow.engine.answers``): tool confirmations are
        answered by ``decisions=`` only, interrupts and gates by ``resume=``. Returns the
        decisions that answered nothing (each with the reason in ``note``); every decision
        is recorded (``list_decisions``).
        """
        checked = answers.check_decisions(decisions)
        arguments.principal(by)
        store = await self._ready(thread_id)
        return await answering.submit(
            store,
            thread_id,
            decisions=checked,
            resume=resume,
            by=by,
            reason=arguments.text("reason", reason),
            evidence=self.evidence,
        )

    async def alist_decisions(self, thread_id: str) -> list[DecisionRecord]:
        """The thread's decision records, oldest first, as they took effect: a decision that
        answered nothing has ``applied=False`` and the reason in ``note``; of several
        decisions on one call the latest wins and the earlier are marked superseded."""
        return await answering.list_decisions(await self._ready(thread_id), thread_id)

    async def acancel(self, thread_id: str, *, reason: str, by: Any = None) -> None:
        """End a thread: it runs nothing more; the reason and actor are recorded."""
        store = await self._ready(thread_id)
        await threads.cancel(
            self.spec,
            store,
            thread_id,
            reason=arguments.required_text("reason", reason),
            by=arguments.actor(by),
            evidence=self.evidence,
        )

    async def afreeze(self, thread_id: str, *, by: Any = None, reason: str) -> None:
        """Freeze a thread (incident response), also one a run executes now: no tool call is
        dispatched from then on, no run starts and no decision applies until ``unfreeze``;
        a run raises ``ThreadFrozenError``. Recorded with ``by`` and ``reason``."""
        store = await self._ready(thread_id)
        await threads.freeze(
            self.spec,
            store,
            thread_id,
            by=arguments.actor(by),
            reason=arguments.required_text("reason", reason),
            evidence=self.evidence,
        )

    async def aunfreeze(self, thread_id: str, *, by: Any = None, reason: str) -> None:
        """Unfreeze a frozen thread: it is as it was before it froze."""
        store = await self._ready(thread_id)
        await threads.unfreeze(
            self.spec,
            store,
            thread_id,
            by=arguments.actor(by),
            reason=arguments.required_text("reason", reason),
            evidence=self.evidence,
        )

    # -- state and history ----------------------------------------------------------------------
    async def aaudit(self, thread_id: str) -> list[AuditEntry]:
        """The thread's audit trail from the evidence log, in order (``AuditEntry``:
        proposal -> policy -> pause -> decision -> dispatch -> result, each with its
        checkpoint and pause id; decisions that did not apply with their reason)."""
        log, thread_id = self.evidence, arguments.thread_id(thread_id)
        if log is None:
            raise InvalidArgumentError(
                "this graph keeps no evidence (compile(evidence=False)): there is no trail"
            )
        store = None
        if self.checkpointer is not None:
            store = await self._ready(thread_id)
            if await store.get_thread(ThreadId(thread_id)) is None:
                raise ThreadNotFoundError(thread_id)
        return await audit(log, store, thread_id)

    async def aget_state(
        self, thread_id: str, *, checkpoint_id: str | None = None, subgraphs: bool = False
    ) -> StateSnapshot | None:
        """The thread's state at its head (or ``checkpoint_id``); None for an unknown thread."""
        store = await self._ready(thread_id)
        return await history.get_state(
            self.spec, store, thread_id, checkpoint_id=checkpoint_id, subgraphs=subgraphs
        )

    async def aget_state_history(
        self, thread_id: str, *, limit: int | None = None
    ) -> list[StateSnapshot]:
        """Snapshots of every checkpoint of the thread, newest first, with their pauses and
        answers."""
        store = await self._ready(thread_id)
        return await history.get_state_history(self.spec, store, thread_id, limit=limit)

    async def aupdate_state(
        self,
        thread_id: str,
        values: Mapping[str, Any] | None,
        *,
        as_node: str | None = None,
        checkpoint_id: str | None = None,
    ) -> str:
        """Write ``values`` through the reducers as a new checkpoint; return its id.

        The update counts as a write of ``as_node`` or, without it, of the node that wrote
        the checkpoint's step (the input for a run's first checkpoint); that node's edges
        are evaluated again (``END`` stops the run). The checkpoint's pending tasks are kept
        when they come out the same. ``as_node=END`` ends the pending work (the thread is
        ``done``). ``checkpoint_id`` forks from an older checkpoint, or names a subgraph's
        checkpoint (``get_state(subgraphs=True)``). See ``graphflow.engine.update``.
        """
        store = await self._ready(thread_id)
        return await update.update_state(
            self.spec, store, thread_id, values, as_node=as_node, checkpoint_id=checkpoint_id
        )

    # -- the sync API -------------------------------------------------------------------------
    invoke = _sync.sync_method(ainvoke, "invoke")
    stream = _sync.sync_iter_method(astream, "stream")
    pending_pauses = _sync.sync_method(apending_pauses, "pending_pauses")
    list_threads = _sync.sync_method(alist_threads, "list_threads")
    count_threads = _sync.sync_method(acount_threads, "count_threads")
    submit = _sync.sync_method(asubmit, "submit")
    list_decisions = _sync.sync_method(alist_decisions, "list_decisions")
    cancel = _sync.sync_method(acancel, "cancel")
    freeze = _sync.sync_method(afreeze, "freeze")
    unfreeze = _sync.sync_method(aunfreeze, "unfreeze")
    get_state = _sync.sync_method(aget_state, "get_state")
    get_state_history = _sync.sync_method(aget_state_history, "get_state_history")
    update_state = _sync.sync_method(aupdate_state, "update_state")
    audit = _sync.sync_method(aaudit, "audit")

    # -- drawing --------------------------------------------------------------------------------
    def draw_mermaid(self) -> str:
        """A Mermaid flowchart of the graph."""
        return draw_mermaid(self.spec)


builder.register_compiler(CompiledGraph)
