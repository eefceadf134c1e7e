"""A graph's evidence log (``compile(evidence=...)``) and its audit trail (``graph.audit``).

Which log a graph writes to:

- ``evidence=EvidenceLog(...)``: that one;
- ``evidence=None`` (the default): beside a ``SqliteCheckpointer("X.db")``, the file
  ``X.evidence.db``; for any other store (``MemoryCheckpointer``) or none, an in-memory log,
  one per store (graphs sharing a store share it);
- ``evidence=False``: none. Then a high or critical risk tool call never runs (its evidence
  cannot be written), as when the log is unwritable.

The default log is opened at ``compile()`` when its file exists (``open_existing``: a
resumed run in a new process then finds it open, as it finds its store); else when it is
first needed, so that ``compile()`` creates no file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from checkpoints.base import Checkpointer
from checkpoints.models import AnswerRecord, DecisionRecord, ThreadId
from graphflow.engine import answers
from graphflow.engine.witness import OUTBOX
from graphflow.errors import InvalidArgumentError
from graphflow.evidence import AUDIT_STAGE, EvidenceError, EvidenceLog, EvidenceRecord
from graphflow.evidence.events import draft_from_dict, rfc3339
from graphflow.evidence.log import beside_path, on_event_loop

_STAGES: dict[str, str] = {str(k): v for k, v in AUDIT_STAGE.items()}
_DEFAULTS: weakref.WeakKeyDictionary[Any, EvidenceLog] = weakref.WeakKeyDictionary()


def check_evidence(evidence: Any) -> EvidenceLog | bool | None:
    """``compile(evidence=)``: an ``EvidenceLog``, None (the default log) or False (none)."""
    if evidence is None or evidence is False or isinstance(evidence, EvidenceLog):
        return evidence
    raise InvalidArgumentError(
        f"evidence must be an EvidenceLog, None (the default log beside the store) or False "
        f"(no log: high-risk tool calls do not run), not {evidence!r}"
    )


def resolve_log(
    evidence: EvidenceLog | bool | None, store: Checkpointer | None, owner: object
) -> EvidenceLog | None:
    """The log a graph writes to (see the module docstring); ``owner`` keys the in-memory
    log of a graph without a store."""
    if isinstance(evidence, EvidenceLog):
        return evidence
    if evidence is False:
        return None
    key = store if store is not None else owner
    log = _DEFAULTS.get(key)
    if log is None:
        path = getattr(store, "path", None) if store is not None else None
        if isinstance(path, str):  # (a store's durability is the log's too)
            log = EvidenceLog.beside(path, durability=getattr(store, "durability", "fsync"))
        else:
            log = EvidenceLog(":memory:")
        _DEFAULTS[key] = log
    return log


def open_existing(
    evidence: EvidenceLog | bool | None, store: Checkpointer | None, owner: object
) -> None:
    """At ``compile()`` outside an event loop, for ``evidence=None``: resolve (and so open)
    the default log of ``store`` when its file exists; a log that cannot be opened now is
    tried again, and its error raised, when it is first needed."""
    path = getattr(store, "path", None)
    if evidence is not None or on_event_loop():  # (there it opens at its first call)
        return
    if (
        not isinstance(path, str)
        or beside_path(path) == path
        or not os.path.isfile(beside_path(path))
    ):
        return
    with contextlib.suppress(EvidenceError):
        resolve_log(None, store, owner)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One entry of a thread's audit trail (``graph.audit``): one evidence event.

    ``stage`` is one of ``proposal``, ``access``, ``callback``, ``policy``, ``pause``,
    ``decision``, ``dispatch``, ``result``, ``cancel``, ``freeze``, ``unfreeze``,
    ``interrupt``, ``resume``; ``actor`` who decided or acted (the approver of a decision,
    else the principal); ``decision`` the authorization decision; ``applied`` False for a
    decision that did not take effect (``detail`` says why).
    """

    seq: int
    at: datetime
    stage: str
    call_id: str | None
    tool: str | None
    actor: str | None
    decision: str | None
    applied: bool
    checkpoint_id: str | None
    pause_id: str | None
    detail: str | None
    event_type: str


