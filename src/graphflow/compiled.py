"""``CompiledGraph``: the runnable graph and its public API (API.md, "Running" on)."""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from checkpoints.errors import CorruptCheckpointError, LeaseHeldError
from checkpoints.lease import new_owner
from checkpoints.models import (
    AnswerRecord,
    CheckpointId,
    CheckpointRecord,
    CommitBatch,
    MemoRecord,
    PauseId,
    TaskRecord,
    ThreadId,
    ThreadInfo,
    ThreadStatus,
    ThreadUpdate,
    new_checkpoint_id,
    next_version,
    now,
    to_datetime,
)
from graphflow import _sync
from graphflow.engine import plan
from graphflow.engine.apply import apply_writes, set_write
from graphflow.engine.loop import Run
from graphflow.engine.pauses import UNSET, is_pause_map, pause_from_record, refuse_tool_answers
from graphflow.errors import (
    InvalidArgumentError,
    NothingToResumeError,
    ThreadBusyError,
    ThreadNotFoundError,
    UnknownPauseError,
)
from graphflow.subgraph import SubgraphNode, child_namespace
from graphflow.types import Event, Pause, RunResult, StateSnapshot, TaskInfo

if TYPE_CHECKING:
    from checkpoints import Checkpointer
    from graphflow.builder import StateGraph


