"""``Witness``: the runtime's writer of a run's evidence events (``graphflow.evidence``).

Node code never gets it: the engine (pauses, answers, freezes) and the agent pipeline (the
stages of a proposed tool call) queue events here, each under a key that names the stage it
records, so a stage that a rerun passes again is written once (``EvidenceLog.append_once``).

When events are written:

- before a step's commit (``steps``), all that the step queued, in one append: one write of
  the log per step that has events, none for steps that have none;
- at once, before a high or critical risk call is dispatched (``require``): its evidence is
  written before it runs, or it does not run (fail closed);
- events that could not be written are kept in the checkpoint store's outbox: a memo of the
  pseudo-task ``OUTBOX`` in the commit of the step (never lost), taken again when the thread
  is next run or audited, and written once the log is writable.

An append of pause events alone (an interrupt's or a gate's: ``derivable``) is not synced on
its own (``EvidenceLog.append_once(sync=False)``): the pause record, committed and synced
with the step right after, vouches for it. Where a power loss took the event with the log's
unsynced tail, ``recall`` writes it again from the record before the pause's answer is
recorded (``submit``) or taken (a resume), so the trail still reads pause, then answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from checkpoints import serde
from checkpoints.models import (
    AnswerRecord,
    CheckpointId,
    DecisionRecord,
    MemoRecord,
    PauseId,
    PauseRecord,
    TaskId,
    ThreadId,
)
from graphflow.evidence import (
    CallFacts,
    EventDraft,
    EvidenceError,
    EvidenceLog,
    InvalidEventError,
    stages,
)
from graphflow.evidence.events import draft_as_dict, draft_from_dict

OUTBOX = TaskId("__gf:outbox")
"""The pseudo-task whose memos at a checkpoint hold the events not yet written."""


class Witness:
    """The evidence events of one run of a thread (its subgraph runs share it)."""

    def __init__(self, log: EvidenceLog | None, thread_id: str):
        self.log = log
        self.thread_id = thread_id
        self.pending: dict[str, EventDraft] = {}
        self.failure: EvidenceError | None = None
        """Why the last write failed (None: it did not)."""
        self.failed_at: datetime | None = None
        self.outbox_at: CheckpointId | None = None
        """The checkpoint whose outbox memo holds events (to empty once written)."""
        self.derivable: set[str] = set()  # (queued keys a stored pause vouches for)

    @property
    def enabled(self) -> bool:
        return self.log is not None

    def add(self, key: str, draft: EventDraft, *, derivable: bool = False) -> None:
        """Queue an event (a key queued keeps its first); ``derivable``: see the module."""
        if self.log is not None:
            full = f"{self.thread_id}:{key}"
            if full not in self.pending:
                self.pending[full] = draft
                if derivable:
                    self.derivable.add(full)

    def recall(self, pauses: Sequence[PauseRecord]) -> None:
        """Queue again the events of pending pauses of an interrupt or gate (written once:
        a key the log holds is skipped), before the events of their answers."""
        if self.log is not None:
            for p in pauses:
                if p.kind in GATES:
                    self.add(*pause_event(p), derivable=True)

    async def flush(self) -> bool:
        """Write what is queued; False when the log cannot be written (the events stay
        queued, for the outbox and a later try)."""
        if self.log is None or not self.pending:
            return True
        items = list(self.pending.items())
        sync = not self.derivable.issuperset(self.pending)
        try:
            await self.log.aappend_once(items, sync=sync)
        except InvalidEventError:
            raise  # a builder's bug, not an unwritable log: never hidden in the outbox
        except EvidenceError as e:
            self.failure = e
            if self.failed_at is None:
                self.failed_at = datetime.now(UTC)
            return False
        for key, _ in items:
            self.pending.pop(key, None)
            self.derivable.discard(key)
        self.failure = self.failed_at = None
        return True

    async def require(self) -> None:
        """Write what is queued now (the evidence of a call about to run).

        Raises:
            EvidenceError: the log cannot be written; the events stay queued.
        """
        if self.log is None:
            raise EvidenceError("this graph keeps no evidence (compile(evidence=False))", path="")
        if not await self.flush():
            assert self.failure is not None
            raise self.failure

    def add_answers(
        self,
        decisions: Sequence[DecisionRecord],
        answers: Sequence[AnswerRecord],
        pauses: Mapping[PauseId, PauseRecord],
    ) -> None:
        """Queue the events of answers taken (by a run or ``submit``): one per decision,
        applied or not, and one per answer of an interrupt or gate (``pauses``: the pending
        pauses by id)."""
        if self.log is None:
            return
        for d in decisions:
            self.add(*decision_event(d, pauses.get(d.pause_id) if d.pause_id else None))
        for a in answers:
            p = pauses.get(a.pause_id)
            if p is not None and p.kind in GATES:
                self.add(*resume_event(p, a))

    def add_unrecorded(
        self,
        decisions: Sequence[DecisionRecord],
        answers: Sequence[AnswerRecord],
        pauses: Mapping[PauseId, PauseRecord],
        error: Exception,
    ) -> None:
        """Queue, for answers whose events were written but whose records the store then
        refused (``submit``), one more event each: the decision (or the answer of an
        interrupt or gate) did not take effect, and why. The trail then says so, and a
        retry's is an event of its own."""
        if self.log is None:
            return
        note = f"not recorded: {error}"
        for d in decisions:
            refused = dataclasses.replace(d, applied=False, note=note)
            key, draft = decision_event(refused, pauses.get(d.pause_id) if d.pause_id else None)
            self.add(f"unrecorded:{key}", draft)
        for a in answers:
            p = pauses.get(a.pause_id)
            if p is not None and p.kind in GATES:
                key, draft = resume_event(p, a, refusal=note)
                self.add(f"unrecorded:{key}", draft)

    # -- the outbox ---------------------------------------------------------------------------
    def outbox(self, checkpoint_id: CheckpointId) -> list[MemoRecord]:
        """The memos to commit with a root commit at ``checkpoint_id``: the undelivered
        events, kept there; or, once they are delivered, the emptied outbox of the
        checkpoint that kept them."""
        memos = []
        if self.outbox_at is not None and not self.pending:
            memos.append(MemoRecord(self.outbox_at, OUTBOX, "events", {}))
            self.outbox_at = None
        if self.pending:
            value = {k: draft_as_dict(d) for k, d in self.pending.items()}
            memos.append(MemoRecord(checkpoint_id, OUTBOX, "events", value))
            if self.outbox_at is not None and self.outbox_at != checkpoint_id:
                memos.append(MemoRecord(self.outbox_at, OUTBOX, "events", {}))
            self.outbox_at = checkpoint_id
        return memos

    def take_outbox(
        self, checkpoint_id: CheckpointId, memos: Mapping[TaskId, Mapping[str, Any]]
    ) -> None:
        """Queue again the events an earlier run left in the outbox of ``checkpoint_id``
        (``memos``: the checkpoint's memos by task id)."""
        kept = memos.get(OUTBOX, {}).get("events") if self.log is not None else None
        if kept:
            self.outbox_at = checkpoint_id
            for key, data in kept.items():
                self.pending.setdefault(key, draft_from_dict(data))


