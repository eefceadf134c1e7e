"""The state API of ``CompiledGraph``: ``get_state``, ``get_state_history``, ``update_state``
(API.md, "State and history"), read from and written to the graph's checkpointer."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from checkpoints.errors import CorruptCheckpointError, LeaseHeldError
from checkpoints.lease import new_owner
from checkpoints.models import (
    CheckpointId,
    CheckpointRecord,
    CommitBatch,
    MemoRecord,
    PauseId,
    TaskRecord,
    ThreadId,
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
from graphflow.engine.pauses import pause_from_record
from graphflow.errors import InvalidArgumentError, ThreadBusyError
from graphflow.subgraph import SubgraphNode, child_namespace
from graphflow.types import Pause, StateSnapshot, TaskInfo

if TYPE_CHECKING:
    from checkpoints import Checkpointer
    from graphflow.builder import NodeSpec
    from graphflow.compiled import CompiledGraph
    from graphflow.state import StateSchema


class StateAPI:
    """The state methods of ``CompiledGraph`` (which provides the attributes declared here)."""

    schema: StateSchema
    nodes: dict[str, NodeSpec]
    name: str | None
    lease_ttl: float

    def _store(self) -> Checkpointer:
        raise NotImplementedError

    async def _ensure_setup(self, thread_id: str | None = None) -> None:
        raise NotImplementedError

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
        self.schema.check_loaded(vals, thread_id, ck.id)
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
        await self._ensure_setup(thread_id)
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
        values = self.schema.checked_update(values, as_node or "update_state")
        owner = new_owner()
        try:
            th = await store.acquire_lease(tid, owner, self.lease_ttl, graph_name=self.name)
        except LeaseHeldError as e:
            raise ThreadBusyError(thread_id, e.owner) from e
        try:
            head = await store.get_checkpoint(tid, "", th.head) if th.head else None
            run = Run(cast("CompiledGraph", self), thread_id=thread_id)
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
