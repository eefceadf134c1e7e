"""Answering a thread from outside a run: ``submit``, ``pending_pauses``, ``list_decisions``.

``submit`` records answers durably without running anything (append only, no lease needed:
the next run of the thread, in any process, applies them); the answers follow the same
rules as ``invoke``'s (``engine.answers``). Once every pending pause is answered, the same
transaction marks the thread runnable (``Checkpointer.record_answers``) for a worker.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

from checkpoints.base import Checkpointer
from checkpoints.errors import CheckpointError, LeaseHeldError, ThreadChangedError
from checkpoints.lease import lease_free
from checkpoints.models import DecisionRecord, ThreadId, now
from graphflow.decisions import Decision
from graphflow.engine import answers, start
from graphflow.engine.pauses import UNSET, pause_from_record, principal_name
from graphflow.engine.witness import Witness
from graphflow.errors import (
    InvalidArgumentError,
    NothingToResumeError,
    ThreadBusyError,
    ThreadFrozenError,
    ThreadNotFoundError,
)
from graphflow.evidence import EvidenceLog
from graphflow.types import Pause


async def submit(
    store: Checkpointer,
    thread_id: str,
    *,
    decisions: Mapping[str, Decision],
    resume: Any = UNSET,
    by: Any = None,
    reason: str | None = None,
    evidence: EvidenceLog | None = None,
) -> tuple[DecisionRecord, ...]:
    """Record answers to a paused thread's pauses; return the decisions that answered
    nothing (each recorded, with the reason in ``note``). ``decisions`` must have been
    checked (``answers.check_decisions``). Their evidence is written first: while the log
    cannot be written, nothing is recorded (``EvidenceError``); when the store then refuses
    the records, each decision gets a second event saying it did not take effect.

    The records are written only if the thread is still as it was read, idle, in the same
    transaction (``record_answers(if_idle_at=...)``): a run that took it meanwhile makes
    this a ``ThreadBusyError``; one that came and went, a new try while the thread waits on
    the same pauses, else ``ThreadChangedError`` (the answers were given to pauses that are
    gone: nothing is recorded, and the caller reads the pauses again).
    """
    if resume is UNSET and not decisions:
        raise InvalidArgumentError("submit needs decisions= or resume= to record")
    if by is not None:  # an id, or a Principal (its roles count for its own decisions)
        decisions = {
            k: d if d.by is not None else dataclasses.replace(d, by=by)
            for k, d in decisions.items()
        }
        by = principal_name(by)
    answering: tuple[str, ...] | None = None  # the pauses of the first try
    for attempt in itertools.count(1):
        try:
            return await _submit(
                store, thread_id, decisions, resume, by, reason, evidence, answering
            )
        except _Changed as changed:
            if attempt == SUBMIT_TRIES or (answering is not None and changed.pending != answering):
                raise changed.error from None
            answering = changed.pending
    raise AssertionError("unreachable")  # pragma: no cover


SUBMIT_TRIES = 5
"""Tries of a ``submit`` whose thread keeps changing between its read and its write."""


class _Changed(Exception):
    """A try of ``submit`` met ``ThreadChangedError``: the pauses it had read."""

    def __init__(self, error: ThreadChangedError, pending: tuple[str, ...]):
        super().__init__(str(error))
        self.error, self.pending = error, pending


async def _submit(
    store: Checkpointer,
    thread_id: str,
    decisions: Mapping[str, Decision],
    resume: Any,
    by: Any,
    reason: str | None,
    evidence: EvidenceLog | None,
    answering: tuple[str, ...] | None,
) -> tuple[DecisionRecord, ...]:
    """One try of ``submit``: read the thread, resolve the answers, write them fenced. A
    try after the first (``answering``: the pauses the first read) answers only those."""
    th = await store.get_thread(ThreadId(thread_id))
    if th is None:
        raise ThreadNotFoundError(thread_id)
    if th.status == "frozen":
        raise ThreadFrozenError(thread_id)
    if th.lease_owner is not None and not lease_free(
        th.lease_owner, th.lease_expires_at, "", now()
    ):
        # A run holds it, perhaps applying answers to these pauses or running the approved
        # call: a decision now could not take effect, yet would be recorded as applied.
        raise ThreadBusyError(thread_id, th.lease_owner, answering=True)
    pending = list(th.pending_pause_ids)
    if answering is not None and tuple(sorted(pending)) != answering:
        raise _Changed(ThreadChangedError(thread_id), tuple(sorted(pending)))
    if not pending:
        raise NothingToResumeError(thread_id)
    records = await store.get_pauses(th.thread_id, pending)
    found = answers.resolve(
        thread_id, records, resume=resume, decisions=decisions, by=by, reason=reason
    )
    witness = Witness(evidence, thread_id)
    witness.recall(records)  # (a pause's event that a power loss took: see witness)
    witness.add_answers(found.decisions, found.answers, {p.id: p for p in records})
    if witness.enabled:  # (a graph without evidence records its answers all the same)
        await witness.require()
    # When every pending pause is answered now (a deferred call needs none: it is evaluated
    # again by the run), the thread is marked runnable in the same transaction, unless it
    # changed since it was read (a worker then finds it in the index at once).
    answered = {a.pause_id for a in found.answers}
    waiting = [p for p in records if p.id not in answered and not start.deferred(p)]
    if waiting:
        stored = await store.load_answers(th.thread_id, [p.id for p in waiting])
        waiting = [p for p in waiting if p.id not in stored]
    if found.decisions or found.answers:
        try:
            await store.record_answers(
                th.thread_id,
                found.decisions,
                found.answers,
                runnable_if_updated_at=None if waiting or not found.answers else th.updated_at,
                if_idle_at=th.updated_at,
            )
        except CheckpointError as e:  # (locked, read-only, full: the decisions took no effect)
            witness.add_unrecorded(found.decisions, found.answers, {p.id: p for p in records}, e)
            await witness.flush()  # (best effort: the error below is what the caller sees)
            if isinstance(e, LeaseHeldError):  # a run took the thread since it was read
                raise ThreadBusyError(thread_id, e.owner, answering=True) from e
            if isinstance(e, ThreadChangedError):
                raise _Changed(e, tuple(sorted(pending))) from None
            raise
    return found.ignored


async def pending_pauses(store: Checkpointer, thread_id: str) -> list[Pause]:
    """The pauses a thread waits on, each with the answer ``submit`` stored for it, if any
    (answered, not yet applied: the next run applies it)."""
    th = await store.get_thread(ThreadId(thread_id))
    if th is None:
        raise ThreadNotFoundError(thread_id)
    ids = list(th.pending_pause_ids)
    records = await store.get_pauses(th.thread_id, ids) if ids else []
    stored = await store.load_answers(th.thread_id, ids) if ids else {}
    return [pause_from_record(r, stored.get(r.id)) for r in records]


async def list_decisions(store: Checkpointer, thread_id: str) -> list[DecisionRecord]:
    """The thread's decision records, oldest first, as they took effect (see
    ``answers.effective``)."""
    if await store.get_thread(ThreadId(thread_id)) is None:
        raise ThreadNotFoundError(thread_id)
    return answers.effective(await store.list_decisions(ThreadId(thread_id)))
