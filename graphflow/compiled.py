"""``CompiledGraph``: the runnable graph and its public API (API.md, "Running" on)."""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, get_args

import anyio

from checkpoints.errors import CorruptCheckpointError, LeaseHeldError
from checkpoints.lease import new_owner
from checkpoints.models import (
    CheckpointRecord,
    CommitBatch,
    DecisionRecord,
    ThreadId,
    ThreadInfo,
    ThreadStatus,
    ThreadUpdate,
    new_checkpoint_id,
    now,
)
from graphflow import _sync
from graphflow.engine import answers
from graphflow.engine.loop import Run
from graphflow.engine.pauses import UNSET, pause_from_record
from graphflow.errors import (
    InvalidArgumentError,
    NothingToResumeError,
    ThreadBusyError,
    ThreadCancelledError,
    ThreadFinishedError,
    ThreadNotFoundError,
)
from graphflow.state_api import StateAPI
from graphflow.types import Event, Pause, RunResult

if TYPE_CHECKING:
    from checkpoints import Checkpointer
    from graphflow.builder import StateGraph

THREAD_STATUSES: tuple[str, ...] = get_args(ThreadStatus)


class CompiledGraph(StateAPI):
    """A validated graph, ready to run. Build it with ``StateGraph.compile()``."""

    def __init__(
        self,
        builder: StateGraph,
        *,
        checkpointer: Checkpointer | None,
        interrupt_before: frozenset[str],
        interrupt_after: frozenset[str],
        name: str | None,
        lease_ttl: float,
    ):
        self.builder = builder
        self.schema = builder.schema
        self.nodes = dict(builder.nodes)
        self.edges = builder.edges
        self.checkpointer = checkpointer
        self.interrupt_before = interrupt_before
        self.interrupt_after = interrupt_after
        self.name = name
        if (
            isinstance(lease_ttl, bool)
            or not isinstance(lease_ttl, int | float)
            or not math.isfinite(lease_ttl)
            or lease_ttl <= 0
        ):
            raise InvalidArgumentError(
                f"lease_ttl must be a positive number of seconds, not {lease_ttl!r}: a run "
                "holds its thread's lease for that long after its last renewal"
            )
        self.lease_ttl = float(lease_ttl)
        self.path_prefix = ""
        self._setup_done = False
        self._resumable_checked = False

    def _check_resumable(self) -> None:
        """Without a checkpointer, refuse to run subgraphs that could pause (once checked)."""
        if not self._resumable_checked:
            from graphflow.validate import check_resumable

            check_resumable(self)
            self._resumable_checked = True

    async def _ensure_setup(self, thread_id: str | None = None) -> None:
        if not self._setup_done and self.checkpointer is not None:
            try:
                await self.checkpointer.setup()
            except CorruptCheckpointError as e:
                if thread_id is None or e.thread_id is not None:
                    raise
                raise CorruptCheckpointError(
                    f"thread {thread_id!r}: {e}", thread_id=thread_id
                ) from e
            self._setup_done = True

    def _store(self) -> Checkpointer:
        if self.checkpointer is None:
            raise InvalidArgumentError(
                "this graph has no checkpointer: compile(checkpointer=...) to keep threads"
            )
        return self.checkpointer

    def _thread_id(self, thread_id: str | None) -> str:
        if thread_id is None:
            if self.checkpointer is not None:
                raise InvalidArgumentError("thread_id is required when a checkpointer is set")
            return f"run-{uuid.uuid4().hex}"
        if not isinstance(thread_id, str) or not thread_id:
            raise InvalidArgumentError(f"thread_id must be a non-empty string, not {thread_id!r}")
        try:
            thread_id.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgumentError(
                f"thread_id {thread_id!r} is not valid text (it holds a lone surrogate); "
                "use a printable string"
            ) from None
        return thread_id

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
        run = Run(
            self,
            thread_id=self._thread_id(thread_id),
            principal=principal,
            decisions=decisions,
            recursion_limit=self._check_limit(recursion_limit),
        )
        return await run.execute(input, resume=resume, checkpoint_id=checkpoint_id)

    def invoke(
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
        """Sync ``ainvoke``; raises ``RuntimeError`` inside a running event loop."""

        async def go() -> RunResult:
            return await self.ainvoke(
                input,
                thread_id=thread_id,
                decisions=decisions,
                resume=resume,
                checkpoint_id=checkpoint_id,
                principal=principal,
                recursion_limit=recursion_limit,
            )

        return _sync.run_sync("invoke", go)

    async def astream(
        self,
        input: Any,
        *,
        thread_id: str | None = None,
        mode: str = "values",
        decisions: Mapping[str, Any] | None = None,
        resume: Any = UNSET,
        checkpoint_id: str | None = None,
        principal: Any = None,
        recursion_limit: int = 100,
    ) -> AsyncIterator[Event]:
        """Run the graph and yield events as they happen (see API.md, "Events")."""
        if mode not in ("values", "updates", "debug"):
            raise InvalidArgumentError(
                f"stream mode must be values, updates or debug, not {mode!r}"
            )
        tid = self._thread_id(thread_id)
        limit = self._check_limit(recursion_limit)
        send, recv = anyio.create_memory_object_stream[Event](math.inf)
        run = Run(
            self,
            thread_id=tid,
            principal=principal,
            decisions=decisions,
            recursion_limit=limit,
            sink=send,
            mode=mode,
        )
        failure: list[BaseException] = []

        async def produce() -> None:
            async with send:
                try:
                    await run.execute(input, resume=resume, checkpoint_id=checkpoint_id)
                except Exception as e:
                    failure.append(e)

        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            async with recv:
                async for ev in recv:
                    yield ev
        if failure:
            raise failure[0]

    def stream(
        self,
        input: Any,
        *,
        thread_id: str | None = None,
        mode: str = "values",
        decisions: Mapping[str, Any] | None = None,
        resume: Any = UNSET,
        checkpoint_id: str | None = None,
        principal: Any = None,
        recursion_limit: int = 100,
    ) -> Iterator[Event]:
        """Sync ``astream``."""
        return _sync.iterate_sync(
            "stream",
            lambda: self.astream(
                input,
                thread_id=thread_id,
                mode=mode,
                decisions=decisions,
                resume=resume,
                checkpoint_id=checkpoint_id,
                principal=principal,
                recursion_limit=recursion_limit,
            ),
        )

    # -- pauses and threads ---------------------------------------------------------------------
    async def apending_pauses(self, thread_id: str) -> list[Pause]:
        """The pauses a thread waits on (empty when it is not paused)."""
        store = self._store()
        await self._ensure_setup(thread_id)
        th = await store.get_thread(ThreadId(thread_id))
        if th is None:
            raise ThreadNotFoundError(thread_id)
        recs = await store.get_pauses(th.thread_id, list(th.pending_pause_ids))
        return [pause_from_record(r) for r in recs]

    def pending_pauses(self, thread_id: str) -> list[Pause]:
        """Sync ``apending_pauses``."""
        return _sync.run_sync("pending_pauses", self.apending_pauses, thread_id)

    async def alist_threads(self, status: ThreadStatus | None = None) -> list[ThreadInfo]:
        """Threads in the store, optionally of one status, from an index."""
        if status is not None and status not in THREAD_STATUSES:
            raise InvalidArgumentError(
                f"status must be one of {list(THREAD_STATUSES)} or None, not {status!r}"
            )
        await self._ensure_setup()
        return await self._store().list_threads(status)

    def list_threads(self, status: ThreadStatus | None = None) -> list[ThreadInfo]:
        """Sync ``alist_threads``."""
        return _sync.run_sync("list_threads", self.alist_threads, status)

    async def asubmit(
        self,
        thread_id: str,
        *,
        decisions: Mapping[str, Any] | None = None,
        resume: Any = UNSET,
        by: str | None = None,
        reason: str | None = None,
    ) -> tuple[DecisionRecord, ...]:
        """Record answers durably without running; the next run of the thread applies them.

        The same rules as ``invoke`` (``graphflow.engine.answers``): tool confirmations are
        answered by ``decisions=`` only, interrupts and gates by ``resume=``. Returns the
        decisions that answered nothing (each with the reason in ``note``); every decision
        is recorded (``list_decisions``).
        """
        checked = answers.check_decisions(decisions)
        if resume is UNSET and not checked:
            raise InvalidArgumentError("submit needs decisions= or resume= to record")
        store = self._store()
        await self._ensure_setup(thread_id)
        th = await store.get_thread(ThreadId(thread_id))
        if th is None:
            raise ThreadNotFoundError(thread_id)
        pending = list(th.pending_pause_ids)
        if not pending:
            raise NothingToResumeError(thread_id)
        records = await store.get_pauses(th.thread_id, pending)
        found = answers.resolve(
            thread_id, records, resume=resume, decisions=checked, by=by, reason=reason
        )
        if found.decisions:
            await store.put_decisions(found.decisions)
        if found.answers:
            await store.put_answers(found.answers)
        return found.ignored

    def submit(
        self,
        thread_id: str,
        *,
        decisions: Mapping[str, Any] | None = None,
        resume: Any = UNSET,
        by: str | None = None,
        reason: str | None = None,
    ) -> tuple[DecisionRecord, ...]:
        """Sync ``asubmit``."""

        async def go() -> tuple[DecisionRecord, ...]:
            return await self.asubmit(
                thread_id, decisions=decisions, resume=resume, by=by, reason=reason
            )

        return _sync.run_sync("submit", go)

    async def alist_decisions(self, thread_id: str) -> list[DecisionRecord]:
        """The thread's decision records, oldest first, as they took effect: a decision that
        answered nothing has ``applied=False`` and the reason in ``note``; of several
        decisions on one call the latest wins and the earlier are marked superseded."""
        store = self._store()
        await self._ensure_setup(thread_id)
        if await store.get_thread(ThreadId(thread_id)) is None:
            raise ThreadNotFoundError(thread_id)
        return answers.effective(await store.list_decisions(ThreadId(thread_id)))

    def list_decisions(self, thread_id: str) -> list[DecisionRecord]:
        """Sync ``alist_decisions``."""
        return _sync.run_sync("list_decisions", self.alist_decisions, thread_id)

    async def acancel(self, thread_id: str, *, reason: str, by: str | None = None) -> None:
        """End a thread: it runs nothing more; the reason and actor are recorded."""
        store = self._store()
        await self._ensure_setup(thread_id)
        th = await store.get_thread(ThreadId(thread_id))
        if th is None or th.head is None:
            raise ThreadNotFoundError(thread_id)
        if th.status == "done":
            raise ThreadFinishedError(thread_id)
        if th.status == "cancelled":
            raise ThreadCancelledError(thread_id)
        head = await store.get_checkpoint(th.thread_id, "", th.head)
        if head is None:
            raise CorruptCheckpointError(
                f"thread {thread_id!r}: head checkpoint {th.head!r} is missing",
                thread_id=thread_id,
                checkpoint_id=th.head,
            )
        ck = CheckpointRecord(
            new_checkpoint_id(),
            th.thread_id,
            "",
            head.id,
            head.step,
            "update",
            dict(head.channel_versions),
            (),
            {"cancelled": {"reason": reason, "by": by, "pauses": list(th.pending_pause_ids)}},
            now(),
            dict(head.channel_bases),
        )
        await self._leased(
            th.thread_id,
            CommitBatch(
                checkpoint=ck,
                thread=ThreadUpdate("cancelled", ()),
                expected_head=th.head,
                check_head=True,
            ),
        )

    def cancel(self, thread_id: str, *, reason: str, by: str | None = None) -> None:
        """Sync ``acancel``."""

        async def go() -> None:
            await self.acancel(thread_id, reason=reason, by=by)

        _sync.run_sync("cancel", go)

    async def _leased(self, thread_id: ThreadId, batch: CommitBatch) -> None:
        store = self._store()
        owner = new_owner()
        try:
            await store.acquire_lease(thread_id, owner, self.lease_ttl, graph_name=self.name)
        except LeaseHeldError as e:
            raise ThreadBusyError(thread_id, e.owner) from e
        try:
            await store.commit(thread_id, owner, batch)
        finally:
            await store.release_lease(thread_id, owner)

    # -- drawing --------------------------------------------------------------------------------
    def draw_mermaid(self) -> str:
        """A Mermaid flowchart of the graph."""
        from graphflow.drawing import draw_mermaid

        return draw_mermaid(self.builder)
