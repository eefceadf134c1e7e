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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from checkpoints.base import Checkpointer
from checkpoints.models import ThreadId
from graphflow.engine.witness import OUTBOX
from graphflow.errors import InvalidArgumentError
from graphflow.evidence import AUDIT_STAGE, EvidenceError, EvidenceLog, EvidenceRecord
from graphflow.evidence.events import draft_from_dict
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
    """The thread's trail in order; events still in the thread's outbox (the log was not
    writable when they happened) are written first."""
    if store is not None:
        th = await store.get_thread(ThreadId(thread_id))
        if th is not None and th.head is not None:
            memos = await store.load_memos(th.thread_id, "", th.head)
            kept = memos.get(OUTBOX, {}).get("events") or {}
            if kept:
                await log.aappend_once([(k, draft_from_dict(d)) for k, d in kept.items()])
    return superseded([entry_of(r) for r in await log.aevents(thread_id)])


def superseded(entries: list[AuditEntry]) -> list[AuditEntry]:
    """``entries`` as the decisions took effect: a decision (or an interrupt's answer) whose
    record the store refused (``submit`` wrote a second event, "not recorded: ...") and a
    decision that a later applied
    decision on the same pause (or call) overrode are shown as not applied, saying why (the
    latest wins, as answers do: ``graph.list_decisions`` reads the records the same way)."""
    out = list(entries)
    latest: dict[str, int] = {}
    answered: dict[str, int] = {}  # (the latest answer of each interrupt or gate)
    for i, e in enumerate(entries):
        key = e.pause_id or e.call_id
        taken = latest if e.stage == "decision" else answered if e.stage == "resume" else None
        if taken is None or key is None:
            continue
        if e.applied:
            taken[key] = i
        elif (e.detail or "").startswith("not recorded") and key in taken:
            j = taken.pop(key)  # (the answer it reports on took no effect)
            out[j] = dataclasses.replace(entries[j], applied=False, detail=e.detail)
    winners = set(latest.values())
    for i, e in enumerate(out):
        key = e.pause_id or e.call_id
        if e.stage == "decision" and e.applied and key is not None and i not in winners:
            winner = entries[latest[key]]
            verdict = "deny" if winner.decision == "deny" else "approve"
            note = f"superseded by the {verdict} of {winner.actor or 'an anonymous caller'}"
            out[i] = dataclasses.replace(e, applied=False, detail=note)
    return out