def request_facts(
    thread_id: ThreadId | str,
    request: Mapping[str, Any],
    *,
    node: str | None = None,
    checkpoint_id: str | None = None,
    action_id: str | None = None,
) -> CallFacts:
    """The facts of a paused tool call, from its stored confirmation request."""
    risk: Any = request.get("risk") or "high"
    return CallFacts(
        thread_id=str(thread_id),
        call_id=str(request.get("function_call_id") or "unknown"),
        tool=str(request.get("tool_name") or "unknown"),
        args=dict(request.get("args") or {}),
        agent=str(request.get("agent") or "unknown"),
        node=node,
        action_id=action_id,
        principal_id=request.get("principal"),
        risk=risk if risk in ("low", "medium", "high", "critical") else "unknown",
        category=request.get("category"),
        checkpoint_id=checkpoint_id,
        policy_version=request.get("policy_version"),
        action_digest=request.get("action_digest"),
        tainted=bool(request.get("tainted")),
        taint_sources=tuple(request.get("taint_sources") or ()),
    )


def opaque(value: Any) -> bytes:
    """A value's stored bytes, which the log keeps as a digest only (an interrupt's value
    or answer, a tool's result: anything the checkpoint store can hold, JSON-like or not)."""
    try:
        return serde.dumps(value)
    except Exception:  # (the store refuses it too, and says so; the digest must not fail)
        return repr(value).encode("utf-8", "backslashreplace")


GATES = frozenset({"interrupt", "before", "after"})
"""The pause kinds an interrupt event records (tool confirmations have their own)."""


def pause_event(pause: PauseRecord) -> tuple[str, EventDraft]:
    """The keyed event of an interrupt or gate pause."""
    draft = stages.interrupt_paused(
        thread_id=pause.thread_id,
        node=pause.node,
        pause_id=pause.id,
        checkpoint_id=pause.checkpoint_id,
        value=opaque(pause.value),
    )
    return f"pause:{pause.id}", draft


def resume_event(
    pause: PauseRecord, answer: AnswerRecord, *, refusal: str | None = None
) -> tuple[str, EventDraft]:
    """The keyed event of an interrupt or gate pause's answer (``refusal``: why it did not
    take effect): one per answer taken, as a decision's is (a retry is an answer of its
    own)."""
    draft = stages.interrupt_resumed(
        thread_id=pause.thread_id,
        node=pause.node,
        pause_id=pause.id,
        answer=opaque(answer.value),
        by=answer.by,
        checkpoint_id=pause.checkpoint_id,
        refusal=refusal,
        at=datetime.fromtimestamp(answer.created_at, UTC),  # (audit matches it to the record)
    )
    return f"resume:{pause.id}:{answer.created_at!r}", draft


def decision_event(record: DecisionRecord, pause: PauseRecord | None) -> tuple[str, EventDraft]:
    """The keyed event of a human's decision on a tool call, applied or not (``note`` says
    why not); ``pause``: the confirmation it answered, when it matched one."""
    value = pause.value if pause is not None else None
    request = value.get("request") if isinstance(value, Mapping) else None
    if isinstance(request, Mapping):
        call = request_facts(
            record.thread_id,
            request,
            node=pause.node if pause is not None else None,
            checkpoint_id=pause.checkpoint_id if pause is not None else None,
        )
    else:  # it matched no pending call: the event names what it was given
        call = CallFacts(
            thread_id=record.thread_id,
            call_id=record.call_id or "unknown",
            tool="unknown",
            args={},
            agent="unknown",
            risk="unknown",
        )
    draft = stages.decision_received(
        call,
        pause_id=record.pause_id,
        approve=record.verdict == "approve",
        by=record.by,
        applied=record.applied,
        reason=record.reason,
        refusal=record.note,
        at=datetime.fromtimestamp(record.created_at, UTC),  # (audit matches it to the record)
    )
    return f"decision:{record.pause_id or record.call_id}:{record.created_at!r}", draft