class CompiledGraph:
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
        self.lease_ttl = lease_ttl
        self.path_prefix = ""
        self._setup_done = False
        self._resumable_checked = False

    def _check_resumable(self) -> None:
        """Without a checkpointer, refuse to run subgraphs that could pause (once checked)."""
        if not self._resumable_checked:
            from graphflow.validate import check_resumable

            check_resumable(self.builder)
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
        return thread_id

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
            recursion_limit=recursion_limit,
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
        send, recv = anyio.create_memory_object_stream[Event](math.inf)
        run = Run(
            self,
            thread_id=tid,
            principal=principal,
            decisions=decisions,
            recursion_limit=recursion_limit,
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
        await self._ensure_setup()
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
    ) -> None:
        """Record answers durably without running; the next run of the thread applies them."""
        store = self._store()
        await self._ensure_setup()
        th = await store.get_thread(ThreadId(thread_id))
        if th is None:
            raise ThreadNotFoundError(thread_id)
        pending = list(th.pending_pause_ids)
        if not pending:
            raise NothingToResumeError(thread_id)
        if resume is not UNSET:
            if is_pause_map(resume):
                unknown = [k for k in resume if k not in pending]
                if unknown:
                    raise UnknownPauseError(thread_id, unknown, pending)
                refuse_tool_answers(
                    thread_id, await store.get_pauses(th.thread_id, [PauseId(k) for k in resume])
                )
                items = list(resume.items())
            else:
                if len(pending) != 1:
                    from graphflow.errors import AmbiguousResumeError

                    raise AmbiguousResumeError(thread_id, pending)
                items = [(pending[0], resume)]
            await store.put_answers(
                [AnswerRecord(PauseId(k), ThreadId(thread_id), v, by, reason) for k, v in items]
            )
        if decisions:
            from graphflow.auth.decisions import match_decisions

            records = await store.get_pauses(th.thread_id, list(th.pending_pause_ids))
            if reason is not None:
                decisions = {k: _with_reason(v, reason) for k, v in decisions.items()}
            answers, decided = match_decisions(thread_id, records, decisions, by=by)
            await store.put_decisions(decided)
            await store.put_answers(answers)

    def submit(
        self,
        thread_id: str,
        *,
        decisions: Mapping[str, Any] | None = None,
        resume: Any = UNSET,
        by: str | None = None,
        reason: str | None = None,
    ) -> None:
        """Sync ``asubmit``."""

        async def go() -> None:
            await self.asubmit(thread_id, decisions=decisions, resume=resume, by=by, reason=reason)

        _sync.run_sync("submit", go)

    async def acancel(self, thread_id: str, *, reason: str, by: str | None = None) -> None:
        """End a thread: it runs nothing more; the reason and actor are recorded."""
        store = self._store()
        await self._ensure_setup()
        th = await store.get_thread(ThreadId(thread_id))
        if th is None or th.head is None:
            raise ThreadNotFoundError(thread_id)
        head = await store.get_checkpoint(th.thread_id, "", th.head)
        assert head is not None
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

    # -- state and history ----------------------------------------------------------------------
    async def _snapshot(
        self,
        store: Checkpointer,
        thread_id: ThreadId,
        ck: CheckpointRecord,
        pending_ids: Sequence[str],
        *,
        applied: bool,
        subgraphs: bool = False,
    ) -> StateSnapshot:
        vals = await store.load_channels(thread_id, ck.ns, ck.channel_versions, ck.channel_bases)
        vals = {k: v for k, v in vals.items() if not plan.is_hidden(k)}
        records = await store.load_tasks(thread_id, ck.ns, ck.id)
        found = await store.get_pauses(thread_id, [PauseId(i) for i in pending_ids])
        missing = sorted(set(pending_ids) - {p.id for p in found})
        if missing:
            raise CorruptCheckpointError(
                f"thread {thread_id!r}: pending pause records {missing} are missing",
                thread_id=thread_id,
                checkpoint_id=ck.id,
            )
        tasks = []
        all_pauses: list[Pause] = []
        for spec in ck.frontier:
            rec = records.get(spec.id)
            inner = child_namespace(ck.ns, spec.node, spec.id)
            tp = tuple(
                pause_from_record(p)
                for p in found
                if (p.ns == ck.ns and p.task_id == spec.id)
                or p.ns == inner
                or p.ns.startswith(inner + "|")
            )
            all_pauses += tp
            if tp:
                status = "paused"
            elif rec is not None:
                status = rec.status
            else:  # a step that a later checkpoint applied completed (its records are not kept)
                status = "completed" if applied else "pending"
            attempts = rec.attempts if rec else (0 if status == "pending" else 1)
            child_state = None
            node = self.nodes.get(spec.node)
            if subgraphs and node is not None and isinstance(node.fn, SubgraphNode):
                child_ck = await store.get_checkpoint(thread_id, inner)
                if child_ck is not None:
                    child_state = await node.fn.graph._snapshot(
                        store, thread_id, child_ck, pending_ids, applied=False, subgraphs=True
                    )
            tasks.append(
                TaskInfo(
                    spec.id,
                    spec.node,
                    status,  # type: ignore[arg-type]
                    attempts,
                    rec.error if rec else None,
                    tp,
                    child_state,
                )
            )
        return StateSnapshot(
            values=self.schema.view(vals),
            next=tuple(t.node for t in ck.frontier),
            tasks=tuple(tasks),
            pauses=tuple(all_pauses),
            step=ck.step,
            checkpoint_id=ck.id,
            parent_checkpoint_id=ck.parent_id,
            created_at=to_datetime(ck.created_at),
            metadata=dict(ck.metadata),
        )

    async def aget_state(
        self, thread_id: str, *, checkpoint_id: str | None = None, subgraphs: bool = False
    ) -> StateSnapshot | None:
        """The thread's state at its head (or ``checkpoint_id``); None for an unknown thread."""
        store = self._store()
        await self._ensure_setup(thread_id)
        th = await store.get_thread(ThreadId(thread_id))
        if th is None or th.head is None:
            return None
        ck = await store.get_checkpoint(th.thread_id, "", CheckpointId(checkpoint_id or th.head))
        if ck is None and checkpoint_id is None:
            raise CorruptCheckpointError(
                f"thread {thread_id!r}: head checkpoint {th.head!r} is missing",
                thread_id=thread_id,
                checkpoint_id=th.head,
            )
        if ck is None:
            raise InvalidArgumentError(f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}")
        applied = ck.id != th.head and ck.id in await self._applied(th.thread_id)
        pending = th.pending_pause_ids if ck.id == th.head else ()
        return await self._snapshot(
            store, th.thread_id, ck, pending, applied=applied, subgraphs=subgraphs
        )

    def get_state(
        self, thread_id: str, *, checkpoint_id: str | None = None, subgraphs: bool = False
    ) -> StateSnapshot | None:
        """Sync ``aget_state``."""

        async def go() -> StateSnapshot | None:
            return await self.aget_state(
                thread_id, checkpoint_id=checkpoint_id, subgraphs=subgraphs
            )

        return _sync.run_sync("get_state", go)

    async def aget_state_history(
        self, thread_id: str, *, limit: int | None = None
    ) -> list[StateSnapshot]:
        """Snapshots of every checkpoint of the thread, newest first."""
        store = self._store()
        await self._ensure_setup()
        th = await store.get_thread(ThreadId(thread_id))
        if th is None:
            return []
        cks = await store.list_checkpoints(th.thread_id, "", limit=limit)
        applied = await self._applied(th.thread_id)
        return [
            await self._snapshot(
                store,
                th.thread_id,
                ck,
                th.pending_pause_ids if ck.id == th.head else (),
                applied=ck.id in applied,
            )
            for ck in cks
        ]

    async def _applied(self, thread_id: ThreadId) -> set[CheckpointId | None]:
        """Checkpoints whose step completed: the parents of step ("loop") checkpoints."""
        cks = await self._store().list_checkpoints(thread_id, "")
        return {c.parent_id for c in cks if c.source == "loop"}

    def get_state_history(self, thread_id: str, *, limit: int | None = None) -> list[StateSnapshot]:
        """Sync ``aget_state_history``."""

        async def go() -> list[StateSnapshot]:
            return await self.aget_state_history(thread_id, limit=limit)

        return _sync.run_sync("get_state_history", go)

    async def aupdate_state(
        self, thread_id: str, values: Mapping[str, Any], *, as_node: str | None = None
    ) -> str:
        """Write ``values`` through the reducers as a new checkpoint; return its id.

        With ``as_node`` the update counts as that node's output and the next step follows
        its edges (pending pauses are dropped). Otherwise the pending step is kept as it is,
        with its tasks, their records and memoized steps, and its pauses: only the state its
        tasks will see changes.
        """
        store = self._store()
        await self._ensure_setup()
        tid = ThreadId(thread_id)
        if as_node is not None and as_node not in self.nodes:
            raise InvalidArgumentError(f"as_node {as_node!r} is not a node of this graph")
        self.schema.check_keys(values, as_node or "update_state")
        owner = new_owner()
        try:
            th = await store.acquire_lease(tid, owner, self.lease_ttl, graph_name=self.name)
        except LeaseHeldError as e:
            raise ThreadBusyError(thread_id, e.owner) from e
        try:
            head = await store.get_checkpoint(tid, "", th.head) if th.head else None
            run = Run(self, thread_id=thread_id)
            if head is not None:
                await run._load_values(head)
                versions, bases = head.channel_versions, head.channel_bases
            else:
                run.values = self.schema.initial()
                versions, bases = {}, {}
            version = next_version()
            prior = {**run.values, **run.hidden}
            applied = apply_writes(
                self.schema,
                prior,
                versions,
                bases,
                [(as_node or "update_state", values.items())],
                version,
            )
            writes = list(applied.writes)
            for k in sorted(set(applied.values) - set(applied.versions)):
                writes.append(set_write(k, version, applied.values[k]))
                applied.versions[k] = version
            run.values = {
                k: v for k, v in applied.values.items() if not k.startswith(plan.HIDDEN_PREFIX)
            }
            ck_id = new_checkpoint_id()
            tasks: list[TaskRecord] = []
            memos: list[MemoRecord] = []
            pending: tuple[PauseId, ...] = ()
            if as_node is not None or head is None:
                targets = await run._route_from(as_node, None) if as_node is not None else []
                frontier = plan.make_frontier(ck_id, "", targets)
                status: ThreadStatus = "running" if frontier else "done"
            else:
                # The pending step is kept as it is (same tasks, records, memos and pauses):
                # only the state it will see changes.
                frontier = head.frontier
                for rec in (await store.load_tasks(tid, "", head.id)).values():
                    tasks.append(dataclasses.replace(rec, checkpoint_id=ck_id))
                for task_id, memo in (await store.load_memos(tid, "", head.id)).items():
                    memos += [MemoRecord(ck_id, task_id, k, v) for k, v in memo.items()]
                pending = th.pending_pause_ids
                status = th.status if th.status in ("paused", "failed") else "running"
                if not frontier:
                    status = "done"
            ck = CheckpointRecord(
                ck_id,
                tid,
                "",
                head.id if head else None,
                head.step + 1 if head else -1,
                "update",
                applied.versions,
                frontier,
                {"as_node": as_node},
                now(),
                applied.bases,
            )
            await store.commit(
                tid,
                owner,
                CommitBatch(
                    checkpoint=ck,
                    channels=writes,
                    tasks=tasks,
                    memos=memos,
                    thread=ThreadUpdate(status, pending, self.name),
                    expected_head=th.head,
                    check_head=True,
                ),
            )
            return ck_id
        finally:
            await store.release_lease(tid, owner)

    def update_state(
        self, thread_id: str, values: Mapping[str, Any], *, as_node: str | None = None
    ) -> str:
        """Sync ``aupdate_state``."""

        async def go() -> str:
            return await self.aupdate_state(thread_id, values, as_node=as_node)

        return _sync.run_sync("update_state", go)

    # -- drawing --------------------------------------------------------------------------------
    def draw_mermaid(self) -> str:
        """A Mermaid flowchart of the graph."""
        from graphflow.drawing import draw_mermaid

        return draw_mermaid(self.builder)


def _with_reason(value: Any, reason: str) -> Any:
    from graphflow.auth.decisions import Decision

    d = Decision.coerce(value)
    return d if d.reason is not None else Decision(d.verdict, d.fingerprint, d.by, reason)
