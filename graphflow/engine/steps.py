"""A superstep of a run, as functions of the ``Run`` they advance (``engine.run``).

``step`` plans the step (``plan.plan_step``: reuse completed tasks, hold at gates), runs its
tasks (``TaskRunner``), and then either ``stop``s (a task paused or failed: its records and
pauses are committed, the run ends there) or ``advance``s (the writes are applied through the
reducers in node-name order and the next checkpoint is committed, pausing there for
``interrupt_after`` gates).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from checkpoints.batch import CommitBatch, ThreadUpdate
from checkpoints.models import (
    PauseId,
    PauseRecord,
    TaskId,
    TaskRecord,
    TaskSpec,
    ThreadStatus,
    new_checkpoint_id,
    next_version,
    now,
)
from graphflow.engine import apply, plan
from graphflow.engine.context import FreezeSignal, PauseSignal
from graphflow.engine.outcomes import Outcome, StepTasks, as_update
from graphflow.engine.pauses import PauseRequest, make_pause_id
from graphflow.engine.start import deferred
from graphflow.engine.witness import GATES, pause_event
from graphflow.errors import GraphflowError, GraphValidationError, NodeError, ThreadFrozenError
from graphflow.types import RunResult, Send

if TYPE_CHECKING:  # (the run passes itself in; run.py imports this module)
    from graphflow.engine.run import Run


async def step(
    run: Run,
    ck: Any,
    *,
    resumed: bool,
    first: tuple[Mapping[TaskId, TaskRecord], Mapping[TaskId, dict[str, Any]]] | None,
) -> RunResult | None:
    """Run one superstep from checkpoint ``ck``; a result when the run stops."""
    step = ck.step + 1
    records: Mapping[TaskId, TaskRecord] = {}
    memos: Mapping[TaskId, dict[str, Any]] = {}
    gates: list[PauseRecord] = []
    if resumed and run.store is not None:
        if first is not None:
            records, memos = first
        else:
            records = await run.store.load_tasks(run.thread_id, run.ns, ck.id)
            memos = await run.store.load_memos(run.thread_id, run.ns, ck.id)
        if run.parent is None:  # events an earlier run could not write
            run.witness.take_outbox(ck.id, memos)
        # Gates after a committed step hold the next one until they are answered, also
        # when another pause of the thread was: this namespace's, and those of subgraph
        # tasks (a child whose run ended at its gate never reaches its own check).
        gates = [p for p in run.known_pauses.values() if p.kind == "after"]
        if not run.answers or gates:
            answered = await run.load_answers()
            gates = [p for p in gates if p.id not in answered]
            held = [p for p in gates if p.ns == run.ns]
            if held:
                return await stop(run, StepTasks(ck), step, [], [], held)
    planned = plan.plan_step(
        run.ns, ck.frontier, records, run.answers, run.spec.interrupt_before, gates
    )
    if planned.gates:
        # A gate on any task holds the whole step (as LangGraph's breakpoints do): its
        # siblings wait with it, and continuing releases the step at once.
        return await stop(run, StepTasks(ck), step, [], planned.gates, [])
    view = None
    if any(not s.has_arg for s in planned.to_run):
        view = run.spec.schema.view(run.values)
    runner = run.task_runner()
    done = await runner.run_step(planned.to_run, step, ck, view, memos, records, run.answers)
    for spec, rec in planned.reused:
        writes = list(rec.writes or ())
        done.outcomes[spec.id] = Outcome(
            spec, "completed", writes, rec.routes, attempts=rec.attempts
        )
    for spec, mine in planned.held:  # stays paused at its child's gate
        done.outcomes[spec.id] = Outcome(spec, "paused", nested=mine)
    ordered = [done.outcomes[s.id] for s in ck.frontier if s.id in done.outcomes]
    failed = [o for o in ordered if o.status in ("failed", "frozen")]
    pauses = [(o.spec, p) for o in ordered if o.status == "paused" for p in o.pauses]
    nested = [r for o in ordered if o.status == "paused" for r in o.nested]
    if failed or pauses or nested:
        return await stop(run, done, step, failed, pauses, nested)
    gated = plan.gated_after(run.spec.interrupt_after, [o.spec for o in ordered], run.answers)
    return await advance(run, done, step, ordered, gated)


async def stop(
    run: Run,
    done: StepTasks,
    step: int,
    failed: list[Outcome],
    pauses: list[tuple[TaskSpec, PauseRequest]],
    nested: list[PauseRecord],
) -> RunResult:
    """Commit a step that cannot go on and end the run there: a task froze the thread
    (``frozen``, whatever else happened: the pauses of its siblings are kept for after the
    unfreeze), a task failed (``failed``), or tasks paused (``paused``)."""
    created = now()
    new_pauses: list[PauseRecord] = []
    all_pauses: list[PauseRecord] = []
    root_ck = run.root.checkpoint or done.checkpoint
    for spec, req in pauses:
        pid = PauseId(make_pause_id(spec.id, req.key))
        rec = run.known_pauses.get(pid)
        if rec is None:
            # The thread's checkpoint (the root's), also for a pause inside a subgraph:
            # it is the one get_state(checkpoint_id=...) and a fork can start from.
            rec = PauseRecord(
                pid,
                run.thread_id,
                run.ns,
                root_ck.id,
                spec.id,
                run.node_path(spec.node),
                req.kind,
                req.value,
                created,
            )
            new_pauses.append(rec)
            run.known_pauses[pid] = rec
        all_pauses.append(rec)
    all_pauses += nested  # pauses of subgraph tasks, stored by the subgraph runs
    pending = tuple(p.id for p in all_pauses)
    frozen = [o for o in failed if o.status == "frozen"]
    status: ThreadStatus = "frozen" if frozen else "failed" if failed else "paused"
    witness = run.witness
    if witness.enabled:  # (no event drafted for a graph that keeps none)
        for p in new_pauses:
            if p.kind in GATES:
                witness.add(*pause_event(p), derivable=True)
    await witness.flush()
    if run.committer is not None:
        thread = None if run.parent else ThreadUpdate(status, pending, run.spec.name)
        outbox = witness.outbox(root_ck.id) if run.parent is None else []
        batch = CommitBatch.stop(
            run.ns, thread, tasks=done.stop_records(), pauses=new_pauses, memos=outbox
        )
        if thread is not None and status == "paused" and any(map(deferred, all_pauses)):
            # A deferred call is evaluated again by a later run: a worker's, once due.
            batch.runnable_at = created + run.spec.defer_retry
        await run.committer.commit(batch, last=True)
    if run.thread is not None:
        run.thread.status, run.thread.pending_pause_ids = status, pending
    if frozen:
        reason = frozen[0].reason or "frozen by a node"
        if run.parent is not None:
            raise FreezeSignal(reason)  # freezes the thread, through the parent's task
        raise ThreadFrozenError(run.thread_id, reason)
    if failed:
        err = failed[0].error
        assert err is not None
        node = run.spec.nodes.get(failed[0].spec.node)
        # (a NodeError of another graph a plain node invoked names that graph's node: this
        # one failed, and is what to retry)
        foreign = isinstance(err, NodeError) and node is not None and node.subgraph is None
        if isinstance(err, GraphflowError) and not foreign:
            raise err
        raise NodeError(
            run.node_path(failed[0].spec.node),
            err,
            thread_id=run.thread_id if run.committer is not None else None,
        ) from err
    if run.parent is not None:
        raise PauseSignal([], records=all_pauses)  # pauses the parent's task
    if run.committer is None:  # (an interrupt() compile could not see: in a helper)
        nodes = tuple(dict.fromkeys(p.node for p in all_pauses))
        raise GraphValidationError(
            f"nodes {list(nodes)} paused (interrupt() or a tool confirmation), so the graph "
            "that runs them needs a checkpointer (compile(checkpointer=...)) to resume them",
            nodes,
        )
    return run.paused_result(all_pauses)


async def advance(
    run: Run, done: StepTasks, step: int, ordered: list[Outcome], gated: list[TaskSpec]
) -> RunResult | None:
    """Apply a finished step and commit the next checkpoint; with ``gated`` tasks (of
    ``interrupt_after`` nodes), pause at that checkpoint in the same transaction."""
    ck = done.checkpoint
    schema = run.spec.schema
    by_name = sorted(ordered, key=lambda o: o.spec.node) if len(ordered) > 1 else ordered
    task_writes = [(o.spec.node, o.writes) for o in by_name]
    version = next_version()
    hidden = run.hidden
    applied = apply.apply_writes(
        schema,
        {**run.values, **hidden} if hidden else run.values,
        ck.channel_versions,
        ck.channel_bases,
        task_writes,
        version,
    )
    # (only an engine write adds a hidden key: joins, a subgraph's output)
    run.values = apply.user_values(applied) if hidden else applied.values
    if run.emitter.updates:
        for data in _step_updates(run, by_name):
            run.emitter.emit("updates", None, step, data)
    if run.emitter.values and run.parent is None:
        run.emitter.emit("values", None, step, schema.view(run.values))
    targets: list[str | Send] = []
    for o in by_name:
        targets += o.routes if o.routes is not None else await run.route(o.spec.node)
    nxt = apply.next_checkpoint(
        ck,
        new_checkpoint_id(),
        applied,
        hidden,
        task_writes,
        targets,
        run.spec.edges.joins,
        run.collect,
        version,
    )
    run.hidden = nxt.hidden
    gates = _after_gates(run, nxt.record, gated) if gated else []
    witness = run.witness
    if witness.enabled:
        for p in gates:
            witness.add(*pause_event(p), derivable=True)
    outbox = []
    if witness.pending or witness.outbox_at is not None:
        await witness.flush()
        if run.parent is None:
            outbox = witness.outbox(nxt.record.id)
    await run.commit_checkpoint(
        nxt.record, nxt.writes, tasks=done.kept_records(), pauses=gates, memos=outbox
    )
    run.answers = {}
    if not gates:
        return None
    if run.parent is not None:
        raise PauseSignal([], records=gates)  # pauses the parent's task
    return run.paused_result(gates)


def _after_gates(run: Run, new: Any, gated: list[TaskSpec]) -> list[PauseRecord]:
    """The ``after`` pauses of a committed step's gated tasks, raised at ``new``."""
    root = run.root.checkpoint if run.parent is not None else None
    created = now()
    return [
        PauseRecord(
            PauseId(make_pause_id(spec.id, "after")),
            run.thread_id,
            run.ns,
            # The thread's checkpoint: the new one, or the root's for a subgraph's pause.
            (root or new).id,
            spec.id,
            run.node_path(spec.node),
            "after",
            {"node": spec.node},
            created,
        )
        for spec in gated
    ]


def _step_updates(run: Run, ordered: list[Outcome]) -> list[dict[str, Any]]:
    """A step's ``updates`` events: ``{node: update}`` for every node that ran; a node
    that ran as several tasks (``Send`` fan-out) has each further task's update in a
    further event of the step, in task order, so no update is lost."""
    events: list[dict[str, Any]] = []
    for o in ordered:
        path = run.node_path(o.spec.node)
        for data in events:
            if path not in data:
                break
        else:
            data = {}
            events.append(data)
        data[path] = as_update(run.spec.schema, o.writes)
    return events