def entry_of(record: EvidenceRecord) -> AuditEntry:
    """The audit entry of a stored event."""
    ev = record.event
    ext: Mapping[str, Any] = ev.get("extensions", {}).get("graphflow", {})
    approval: Mapping[str, Any] = ev.get("approval") or {}
    override: Mapping[str, Any] = ev.get("override") or {}
    auth: Mapping[str, Any] = ev.get("authorization") or {}
    action: Mapping[str, Any] = ev.get("requested_action") or {}
    principal = (ev.get("principal") or {}).get("principal_id")
    actor = approval.get("approver_id") or override.get("override_actor_id") or principal
    detail = ext.get("refusal") or (ev.get("non_execution") or {}).get("reason")
    return AuditEntry(
        seq=record.seq,
        at=datetime.fromisoformat(ev["timestamp"].replace("Z", "+00:00")),
        stage=_STAGES.get(str(ext.get("stage")), str(ext.get("stage"))),
        call_id=ext.get("call_id"),
        tool=action.get("tool_name"),
        actor=actor if actor not in ("unknown", "") else None,
        decision=auth.get("decision"),
        applied=bool(ext.get("applied", True)),
        checkpoint_id=ext.get("checkpoint_id"),
        pause_id=ext.get("pause_id"),
        detail=detail or auth.get("reason"),
        event_type=record.event_type,
    )


async def audit(log: EvidenceLog, store: Checkpointer | None, thread_id: str) -> list[AuditEntry]:
    """The thread's trail in order (``as_taken``); events still in the thread's outbox (the
    log was not writable when they happened) are written first."""
    decided: list[DecisionRecord] = []
    answered: list[AnswerRecord] = []
    if store is not None:
        th = await store.get_thread(ThreadId(thread_id))
        if th is not None and th.head is not None:
            memos = await store.load_memos(th.thread_id, "", th.head)
            kept = memos.get(OUTBOX, {}).get("events") or {}
            if kept:
                await log.aappend_once([(k, draft_from_dict(d)) for k, d in kept.items()])
        if th is not None:
            decided = await store.list_decisions(th.thread_id)
            answered = list((await store.load_answers(th.thread_id)).values())
    records = await log.aevents(thread_id)
    marks = [_marks(r) for r in records]
    return as_taken([entry_of(r) for r in records], marks, decided, answered)


def _marks(record: EvidenceRecord) -> tuple[str | None, bool]:
    """A decision or answer event's record time (a decision's approval timestamp, an
    interrupt answer's ``answered_at``) and whether it refuses an earlier decision (the
    run's refusal when the call ran)."""
    ev = record.event
    approval: Mapping[str, Any] = ev.get("approval") or {}
    ext: Mapping[str, Any] = ev.get("extensions", {}).get("graphflow", {})
    at = approval.get("approval_timestamp") or ext.get("answered_at")
    return at, bool(ext.get("refuses"))


def as_taken(
    entries: list[AuditEntry],
    marks: Sequence[tuple[str | None, bool]],
    decided: Sequence[DecisionRecord] = (),
    answered: Sequence[AnswerRecord] = (),
) -> list[AuditEntry]:
    """``entries`` as the decisions and answers took effect, each one that did not shown
    with ``applied=False`` and why:

    - a decision (or an interrupt's answer) whose record the store refused: ``submit``
      wrote a second event, "not recorded: ...";
    - a decision the run refused when the call ran (the approver lacked the role, the
      approval expired): the refusal's event follows it;
    - a decision or answer that a later one on the same pause (or call) overrode: the latest
      wins, in the store's order (``decided``: the thread's decision records, matched by
      their time; evidence of appends that raced may be in the other order), as
      ``graph.list_decisions`` reads them; for an interrupt, ``answered``: the latest answer
      record of each pause, as the store keeps them (``load_answers``)."""
    out = list(entries)
    stored = {
        (r.pause_id or r.call_id, rfc3339(datetime.fromtimestamp(r.created_at, UTC)))
        for r in answers.effective(decided)
        if r.applied
    }
    latest = {(a.pause_id, rfc3339(datetime.fromtimestamp(a.created_at, UTC))) for a in answered}
    taken: dict[tuple[str, str], list[int]] = {}  # (stage, pause or call) -> applied, in order
    for i, e in enumerate(entries):
        key = e.pause_id or e.call_id
        if e.stage not in ("decision", "resume") or key is None:
            continue
        applied = taken.setdefault((e.stage, key), [])
        annuls = (e.detail or "").startswith("not recorded") or marks[i][1]
        if e.applied:
            applied.append(i)
        elif annuls and applied:
            j = applied.pop()  # (the decision or answer it reports on took no effect)
            out[j] = dataclasses.replace(entries[j], applied=False, detail=e.detail)
    for (stage, key), applied in taken.items():
        if len(applied) < 2:
            continue
        kept = stored if stage == "decision" else latest
        won = [i for i in applied if (key, marks[i][0]) in kept]
        winner = won[-1] if won else applied[-1]
        w = entries[winner]
        if stage == "decision":
            verdict = "deny" if w.decision == "deny" else "approve"
            note = f"superseded by the {verdict} of {w.actor or 'an anonymous caller'}"
        else:
            note = f"superseded by the answer of {w.actor or 'an anonymous caller'}"
        for i in applied:
            if i != winner:
                out[i] = dataclasses.replace(entries[i], applied=False, detail=note)
    return out
