"""``execute``: one ``invoke``/``stream`` call on a thread, from its lease to its result.

A resume takes the lease and reads everything the resumed step needs in one transaction
(``Checkpointer.resume_thread``); a new input's first commit takes the lease with it
(``Committer.take_lease``). The lease is renewed while the run works (``lease.held``) and
given up by its last commit. A run that stops on an error leaves the thread ``failed``,
never ``running`` without a live owner (damage excepted: nothing more is written to a damaged
file); ``invoke(None)`` continues a failed thread from its last checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from checkpoints.base import Checkpointer
from checkpoints.errors import (
    CheckpointError,
    CorruptCheckpointError,
    LeaseHeldError,
    head_missing,
)
from checkpoints.lease import lease_free, new_owner
from checkpoints.models import (
    CheckpointId,
    CheckpointRecord,
    ResumePoint,
    ThreadId,
    ThreadRecord,
    ThreadStatus,
    now,
)
from graphflow.decisions import Decision
from graphflow.engine import lease, plan, start
from graphflow.engine.committer import Committer
from graphflow.engine.events import Emitter
from graphflow.engine.outcomes import RunStopped
from graphflow.engine.pauses import UNSET, principal_name
from graphflow.engine.port import EngineFault
from graphflow.engine.run import Run
from graphflow.errors import (
    GraphMismatchError,
    InvalidArgumentError,
    ThreadBusyError,
    ThreadCancelledError,
    ThreadFrozenError,
    ThreadNotFoundError,
    ThreadPausedError,
)
from graphflow.evidence import EvidenceLog
from graphflow.spec import GraphSpec
from graphflow.types import Event, RunResult, StreamMode
from graphflow.validate import check_resumable


async def execute(
    spec: GraphSpec,
    store: Checkpointer | None,
    thread_id: str,
    input: Any,
    *,
    resume: Any = UNSET,
    decisions: Mapping[str, Decision] | None = None,
    checkpoint_id: str | None = None,
    principal: Any = None,
    recursion_limit: int = 100,
    sink: MemoryObjectSendStream[Event] | None = None,
    mode: StreamMode = "values",
    evidence: EvidenceLog | None = None,
    owner: str | None = None,
    lease_ttl: float | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> RunResult:
    """Run the thread until its frontier is empty or it pauses (API.md, "Running").

    ``decisions`` must have been checked (``engine.answers.check_decisions``); ``sink``
    receives the stream's events. A worker passes the lease ``owner`` it claimed the thread
    as (a fresh one otherwise), its ``lease_ttl`` (the graph's otherwise) and
    ``should_stop``, asked between steps (``RunStopped`` when it says True).
    """
    if input is not None and (resume is not UNSET or decisions):
        raise InvalidArgumentError(
            "give either an input (a new run) or resume=/decisions= (answers), not both"
        )
    tid = ThreadId(thread_id)
    emitter = Emitter(sink, mode, tid)
    options: dict[str, Any] = {
        "principal": principal,
        "decisions": decisions,
        "recursion_limit": recursion_limit,
        "evidence": evidence,
    }
    try:
        if store is None:
            check_resumable(spec)
            run = Run(spec, None, tid, committer=None, emitter=emitter, **options)
            return await _run(run, input, resume, checkpoint_id, None)
        owner = owner or new_owner()
        ttl = spec.lease_ttl if lease_ttl is None else lease_ttl
        committer = Committer(store, tid, owner, ttl)
        run = Run(spec, store, tid, committer=committer, emitter=emitter, **options)
        if should_stop is not None:
            run.should_stop = should_stop
        point = await _enter(run, committer, input, resume, checkpoint_id)
        async with lease.held(store, tid, owner, ttl, lambda: committer.released):
            try:
                return await _run(run, input, resume, checkpoint_id, point)
            except RunStopped:  # (a stream's reader gone, a worker stopping: StreamClosed too)
                await _leave(run, committer, "paused")
                raise
            except CorruptCheckpointError:
                raise  # damage: write nothing more to the file
            except Exception:
                await _leave(run, committer, "failed")
                raise
            except anyio.get_cancelled_exc_class():
                # Cancelled (a timeout around ainvoke, a stream's reader gone, Ctrl-C of
                # invoke): left paused on its pending work, never "running" without a run.
                await _leave(run, committer, "paused")
                raise
            except BaseException:
                if emitter.reader_gone:
                    await _leave(run, committer, "paused")
                raise
    except EngineFault as fault:  # the engine's own storage failed while a node ran
        raise fault.error from fault.error.__cause__


async def _leave(run: Run, committer: Committer, status: ThreadStatus) -> None:
    """After a run stopped: a thread it left ``running`` is left ``status`` instead."""
    th = run.thread
    running = th is not None and th.status == "running" and not committer.released
    if running and await committer.leave(status, run.spec.name):
        assert th is not None
        th.status = status


async def _enter(
    run: Run, committer: Committer, input: Any, resume: Any, checkpoint_id: str | None
) -> ResumePoint | None:
    """Take the lease of a resumed thread (reading what its step needs, in one transaction)
    or prepare a new input's first commit to take it."""
    store, tid, spec = committer.store, run.thread_id, run.spec
    if input is not None:
        committer.take_lease = True
        th = run.thread = await store.get_thread(tid)
        if th is not None and th.lease_owner is not None:
            owner, expires = th.lease_owner, th.lease_expires_at
            if not lease_free(owner, expires, committer.owner, now()):
                # Another run holds it (also one resuming a paused thread, which stays
                # ``paused`` until its first commit): refused now. Its run may end paused
                # before this one's first commit, which would find the head unchanged (a
                # pause is not a checkpoint) and the lease free, and put the input on top
                # of a pause.
                raise ThreadBusyError(tid, owner)
        return None
    try:
        if checkpoint_id is None:
            try:
                point = await store.resume_thread(tid, committer.owner, committer.lease_ttl)
            except CorruptCheckpointError as e:  # (no lease taken: nothing was written)
                if (mismatch := await _mismatch_of_stored(store, tid, spec)) is not None:
                    raise mismatch from e  # values of a graph whose types this one lacks
                raise
            if point is None:
                raise ThreadNotFoundError(tid)
            run.thread = point.thread
            return point
        existing = await store.get_thread(tid)
        if existing is None or existing.head is None:
            raise ThreadNotFoundError(tid)
        run.thread = await store.acquire_lease(
            tid, committer.owner, committer.lease_ttl, graph_name=spec.name
        )
        return None
    except LeaseHeldError as e:
        answering = resume is not UNSET or bool(run.decisions)
        raise ThreadBusyError(tid, e.owner, answering=answering) from e


def _mismatch(
    spec: GraphSpec, thread: ThreadRecord, head: CheckpointRecord
) -> GraphMismatchError | None:
    """The error for resuming, with ``spec``, a thread another graph made: its head waits on
    nodes ``spec`` lacks, or it keeps the name of another graph (an unnamed graph resumes
    only unnamed threads)."""
    unknown = sorted({t.node for t in head.frontier} - spec.nodes.keys())
    if unknown or (thread.graph_name is not None and thread.graph_name != spec.name):
        return GraphMismatchError(
            thread.thread_id, unknown, thread_graph=thread.graph_name, graph=spec.name
        )
    return None


async def _mismatch_of_stored(
    store: Checkpointer, tid: ThreadId, spec: GraphSpec
) -> GraphMismatchError | None:
    """``_mismatch`` for a thread whose step could not be read: its row and head checkpoint
    read alone (no channel value), or None when they cannot be read either."""
    try:
        thread = await store.get_thread(tid)
        head = None
        if thread is not None and thread.head is not None:
            head = await store.get_checkpoint(tid, "", CheckpointId(thread.head))
    except CheckpointError:
        return None
    return None if thread is None or head is None else _mismatch(spec, thread, head)


async def _run(
    run: Run, input: Any, resume: Any, checkpoint_id: str | None, point: ResumePoint | None
) -> RunResult:
    """Start the run (a new input, a fork, or the answers of a resume) and loop."""
    store, thread = run.store, run.thread
    head: CheckpointRecord | None = None
    if store is not None and thread is not None:
        ck_id = checkpoint_id or thread.head
        if point is not None:
            head = point.checkpoint
            run.spec.schema.check_loaded(point.channels, run.thread_id, head.id)
            run.set_values(point.channels)
        elif ck_id is not None:
            head = await store.get_checkpoint(run.thread_id, "", CheckpointId(ck_id))
            if head is None and checkpoint_id is None:
                raise head_missing(run.thread_id, ck_id)
            if head is None:
                raise InvalidArgumentError(f"thread {run.thread_id!r} has no checkpoint {ck_id!r}")
            await run.load_values(head)
    elif input is None:
        raise ThreadNotFoundError(run.thread_id)
    if thread is not None and thread.status == "frozen":
        raise ThreadFrozenError(run.thread_id)
    # Decisions given without ``by`` are recorded as the resume's own principal, never as
    # the thread's (the requester does not approve its own calls by default).
    run.decider = principal_name(run.principal)
    if run.principal is None and input is None:  # the thread's own (bound at its input)
        run.principal = run.hidden.get(plan.PRINCIPAL_KEY)
    forking = checkpoint_id is not None and thread is not None and checkpoint_id != thread.head
    if input is not None:
        paused = thread is not None and thread.status == "paused" and thread.pending_pause_ids
        if paused and not forking:
            assert thread is not None
            raise ThreadPausedError(run.thread_id, thread.pending_pause_ids)
        await start.start_input(run, input, head, forking=forking)
        return await run.loop(fresh=True)
    assert head is not None and thread is not None
    if (mismatch := _mismatch(run.spec, thread, head)) is not None:
        raise mismatch  # (nothing runs or is written)
    if forking:
        await start.fork(run, head)
        return await run.loop(fresh=True)
    if thread.status == "cancelled":
        raise ThreadCancelledError(run.thread_id)
    run.checkpoint = head
    early = await start.take_answers(
        run,
        resume,
        point.pauses if point is not None else None,
        point.answers if point is not None else None,
    )
    if early is not None:
        return early
    first = (point.tasks, point.memos) if point is not None else None
    return await run.loop(fresh=False, first=first)
