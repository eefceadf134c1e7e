"""``update_state``: writing to a thread's state from outside a run, as LangGraph does.

The update counts as a write of a node (``as_node``, or else the node that wrote the
checkpoint's step) and that node's edges are evaluated again on the new state. When they
lead to the tasks the checkpoint already has (same nodes, same ``Send`` arguments), those
tasks are kept as they are, with their committed records, memoized steps (an agent's model
answers) and pending pauses; otherwise the new frontier replaces them. ``checkpoint_id``
forks from an older checkpoint, or names a subgraph's checkpoint: the update is made in
that namespace and the parent's pending task continues the subgraph from it. An update
never leaves a thread ``running``: a thread with pending work and no pending pause after an
update is ``paused`` (``invoke(None)`` continues it). Each update is one transaction. Where
an update leads (the writers' edges evaluated again) is ``engine.replan``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checkpoints.base import Checkpointer
from checkpoints.batch import CommitBatch, ThreadUpdate
from checkpoints.errors import LeaseHeldError
from checkpoints.lease import new_owner
from checkpoints.models import (
    CheckpointRecord,
    MemoRecord,
    PauseId,
    TaskRecord,
    TaskSpec,
    ThreadId,
    ThreadRecord,
    ThreadStatus,
    new_checkpoint_id,
    next_version,
)
from graphflow.engine import lease, plan, targets
from graphflow.engine.apply import apply_writes, collect_out, set_write
from graphflow.engine.committer import Committer
from graphflow.engine.reads import carried_step, naming
from graphflow.engine.replan import replan, same_frontier
from graphflow.engine.start import materialize
from graphflow.errors import (
    InvalidArgumentError,
    InvalidUpdateError,
    ThreadBusyError,
    ThreadCancelledError,
    ThreadFrozenError,
)
from graphflow.spec import GraphSpec
from graphflow.types import END, START


async def update_state(
    spec: GraphSpec,
    store: Checkpointer,
    thread_id: str,
    values: Mapping[str, Any] | None,
    *,
    as_node: str | None = None,
    checkpoint_id: str | None = None,
) -> str:
    """Write ``values`` through the reducers as a new checkpoint; return its id (see the
    module docstring). Raises ``ThreadCancelledError`` for a cancelled thread,
    ``ThreadBusyError`` while a run holds it, ``InvalidUpdateError`` for unknown keys or when
    several nodes wrote the step (give ``as_node``); nothing is written then."""
    tid = ThreadId(thread_id)
    with naming(thread_id):
        th = await store.get_thread(tid)
        if th is not None and th.status == "cancelled":
            raise ThreadCancelledError(thread_id)
        if th is not None and th.status == "frozen":
            raise ThreadFrozenError(thread_id)
        committer = Committer(store, tid, new_owner(), spec.lease_ttl)
        if th is None or th.head is None:
            if checkpoint_id is not None:
                raise InvalidArgumentError(
                    f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}"
                )
            committer.take_lease = True  # the update's commit creates the thread
        else:
            try:
                th = await store.acquire_lease(
                    tid, committer.owner, spec.lease_ttl, graph_name=spec.name
                )
            except LeaseHeldError as e:
                raise ThreadBusyError(thread_id, e.owner) from e
        ttl = spec.lease_ttl
        async with lease.held(store, tid, committer.owner, ttl, lambda: committer.released):
            if th is not None and th.status == "cancelled":
                raise ThreadCancelledError(thread_id)
            values = dict(values or {})
            return await _update(spec, committer, th, values, as_node, checkpoint_id)


async def _update(
    spec: GraphSpec,
    committer: Committer,
    th: ThreadRecord | None,
    values: dict[str, Any],
    as_node: str | None,
    checkpoint_id: str | None,
) -> str:
    store, tid = committer.store, committer.thread_id
    target = await targets.locate(spec, store, th, checkpoint_id)
    graph, ns, src = target.spec, target.ns, target.ck
    if as_node is not None and as_node not in graph.nodes and as_node not in (START, END):
        where = f"the subgraph in namespace {ns!r}" if ns else "this graph"
        raise InvalidArgumentError(f"as_node {as_node!r} is not a node of {where}")
    writers, base = [as_node] if as_node is not None else [START], None
    if as_node is None and src is not None:
        writers, base = await targets.writers(store, src)
        if len(writers) > 1:
            raise InvalidUpdateError(
                f"thread {tid!r}: the step of checkpoint {src.id!r} was written by "
                f"{writers}; give update_state(..., as_node=...) to say which node the "
                "update counts as"
            )
    author = as_node or "update_state"  # (what errors about the values name)
    values = graph.schema.checked_update(values, author)

    state: dict[str, Any] = {}
    hidden: dict[str, Any] = {}
    if src is not None:
        with naming(tid, src.id):
            stored = await store.load_channels(tid, ns, src.channel_versions, src.channel_bases)
        graph.schema.check_loaded(stored, tid, src.id)
        hidden = {k: stored.pop(k) for k in list(stored) if plan.is_hidden(k)}
        state = stored
        versions, bases = src.channel_versions, src.channel_bases
    else:
        state = graph.schema.initial()
        versions, bases = {}, {}
    forking = src is not None and not target.at_head
    version = next_version()
    applied = apply_writes(
        graph.schema,
        {**state, **hidden},
        versions,
        bases,
        [(author, values.items())],
        version,
        force_set=forking,
    )
    if src is None:  # a new thread: its first state must be complete, as an input's
        graph.schema.check_complete(applied.values, "update_state")
    writes = list(applied.writes)
    for k in sorted(set(applied.values) - set(applied.versions)):  # defaults never stored
        writes.append(set_write(k, version, applied.values[k]))
        applied.versions[k] = version
    state = {k: v for k, v in applied.values.items() if not plan.is_hidden(k)}
    if forking:  # the fork starts its own list chains
        writes += materialize(
            {**state, **hidden}, version, applied.versions, {w.channel for w in writes}
        )
        applied.bases = {}
    ck_id = new_checkpoint_id()
    frontier, barriers = await replan(
        graph, store, state, hidden, ns, ck_id, writers, base, explicit=as_node is not None
    )
    for k, v in barriers.items():  # join barriers an explicit as_node advanced
        hidden[k] = v
        writes.append(set_write(k, version, v))
        applied.versions[k] = version
    if target.node is not None:
        # The parent's task gets what its subgraph wrote to shared keys: this update too.
        outputs = target.node.outputs
        out = [[outputs[k], v] for k, v in values.items() if k in outputs]
        if out:
            collect_out(hidden, out, version, applied.versions, applied.bases, writes)

    tasks: list[TaskRecord] = []
    memos: list[MemoRecord] = []
    pending = tuple(th.pending_pause_ids) if th is not None else ()
    kept = False
    final: tuple[TaskSpec, ...]
    if src is None:
        final = frontier or ()
    elif frontier is not None and not same_frontier(frontier, src.frontier):
        final = frontier
    elif target.at_head:
        # The pending step is kept as it is (its tasks, their records, memoized steps
        # and pauses): only the state its tasks will see changes.
        kept, final = True, src.frontier
        tasks, memos = await carried_step(store, src, ck_id)
    else:  # a fork of the same step: new tasks, which run again
        final = tuple(
            TaskSpec(plan.task_id(ck_id, ns, t.node, i), t.node, t.has_arg, t.arg)
            for i, t in enumerate(src.frontier)
        )
    if not kept:
        with naming(tid):
            pending = await _pending_outside(store, tid, pending, ns)
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
        id=ck_id,
        thread_id=tid,
        ns=ns,
        parent_id=src.id if src else None,
        step=src.step + 1 if src else -1,
        source="update",
        channel_versions=applied.versions,
        frontier=final,
        metadata={"as_node": as_node},
        channel_bases=applied.bases,
    )
    if target.path:
        await _continue_parents(committer, th, target.path)
    # One transaction, which gives the lease up; a new thread's row is created by it
    # (never alone: a failed commit leaves no thread behind).
    batch = CommitBatch.step(
        ck,
        writes,
        tasks=tasks,
        memos=memos,
        thread=ThreadUpdate(status, pending, spec.name),
        expected_head=th.head if th is not None else None,
        check_head=True,
    )
    await committer.commit(batch, last=True)
    return ck_id


async def _pending_outside(
    store: Checkpointer, tid: ThreadId, pending: tuple[PauseId, ...], ns: str
) -> tuple[PauseId, ...]:
    """The pending pauses that do not belong to namespace ``ns`` (or below it)."""
    if not pending or ns == "":
        return ()
    recs = {p.id: p for p in await store.get_pauses(tid, list(pending))}
    return tuple(p for p in pending if p in recs and not plan.in_namespace(recs[p].ns, ns))


async def _continue_parents(
    committer: Committer,
    th: ThreadRecord | None,
    path: list[tuple[str, CheckpointRecord, TaskSpec]],
) -> None:
    """Make each ancestor's task that runs the updated subgraph run it again: a completed
    record would be reused and the update never reach the parent. (Written first: alone, it
    only makes the task finish its unchanged subgraph again.)"""
    tid = committer.thread_id
    for ns, head, task in path:
        with naming(tid, head.id):
            rec = (await committer.store.load_tasks(tid, ns, head.id)).get(task.id)
        if rec is None or rec.status != "completed":
            continue
        again = TaskRecord(head.id, task.id, task.node, "pending", attempts=rec.attempts)
        batch = CommitBatch.flush(
            ns, tasks=[again], expected_head=th.head if th is not None else None, check_head=True
        )
        await committer.commit(batch)
