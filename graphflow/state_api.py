"""The state API of ``CompiledGraph``: ``get_state``, ``get_state_history``, ``update_state``
(API.md, "State and history"), read from and written to the graph's checkpointer.

``update_state`` follows LangGraph: the update counts as a write of a node (``as_node``, or
else the node that wrote the checkpoint's step) and that node's edges are evaluated again
on the new state. When they lead to the tasks the checkpoint already has (same nodes, same
``Send`` arguments), those tasks are kept as they are, with their committed records,
memoized steps (an agent's model answers) and pending pauses; otherwise the new frontier
replaces them. It never leaves a thread ``running``: a thread with pending work and no
pending pause after an update is ``paused`` (``invoke(None)`` continues it).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from checkpoints.errors import (
    CorruptCheckpointError,
    HeadConflictError,
    LeaseHeldError,
    LeaseLostError,
)
from checkpoints.lease import new_owner
from checkpoints.models import (
    AnswerRecord,
    CheckpointId,
    CheckpointRecord,
    CommitBatch,
    MemoRecord,
    PauseId,
    PauseRecord,
    TaskRecord,
    TaskSpec,
    ThreadId,
    ThreadRecord,
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
from graphflow.errors import (
    InvalidArgumentError,
    InvalidUpdateError,
    ThreadBusyError,
    ThreadCancelledError,
)
from graphflow.subgraph import SubgraphNode, child_namespace
from graphflow.types import END, START, Pause, StateSnapshot, TaskInfo

if TYPE_CHECKING:
    from checkpoints import Checkpointer
    from graphflow.builder import Edges, NodeSpec
    from graphflow.compiled import CompiledGraph
    from graphflow.state import StateSchema


@contextlib.contextmanager
def _naming(thread_id: str, checkpoint_id: str | None = None) -> Iterator[None]:
    """Make a ``CorruptCheckpointError`` raised inside name the thread (and checkpoint)."""
    try:
        yield
    except CorruptCheckpointError as e:
        named = f"{thread_id!r}" in str(e)
        if named and e.thread_id is not None and (e.checkpoint_id or not checkpoint_id):
            raise
        msg = str(e) if named else f"thread {thread_id!r}: {e}"
        if e.checkpoint_id is None and checkpoint_id is not None:
            msg += f" (checkpoint {checkpoint_id!r})"
        raise CorruptCheckpointError(
            msg, thread_id=thread_id, checkpoint_id=e.checkpoint_id or checkpoint_id
        ) from e


@dataclass(slots=True)
class _Reads:
    """What the snapshots of one call share, read once: the thread's pauses and answers,
    and which checkpoints a step applied (root checkpoint id -> its ``loop`` child)."""

    thread: ThreadRecord
    pauses: list[PauseRecord]
    answers: dict[PauseId, AnswerRecord] | None = None
    applied_by: dict[CheckpointId, CheckpointRecord] = field(default_factory=dict)
    values: dict[tuple[str, CheckpointId], dict[str, Any]] = field(default_factory=dict)


@dataclass(slots=True)
class _Target:
    """Where an update applies: a namespace of the thread, its graph and checkpoint."""

    graph: StateAPI
    ns: str
    ck: CheckpointRecord | None
    at_head: bool
    """``ck`` is the newest checkpoint of ``ns`` (else the update forks from it)."""
    path: list[tuple[str, CheckpointRecord, TaskSpec]] = field(default_factory=list)
    """For a subgraph's namespace: each ancestor namespace, its head and the task running
    the next level."""
    node: SubgraphNode | None = None
    """The subgraph node whose child runs in ``ns``."""


class StateAPI:
    """The state methods of ``CompiledGraph`` (which provides the attributes declared here)."""

    schema: StateSchema
    nodes: dict[str, NodeSpec]
    edges: Edges
    name: str | None
    lease_ttl: float

    def _store(self) -> Checkpointer:
        raise NotImplementedError

    async def _ensure_setup(self, thread_id: str | None = None) -> None:
        raise NotImplementedError

    # -- state and history ----------------------------------------------------------------------
    async def _values(
        self, store: Checkpointer, reads: _Reads, ck: CheckpointRecord
    ) -> dict[str, Any]:
        key = (ck.ns, ck.id)
        vals = reads.values.get(key)
        if vals is None:
            with _naming(ck.thread_id, ck.id):
                vals = await store.load_channels(
                    ck.thread_id, ck.ns, ck.channel_versions, ck.channel_bases
                )
            reads.values[key] = vals
        return vals

    def _public_pause(self, rec: PauseRecord, reads: _Reads) -> Pause:
        pause = pause_from_record(rec)
        ans = (reads.answers or {}).get(rec.id)
        if ans is None:
            return pause
        return dataclasses.replace(
            pause,
            answered=True,
            answer=ans.value,
            answered_by=ans.by,
            answered_at=to_datetime(ans.created_at),
            answer_reason=ans.reason,
        )

    async def _snapshot(
        self,
        store: Checkpointer,
        reads: _Reads,
        ck: CheckpointRecord,
        *,
        subgraphs: bool = False,
    ) -> StateSnapshot:
        tid = ck.thread_id
        vals = await self._values(store, reads, ck)
        self.schema.check_loaded(vals, ck.thread_id, ck.id)
        with _naming(tid, ck.id):
            records = await store.load_tasks(tid, ck.ns, ck.id)
        pending = set(reads.thread.pending_pause_ids)
        # The pauses of each task of this checkpoint (a subgraph task's: of its namespaces).
        ids = {t.id for t in ck.frontier}
        owned: dict[str, list[PauseRecord]] = {}
        # Gates after the step that made this checkpoint, raised with it (a subgraph's
        # pauses name the root's checkpoint: in its snapshot, those still pending).
        here: list[PauseRecord] = []
        prefix = f"{ck.ns}|" if ck.ns else ""
        for p in reads.pauses:
            if p.ns == ck.ns:
                if p.task_id in ids:
                    owned.setdefault(p.task_id, []).append(p)
                elif p.kind == "after" and (p.id in pending if ck.ns else p.checkpoint_id == ck.id):
                    here.append(p)
            elif p.ns.startswith(prefix):
                hop = p.ns[len(prefix) :].partition("|")[0]
                task = hop.rpartition(":")[2]
                if task in ids:
                    owned.setdefault(task, []).append(p)
        if (owned or here) and reads.answers is None:
            with _naming(tid, ck.id):
                reads.answers = await store.load_answers(tid)
        child = reads.applied_by.get(ck.id) if ck.ns == "" else None
        tasks = []
        all_pauses: list[Pause] = [self._public_pause(p, reads) for p in here]
        for spec in ck.frontier:
            rec = records.get(spec.id)
            mine = owned.get(spec.id, [])
            tp = tuple(self._public_pause(p, reads) for p in mine)
            all_pauses += tp
            result = None
            if child is not None:  # its step completed (a later checkpoint applied it)
                status = "completed"
                if rec is not None and rec.writes is not None:
                    result = self._result(rec.writes)
                elif len(ck.frontier) == 1:
                    after = await self._values(store, reads, child)
                    result = self._derived(vals, ck, after, child)
            elif any(p.id in pending for p in mine):
                status = "paused"
            elif rec is not None:
                status = "pending" if rec.status == "paused" else rec.status
                if rec.status == "completed" and rec.writes is not None:
                    result = self._result(rec.writes)
            else:
                status = "pending"
            attempts = rec.attempts if rec else (0 if status == "pending" else 1)
            child_state = None
            node = self.nodes.get(spec.node)
            if subgraphs and node is not None and isinstance(node.fn, SubgraphNode):
                inner = child_namespace(ck.ns, spec.node, spec.id)
                with _naming(tid):
                    child_ck = await store.get_checkpoint(tid, inner)
                if child_ck is not None:
                    child_state = await node.fn.graph._snapshot(
                        store, reads, child_ck, subgraphs=True
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
                    result,
                )
            )
        all_pauses.sort(key=lambda p: (p.created_at, p.id))
        return StateSnapshot(
            values=self.schema.view({k: v for k, v in vals.items() if not plan.is_hidden(k)}),
            next=tuple(t.node for t in ck.frontier),
            tasks=tuple(tasks),
            pauses=tuple(all_pauses),
            step=ck.step,
            checkpoint_id=ck.id,
            parent_checkpoint_id=ck.parent_id,
            created_at=to_datetime(ck.created_at),
            metadata={**ck.metadata, "source": ck.source},
        )

    def _result(self, writes: Sequence[tuple[str, Any]]) -> dict[str, Any]:
        """A task's writes as one update (a subgraph's repeated keys through the reducer)."""
        out: dict[str, Any] = {}
        for k, v in writes:
            ch = self.schema.channels.get(k)
            reducer = ch.reducer if ch is not None else None
            out[k] = reducer(out[k], v) if k in out and reducer is not None else v
        return out

    def _derived(
        self,
        before: Mapping[str, Any],
        ck: CheckpointRecord,
        after: Mapping[str, Any],
        applied: CheckpointRecord,
    ) -> dict[str, Any] | None:
        """The update of the only task of ``ck``'s step, from the values before and after it
        (the keys whose version ``applied`` changed); None when one key's update cannot be told."""
        out: dict[str, Any] = {}
        old_versions = ck.channel_versions
        for k, version in applied.channel_versions.items():
            ch = self.schema.channels.get(k)
            if ch is None or old_versions.get(k) == version or k not in after:
                continue
            new = after[k]
            if ch.reducer is None:
                out[k] = new
                continue
            old = before.get(k, [])
            if isinstance(new, list) and isinstance(old, list) and new[: len(old)] == old:
                out[k] = new[len(old) :]  # the items it added
                continue
            return None
        return out

    async def _reads(
        self, store: Checkpointer, th: ThreadRecord, *, history: bool
    ) -> tuple[_Reads, list[CheckpointRecord]]:
        """Read what snapshots share; with ``history``, every root checkpoint (newest first)."""
        tid = th.thread_id
        with _naming(tid):
            pauses = await store.list_pauses(tid)
            cks = await store.list_checkpoints(tid, "") if history else []
        reads = _Reads(th, pauses)
        reads.applied_by = {
            c.parent_id: c for c in cks if c.source == "loop" and c.parent_id is not None
        }
        found = {p.id for p in pauses}
        missing = sorted(set(th.pending_pause_ids) - found)
        if missing:
            raise CorruptCheckpointError(
                f"thread {tid!r}: pending pause records {missing} are missing",
                thread_id=tid,
                checkpoint_id=th.head,
            )
        return reads, cks

    async def aget_state(
        self, thread_id: str, *, checkpoint_id: str | None = None, subgraphs: bool = False
    ) -> StateSnapshot | None:
        """The thread's state at its head (or ``checkpoint_id``); None for an unknown thread."""
        store = self._store()
        await self._ensure_setup(thread_id)
        with _naming(thread_id):
            th = await store.get_thread(ThreadId(thread_id))
            if th is None or th.head is None:
                return None
            ck = await store.get_checkpoint(
                th.thread_id, "", CheckpointId(checkpoint_id or th.head)
            )
            if ck is None and checkpoint_id is None:
                raise CorruptCheckpointError(
                    f"thread {thread_id!r}: head checkpoint {th.head!r} is missing",
                    thread_id=thread_id,
                    checkpoint_id=th.head,
                )
            if ck is None:
                raise InvalidArgumentError(
                    f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}"
                )
            reads, _ = await self._reads(store, th, history=ck.id != th.head)
            return await self._snapshot(store, reads, ck, subgraphs=subgraphs)

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
        """Snapshots of every checkpoint of the thread, newest first, with their pauses and
        answers."""
        store = self._store()
        await self._ensure_setup(thread_id)
        with _naming(thread_id):
            th = await store.get_thread(ThreadId(thread_id))
            if th is None:
                return []
            reads, cks = await self._reads(store, th, history=True)
            window = cks if limit is None else cks[:limit]
            return [await self._snapshot(store, reads, ck) for ck in window]

    def get_state_history(self, thread_id: str, *, limit: int | None = None) -> list[StateSnapshot]:
        """Sync ``aget_state_history``."""

        async def go() -> list[StateSnapshot]:
            return await self.aget_state_history(thread_id, limit=limit)

        return _sync.run_sync("get_state_history", go)

    # -- update_state ---------------------------------------------------------------------------
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
        when they come out the same (see the module docstring). ``as_node=END`` ends the
        pending work (the thread is ``done``). ``checkpoint_id`` forks from an older
        checkpoint (the new one becomes the head, its parent that checkpoint), or names a
        subgraph's checkpoint (``get_state(subgraphs=True)``): the update is made in that
        namespace and the parent's pending task continues the subgraph from it.

        Raises ``ThreadCancelledError`` for a cancelled thread, ``ThreadBusyError`` while a
        run holds it, ``InvalidUpdateError`` for unknown keys or when several nodes wrote
        the step (give ``as_node``); nothing is written then.
        """
        store = self._store()
        await self._ensure_setup(thread_id)
        tid = ThreadId(thread_id)
        values = dict(values or {})
        with _naming(thread_id):
            th = await store.get_thread(tid)
            if th is not None and th.status == "cancelled":
                raise ThreadCancelledError(thread_id)
            owner = new_owner()
            fresh = th is None or th.head is None
            if fresh:
                if checkpoint_id is not None:
                    raise InvalidArgumentError(
                        f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}"
                    )
            else:
                try:
                    th = await store.acquire_lease(tid, owner, self.lease_ttl, graph_name=self.name)
                except LeaseHeldError as e:
                    raise ThreadBusyError(thread_id, e.owner) from e
            try:
                if th is not None and th.status == "cancelled":
                    raise ThreadCancelledError(thread_id)
                return await self._update(store, tid, th, owner, values, as_node, checkpoint_id)
            finally:
                if not fresh:
                    await store.release_lease(tid, owner)

    async def _locate(
        self, store: Checkpointer, th: ThreadRecord | None, checkpoint_id: str | None
    ) -> _Target:
        """The namespace, graph and checkpoint an update applies to."""
        if th is None or th.head is None:
            return _Target(self, "", None, True)
        tid = th.thread_id
        head = await store.get_checkpoint(tid, "", th.head)
        if head is None:
            raise CorruptCheckpointError(
                f"thread {tid!r}: head checkpoint {th.head!r} is missing",
                thread_id=tid,
                checkpoint_id=th.head,
            )
        if checkpoint_id is None or checkpoint_id == head.id:
            return _Target(self, "", head, True)
        ck = await store.get_checkpoint(tid, "", CheckpointId(checkpoint_id))
        if ck is not None:
            return _Target(self, "", ck, False)
        found = await self._find_in_children(store, head, CheckpointId(checkpoint_id), [])
        if found is None:
            raise InvalidArgumentError(
                f"thread {tid!r} has no checkpoint {checkpoint_id!r} (in its history or in "
                "the namespace of a pending subgraph task)"
            )
        return found

    async def _find_in_children(
        self,
        store: Checkpointer,
        ck: CheckpointRecord,
        wanted: CheckpointId,
        path: list[tuple[str, CheckpointRecord, TaskSpec]],
    ) -> _Target | None:
        """Search the namespaces of ``ck``'s pending subgraph tasks, depth first."""
        for spec in ck.frontier:
            node = self.nodes.get(spec.node)
            if node is None or not isinstance(node.fn, SubgraphNode):
                continue
            inner = child_namespace(ck.ns, spec.node, spec.id)
            newest = await store.get_checkpoint(ck.thread_id, inner)
            if newest is None:
                continue
            here = [*path, (ck.ns, ck, spec)]
            if newest.id == wanted:
                return _Target(node.fn.graph, inner, newest, True, here, node.fn)
            found = await store.get_checkpoint(ck.thread_id, inner, wanted)
            if found is not None:
                return _Target(node.fn.graph, inner, found, False, here, node.fn)
            deeper = await node.fn.graph._find_in_children(store, newest, wanted, here)
            if deeper is not None:
                return deeper
        return None

    async def _writers(
        self, store: Checkpointer, ck: CheckpointRecord
    ) -> tuple[list[str], CheckpointRecord | None]:
        """The nodes that wrote ``ck``'s step and the checkpoint that step started from.

        An input's checkpoint was written by the input (``START``); a step's by its tasks'
        nodes; an ``update_state`` by its ``as_node``. Forks, cancels and updates that named
        no node pass the question on to the checkpoint they copy.
        """
        tid = ck.thread_id
        while True:
            parent = None
            if ck.parent_id is not None and ck.source != "input":
                parent = await store.get_checkpoint(tid, ck.ns, ck.parent_id)
                if parent is None:
                    raise CorruptCheckpointError(
                        f"thread {tid!r}: checkpoint {ck.parent_id!r}, the parent of "
                        f"{ck.id!r}, is missing",
                        thread_id=tid,
                        checkpoint_id=ck.id,
                    )
            if ck.source == "input" or parent is None:
                return [START], None
            if ck.source == "loop":
                return sorted({t.node for t in parent.frontier}), parent
            writer = ck.metadata.get("as_node") if ck.source == "update" else None
            if isinstance(writer, str):
                return [writer], parent
            ck = parent

    async def _update(
        self,
        store: Checkpointer,
        tid: ThreadId,
        th: ThreadRecord | None,
        owner: str,
        values: dict[str, Any],
        as_node: str | None,
        checkpoint_id: str | None,
    ) -> str:
        target = await self._locate(store, th, checkpoint_id)
        graph, ns, src = target.graph, target.ns, target.ck
        if as_node is not None and as_node not in graph.nodes and as_node not in (START, END):
            where = f"the subgraph in namespace {ns!r}" if ns else "this graph"
            raise InvalidArgumentError(f"as_node {as_node!r} is not a node of {where}")
        writers, base = [as_node] if as_node is not None else [START], None
        if as_node is None and src is not None:
            writers, base = await graph._writers(store, src)
            if len(writers) > 1:
                raise InvalidUpdateError(
                    f"thread {tid!r}: the step of checkpoint {src.id!r} was written by "
                    f"{writers}; give update_state(..., as_node=...) to say which node the "
                    "update counts as"
                )
        author = as_node or "update_state"  # (what errors about the values name)
        values = graph.schema.checked_update(values, author)

        run = Run(cast("CompiledGraph", graph), thread_id=tid, ns=ns)
        run.store = store  # (a subgraph's own checkpointer, if any, is not the thread's)
        if src is not None:
            with _naming(tid, src.id):
                stored = await store.load_channels(tid, ns, src.channel_versions, src.channel_bases)
            graph.schema.check_loaded(stored, tid, src.id)
            run._set_values(stored)
            versions, bases = src.channel_versions, src.channel_bases
        else:
            run.values = graph.schema.initial()
            versions, bases = {}, {}
        forking = src is not None and not target.at_head
        version = next_version()
        applied = apply_writes(
            graph.schema,
            {**run.values, **run.hidden},
            versions,
            bases,
            [(author, values.items())],
            version,
            force_set=forking,
        )
        writes = list(applied.writes)
        for k in sorted(set(applied.values) - set(applied.versions)):  # defaults never stored
            writes.append(set_write(k, version, applied.values[k]))
            applied.versions[k] = version
        run.values = {k: v for k, v in applied.values.items() if not plan.is_hidden(k)}
        if forking:  # the fork starts its own list chains
            writes += run._materialize(
                {**run.values, **run.hidden}, version, applied.versions, {w.channel for w in writes}
            )
            applied.bases = {}
        ck_id = new_checkpoint_id()
        frontier, barriers = await graph._replan(
            run, ck_id, writers, base, explicit=as_node is not None
        )
        for k, v in barriers.items():  # join barriers an explicit as_node advanced
            run.hidden[k] = v
            writes.append(set_write(k, version, v))
            applied.versions[k] = version
        if target.node is not None:
            # The parent's task gets what its subgraph wrote to shared keys: this update too.
            outputs = target.node.outputs
            out = [[outputs[k], v] for k, v in values.items() if k in outputs]
            if out:
                run._collect_out(out, version, applied.versions, applied.bases, writes)

        tasks: list[TaskRecord] = []
        memos: list[MemoRecord] = []
        pending = tuple(th.pending_pause_ids) if th is not None else ()
        kept = False
        final: tuple[TaskSpec, ...]
        if src is None:
            final = frontier or ()
        elif frontier is not None and not _same_frontier(frontier, src.frontier):
            final = frontier
        elif target.at_head:
            # The pending step is kept as it is (its tasks, their records, memoized steps
            # and pauses): only the state its tasks will see changes.
            kept, final = True, src.frontier
            with _naming(tid, src.id):
                for rec in (await store.load_tasks(tid, ns, src.id)).values():
                    tasks.append(dataclasses.replace(rec, checkpoint_id=ck_id))
                for task_id, memo in (await store.load_memos(tid, ns, src.id)).items():
                    memos += [MemoRecord(ck_id, task_id, k, v) for k, v in memo.items()]
        else:  # a fork of the same step: new tasks, which run again
            final = tuple(
                TaskSpec(plan.task_id(ck_id, ns, t.node, i), t.node, t.has_arg, t.arg)
                for i, t in enumerate(src.frontier)
            )
        if not kept:
            with _naming(tid):
                pending = await self._pending_outside(store, tid, pending, ns)
        status: ThreadStatus
        if ns == "" and not final:
            status, pending = "done", ()
        elif pending:
            status = "paused"
        elif kept and th is not None and th.status == "failed":
            status = "failed"  # the failed task awaits its retry, as before the update
        else:
            # Pending work that no runner owns waits for invoke(None), as at a breakpoint
            # ("running" would claim a live runner: what a crashed run looks like).
            status = "paused"
        ck = CheckpointRecord(
            ck_id,
            tid,
            ns,
            src.id if src else None,
            src.step + 1 if src else -1,
            "update",
            applied.versions,
            final,
            {"as_node": as_node},
            now(),
            applied.bases,
        )
        if target.path:
            await self._continue_parents(store, tid, owner, th, target.path)
        try:
            await self._commit_update(
                store, tid, owner, th, ns, ck, writes, tasks, memos, status, pending
            )
        except (LeaseHeldError, LeaseLostError, HeadConflictError) as e:
            raise ThreadBusyError(tid, getattr(e, "owner", None)) from e
        return ck_id

    async def _commit_update(
        self,
        store: Checkpointer,
        tid: ThreadId,
        owner: str,
        th: ThreadRecord | None,
        ns: str,
        ck: CheckpointRecord,
        writes: list[Any],
        tasks: list[TaskRecord],
        memos: list[MemoRecord],
        status: ThreadStatus,
        pending: tuple[PauseId, ...],
    ) -> None:
        """One transaction, which gives the lease up; a new thread's row is created by it
        (never alone: a failed commit leaves no thread behind)."""
        await store.commit(
            tid,
            owner,
            CommitBatch(
                ns=ns,
                checkpoint=ck,
                channels=writes,
                tasks=tasks,
                memos=memos,
                thread=ThreadUpdate(status, pending, self.name),
                expected_head=th.head if th is not None else None,
                check_head=True,
                acquire_ttl=self.lease_ttl if th is None or th.head is None else None,
                release=True,
            ),
        )

    async def _replan(
        self,
        run: Run,
        ck_id: CheckpointId,
        writers: list[str],
        base: CheckpointRecord | None,
        *,
        explicit: bool,
    ) -> tuple[tuple[TaskSpec, ...] | None, dict[str, Any]]:
        """The frontier the writers' edges give on the updated state (None when it cannot
        be told: a writer that routes with ``Command(goto=...)`` has no edges to evaluate),
        and the join barriers an explicit ``as_node`` advanced."""
        if writers == [END]:
            return (), {}
        if not explicit and any(
            self.nodes[w].destinations is not None for w in writers if w in self.nodes
        ):
            return None, {}
        targets: list[Any] = []
        for w in writers:
            targets += await run._route_from(w, None)
        joins = self.edges.joins
        changed: dict[str, Any] = {}
        if joins and explicit:
            fired, changed = plan.advance_joins(joins, run.hidden, writers)
            targets += fired
        elif joins and base is not None:
            # The step's joins fired as they did: the barriers it started from decide.
            keys = {
                k: v for k, v in base.channel_versions.items() if k.startswith(plan.JOIN_PREFIX)
            }
            chains = {k: base.channel_bases[k] for k in keys if k in base.channel_bases}
            with _naming(base.thread_id, base.id):
                seen = await self._store_of(run).load_channels(
                    base.thread_id, base.ns, keys, chains
                )
            targets += plan.advance_joins(joins, seen, writers)[0]
        return plan.make_frontier(ck_id, run.ns, targets), changed

    @staticmethod
    def _store_of(run: Run) -> Checkpointer:
        assert run.store is not None
        return run.store

    async def _pending_outside(
        self, store: Checkpointer, tid: ThreadId, pending: tuple[PauseId, ...], ns: str
    ) -> tuple[PauseId, ...]:
        """The pending pauses that do not belong to namespace ``ns`` (or below it)."""
        if not pending or ns == "":
            return ()
        recs = {p.id: p for p in await store.get_pauses(tid, list(pending))}
        return tuple(
            p
            for p in pending
            if p in recs and recs[p].ns != ns and not recs[p].ns.startswith(ns + "|")
        )

    async def _continue_parents(
        self,
        store: Checkpointer,
        tid: ThreadId,
        owner: str,
        th: ThreadRecord | None,
        path: list[tuple[str, CheckpointRecord, TaskSpec]],
    ) -> None:
        """Make each ancestor's task that runs the updated subgraph run it again: a
        completed record would be reused and the update never reach the parent. (Written
        first: alone, it only makes the task finish its unchanged subgraph again.)"""
        for ns, head, spec in path:
            with _naming(tid, head.id):
                rec = (await store.load_tasks(tid, ns, head.id)).get(spec.id)
            if rec is None or rec.status != "completed":
                continue
            again = TaskRecord(head.id, spec.id, spec.node, "pending", attempts=rec.attempts)
            await store.commit(
                tid,
                owner,
                CommitBatch(
                    ns=ns,
                    tasks=[again],
                    expected_head=th.head if th is not None else None,
                    check_head=True,
                ),
            )

    def update_state(
        self,
        thread_id: str,
        values: Mapping[str, Any] | None,
        *,
        as_node: str | None = None,
        checkpoint_id: str | None = None,
    ) -> str:
        """Sync ``aupdate_state``."""

        async def go() -> str:
            return await self.aupdate_state(
                thread_id, values, as_node=as_node, checkpoint_id=checkpoint_id
            )

        return _sync.run_sync("update_state", go)


def _same_frontier(a: Sequence[TaskSpec], b: Sequence[TaskSpec]) -> bool:
    """Same nodes in the same order, same ``Send`` arguments."""
    if len(a) != len(b):
        return False
    try:
        return all(
            x.node == y.node and x.has_arg == y.has_arg and (not x.has_arg or bool(x.arg == y.arg))
            for x, y in zip(a, b, strict=True)
        )
    except Exception:  # arguments that cannot be compared are not known to be the same
        return False
