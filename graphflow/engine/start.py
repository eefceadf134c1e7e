"""How a run starts: from a new input, from a fork of an older checkpoint, or from answers.

Each function makes the run's first checkpoint (``start_input``, ``fork``) or takes the
answers a resume brings (``take_answers``); the run then executes supersteps from there.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from checkpoints.errors import pauses_missing
from checkpoints.models import (
    AnswerRecord,
    ChannelWrite,
    CheckpointRecord,
    PauseId,
    PauseRecord,
    TaskSpec,
    new_checkpoint_id,
    next_version,
)
from graphflow.engine import answers, plan
from graphflow.engine.apply import apply_writes, set_write, user_values
from graphflow.engine.pauses import UNSET
from graphflow.errors import NothingToResumeError
from graphflow.types import START, RunResult

if TYPE_CHECKING:  # (the run passes itself in; run.py imports this module)
    from graphflow.engine.run import Run


async def start_input(
    run: Run, input: Any, head: CheckpointRecord | None, *, forking: bool
) -> None:
    """Make the run's first checkpoint from a new input, applied to ``head``'s state (a new
    run on a thread, or a fork's input) or to the schema's defaults (a new thread)."""
    schema = run.spec.schema
    update = schema.input_update(input)
    version = next_version()
    if head is None:
        applied = apply_writes(
            schema, schema.initial(), {}, {}, [("input", update.items())], version
        )
        # (a subgraph's first state comes from its parent's task: name that node)
        schema.check_complete(applied.values, run.path_prefix[:-1] or "input")
        stored = {w.channel for w in applied.writes}
        writes = list(applied.writes)
        for k in sorted(set(applied.values) - stored):  # defaults are stored too
            writes.append(set_write(k, version, applied.values[k]))
            applied.versions[k] = version
    else:
        applied = apply_writes(
            schema,
            run.values,
            head.channel_versions,
            head.channel_bases,
            [("input", update.items())],
            version,
            force_set=forking,
        )
        writes = applied.writes
        if forking:
            written = {w.channel for w in writes}
            writes += materialize(applied.values, version, applied.versions, written)
            applied.bases = {}
        # A new run starts clean: join barriers of an earlier run are reset.
        for k in run.hidden:
            applied.versions.pop(k, None)
        run.hidden = {}
    run.values = user_values(applied)
    if run.principal is not None and run.parent is None:  # bound to the thread (see execute)
        run.hidden[plan.PRINCIPAL_KEY] = run.principal
        writes.append(set_write(plan.PRINCIPAL_KEY, version, run.principal))
        applied.versions[plan.PRINCIPAL_KEY] = version
    ck_id = new_checkpoint_id()
    frontier = plan.make_frontier(ck_id, run.ns, await run.route(START))
    ck = CheckpointRecord(
        id=ck_id,
        thread_id=run.thread_id,
        ns=run.ns,
        parent_id=head.id if head else None,
        step=head.step + 1 if head else -1,
        source="input",
        channel_versions=applied.versions,
        frontier=frontier,
        channel_bases=applied.bases,
    )
    # Made before any node runs: nothing durable depends on it until the step's commit,
    # which makes it durable too (commits stay in order), so it need not wait for an fsync.
    await run.commit_checkpoint(ck, writes, durable=not frontier)


def materialize(
    values: Mapping[str, Any],
    version: int,
    versions: dict[str, int],
    written: Collection[str] = (),
) -> list[ChannelWrite]:
    """Rewrite the list channels of a fork as whole values: the fork starts its own chains.

    A list channel is stored as a ``set`` row followed by a chain of ``append`` rows; a
    branch that extended the chain of a row the fork shares (a list stored whole counts
    too: the older branch may have appended to it) would interleave its appends with the
    fork's, and neither branch could be read again. ``written`` are channels this commit
    already stores whole.
    """
    out = []
    for k in sorted(values):
        if k in versions and k not in written and isinstance(values[k], list):
            out.append(set_write(k, version, values[k]))
            versions[k] = version
    return out


async def fork(run: Run, src: CheckpointRecord) -> None:
    """Make a copy of an older checkpoint the new head, with fresh task ids."""
    version = next_version()
    versions = dict(src.channel_versions)
    writes = materialize({**run.values, **run.hidden}, version, versions)
    ck_id = new_checkpoint_id()
    frontier = tuple(
        TaskSpec(plan.task_id(ck_id, run.ns, t.node, i), t.node, t.has_arg, t.arg)
        for i, t in enumerate(src.frontier)
    )
    ck = src.child(
        ck_id,
        "fork",
        step=src.step,
        channel_versions=versions,
        channel_bases={},
        frontier=frontier,
        metadata={"forked_from": src.id},
    )
    await run.commit_checkpoint(ck, writes)


async def take_answers(
    run: Run,
    resume: Any,
    records: Sequence[PauseRecord] | None = None,
    stored: Mapping[PauseId, AnswerRecord] | None = None,
) -> RunResult | None:
    """Take the answers given to this call (``engine.answers.resolve``); return a result
    when nothing can proceed. ``records`` and ``stored``: the pending pause records and
    the thread's answers, when the caller read them."""
    assert run.store is not None and run.thread is not None and run.committer is not None
    pending_ids = list(run.thread.pending_pause_ids)
    if not pending_ids:
        if resume is not UNSET or run.decisions:
            raise NothingToResumeError(run.thread_id)
        return None
    if records is None:
        records = await run.store.get_pauses(run.thread_id, [PauseId(p) for p in pending_ids])
    missing = sorted(set(pending_ids) - {p.id for p in records})
    if missing:
        raise pauses_missing(run.thread_id, missing, run.thread.head)
    pending = {p.id: p for p in records}
    run.known_pauses.update(pending)
    found = answers.resolve(
        run.thread_id,
        records,
        resume=resume,
        decisions=run.decisions,
        by=run.decider,
        release_gates=True,
    )
    run.ignored = found.ignored
    await run.committer.decisions(found.decisions)
    run.witness.recall(records)  # (a pause's event that a power loss took: see witness)
    run.witness.add_answers(found.decisions, found.answers, pending)
    # The answers are written with the run's first commit (one fsync fewer): until then
    # nothing of the resumed step is durable, and a crash loses the call, not the thread.
    run.committer.hold_answers(found.answers)
    answered = await run.load_answers(stored)
    if not any(p in answered or deferred(pending[p]) for p in pending_ids):
        # Nothing runs and nothing more is committed: the decisions' events are written now
        # (best effort: the decision records themselves are in the store).
        await run.witness.flush()
        return run.paused_result([pending[p] for p in pending_ids if p in pending])
    return None


def deferred(pause: PauseRecord) -> bool:
    """Whether a pause waits on a deferred policy decision: such a call is evaluated again
    on every run of the thread, even one that answers nothing."""
    value = pause.value
    if pause.kind != "tool_confirmation" or not isinstance(value, Mapping):
        return False
    request = value.get("request")
    return isinstance(request, Mapping) and request.get("policy_decision") == "defer"
