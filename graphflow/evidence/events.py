"""Evidence events before they are recorded: ``EventDraft`` and the facts of a tool call.

An ``EventDraft`` holds the AAEF sections of one event; ``EvidenceLog.append`` adds what
only the log knows (``schema``, ``schema_version``, ``timestamp``, ``seq``, ``prev_hash``,
the hash) and redacts it. ``graphflow.evidence.stages`` builds one draft per stage of a
tool call from a ``CallFacts``; a draft may also be made by hand for any other event.

The event written (AAEF 0.2.0-draft)::

    schema, schema_version, action_id, timestamp, event_type,
    agent, principal, delegation, requested_action, authorization, result,
    approval?, context?, response?, override?, non_execution?, reauthorization?,
    evidence: {evidence_id, retention_class, tamper_evidence: "hash_chain", evidence_hash},
    extensions: {graphflow: {thread_id, checkpoint_id, pause_id, call_id, nonce, seq,
                             prev_hash, policy_version, action_digest, stage, ...more,
                             detail?}}

``extensions.graphflow`` always has the nine fields API.md names (null when not
applicable) and ``stage``; ``more`` are a draft's extra scalar fields (``node``,
``applied``, ``gap`` ...); ``detail`` holds free-form data (tool arguments, an error's
text), where secret keys are redacted (``graphflow.evidence.redact``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from graphflow.errors import InvalidArgumentError
from graphflow.evidence.redact import digest
from graphflow.evidence.validation import SCHEMA_NAME, SCHEMA_VERSION

EventType = Literal[
    "agentic_action_attempted",
    "agentic_action_denied",
    "agentic_action_allowed",
    "agentic_action_executed",
    "agentic_action_failed",
    "agentic_action_revoked",
    "agentic_action_deferred",
    "agentic_action_escalated",
    "authority_frozen",
    "human_override_recorded",
    "reauthorization_requested",
]
"""The AAEF event types (the schema's ``event_type`` enum)."""

Stage = Literal[
    "proposed",
    "access_denied",
    "callback_skipped",
    "policy_decision",
    "paused",
    "decision_received",
    "dispatch_claimed",
    "executed",
    "failed",
    "outcome_unknown",
    "denied",
    "deferred",
    "escalated",
    "frozen",
    "unfrozen",
    "cancelled",
    "reauthorization_requested",
    "interrupt_paused",
    "interrupt_resumed",
    "gap",
]
"""Where in a call's life (or a thread's) an event was written; ``stages`` documents each:

- ``proposed``: the model proposed the call (nothing is decided yet).
- ``access_denied``: access control refused it.
- ``callback_skipped``: a before-tool callback gave the result instead of the tool.
- ``policy_decision``: the policy's decision on it.
- ``paused``: it waits for a human (confirmation, escalation, reauthorization).
- ``decision_received``: a human's decision on it arrived (applied or not).
- ``dispatch_claimed``: dispatch enforcement passed and the single-use claim is committed.
- ``executed`` / ``failed``: the tool ran and returned / raised.
- ``outcome_unknown``: a claim without an outcome was found (a crash in between).
- ``denied`` / ``deferred`` / ``escalated``: it will not run / stays pending / waits for a
  role, after a decision or a new evaluation.
- ``frozen`` / ``unfrozen``: the thread's authority was frozen / restored.
- ``cancelled``: the thread (and its pending calls) was cancelled.
- ``reauthorization_requested``: it needs a new approval that no earlier one satisfies.
- ``interrupt_paused`` / ``interrupt_resumed``: a node's ``interrupt`` paused / was answered.
- ``gap``: events that could not be written when they happened (the log was unwritable).
"""

AUDIT_STAGE: Mapping[Stage, str] = {
    "proposed": "proposal",
    "access_denied": "access",
    "callback_skipped": "callback",
    "policy_decision": "policy",
    "paused": "pause",
    "decision_received": "decision",
    "dispatch_claimed": "dispatch",
    "executed": "result",
    "failed": "result",
    "outcome_unknown": "result",
    "denied": "result",
    "deferred": "policy",
    "escalated": "policy",
    "reauthorization_requested": "policy",
    "frozen": "freeze",
    "unfrozen": "unfreeze",
    "cancelled": "cancel",
    "interrupt_paused": "interrupt",
    "interrupt_resumed": "resume",
    "gap": "result",
}
"""Each stage's ``AuditEntry.stage`` (API.md, ``graph.audit``)."""

RiskLevel = Literal["low", "medium", "high", "critical", "unknown"]
PrincipalType = Literal[
    "human_user", "organization", "system", "upstream_agent", "service_account", "unknown"
]

GRAPHFLOW_FIELDS = (
    "thread_id",
    "checkpoint_id",
    "pause_id",
    "call_id",
    "nonce",
    "seq",
    "prev_hash",
    "policy_version",
    "action_digest",
)
"""The fields of ``extensions.graphflow`` every event has (null when not applicable)."""

_DRAFT_FIELDS = tuple(name for name in GRAPHFLOW_FIELDS if name not in ("seq", "prev_hash"))
"""The ones a draft sets (the log sets ``seq`` and ``prev_hash``)."""
_RESERVED = frozenset((*GRAPHFLOW_FIELDS, "stage", "detail"))
_SECTIONS = ("approval", "context", "response", "override", "non_execution", "reauthorization")


def rfc3339(at: datetime) -> str:
    """``at`` as RFC 3339 UTC text with microseconds (``2026-04-26T00:00:00.000000Z``)."""
    if at.tzinfo is None or at.utcoffset() is None:
        raise InvalidArgumentError(
            f"evidence times must be timezone-aware datetimes, not the naive {at.isoformat()}"
        )
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now() -> str:
    """The current time as ``rfc3339`` text: made once per event, stored as text."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _text(name: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{name} must be a non-empty str, not {value!r}")


def _choice(name: str, value: object, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise InvalidArgumentError(f"{name} must be one of {list(allowed)}, not {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CallFacts:
    """What the runtime knows about one proposed tool call, for every event about it.

    Only ``tool`` and ``args`` come from the model; the rest is the runtime's. ``action_id``
    (default ``"<thread_id>:<call_id>"``) names the call in every event about it: pass a
    unique one when a thread can reuse a call id. ``external_effect_expected`` (default: a
    high or critical risk call is presumed to have an effect) fills AAEF's
    ``external_effect`` of a call that ran.
    """

    thread_id: str
    call_id: str
    tool: str
    args: Mapping[str, Any]
    agent: str
    node: str | None = None
    action_id: str | None = None
    principal_id: str | None = None
    principal_type: PrincipalType = "human_user"
    risk: RiskLevel = "high"
    category: str | None = None
    authority_scope: tuple[str, ...] = ()
    checkpoint_id: str | None = None
    policy_version: str | None = None
    action_digest: str | None = None
    tainted: bool = False
    taint_sources: tuple[str, ...] = ()
    external_effect_expected: bool | None = None
    purpose: str | None = None
    resource: str | None = None
    argument_digest: str = field(init=False)
    """``digest(args)`` (``graphflow.evidence.redact``): binds every event to the arguments."""

    def __post_init__(self) -> None:
        for name in ("thread_id", "call_id", "tool", "agent"):
            _text(f"CallFacts.{name}", getattr(self, name))
        for name in (
            "node",
            "action_id",
            "principal_id",
            "category",
            "checkpoint_id",
            "policy_version",
            "action_digest",
            "purpose",
            "resource",
        ):
            _text(f"CallFacts.{name}", getattr(self, name), optional=True)
        if not isinstance(self.args, Mapping):
            raise InvalidArgumentError(
                f"CallFacts.args must be a mapping, not {type(self.args).__name__}"
            )
        _choice("CallFacts.risk", self.risk, get_args(RiskLevel))
        _choice("CallFacts.principal_type", self.principal_type, get_args(PrincipalType))
        for name in ("authority_scope", "taint_sources"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise InvalidArgumentError(
                    f"CallFacts.{name} must be a tuple of non-empty str, not {value!r}"
                )
        if self.action_id is None:
            object.__setattr__(self, "action_id", f"{self.thread_id}:{self.call_id}")
        object.__setattr__(self, "argument_digest", digest(self.args, where="CallFacts.args"))

    @property
    def effect_expected(self) -> bool:
        """Whether running the call is presumed to have an external effect."""
        if self.external_effect_expected is not None:
            return self.external_effect_expected
        return self.risk in ("high", "critical")


@dataclass(frozen=True, slots=True, kw_only=True)
class EventDraft:
    """One event's AAEF sections, before ``EvidenceLog.append`` records it.

    The sections are plain mappings in AAEF's shape (``EvidenceLog(validate=True)`` checks
    them against the schema). ``graphflow`` adds fields to ``extensions.graphflow`` (it may
    not set the ones named by ``GRAPHFLOW_FIELDS``, ``stage`` or ``detail``); ``detail`` is
    free-form data stored with its secret keys redacted.
    """

    event_type: EventType
    stage: Stage
    action_id: str
    agent: Mapping[str, Any]
    principal: Mapping[str, Any]
    delegation: Mapping[str, Any]
    requested_action: Mapping[str, Any]
    authorization: Mapping[str, Any]
    result: Mapping[str, Any]
    approval: Mapping[str, Any] | None = None
    context: Mapping[str, Any] | None = None
    response: Mapping[str, Any] | None = None
    override: Mapping[str, Any] | None = None
    non_execution: Mapping[str, Any] | None = None
    reauthorization: Mapping[str, Any] | None = None
    retention_class: str = "agentic_action"
    thread_id: str | None = None
    checkpoint_id: str | None = None
    pause_id: str | None = None
    call_id: str | None = None
    nonce: str | None = None
    policy_version: str | None = None
    action_digest: str | None = None
    graphflow: Mapping[str, Any] = field(default_factory=dict)
    detail: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        _choice("EventDraft.event_type", self.event_type, get_args(EventType))
        _choice("EventDraft.stage", self.stage, get_args(Stage))
        _text("EventDraft.action_id", self.action_id)
        _text("EventDraft.retention_class", self.retention_class)
        for name in _DRAFT_FIELDS:
            _text(f"EventDraft.{name}", getattr(self, name), optional=True)
        clash = sorted(_RESERVED.intersection(self.graphflow))
        if clash:
            raise InvalidArgumentError(
                f"EventDraft.graphflow may not set {clash}: use the draft's own fields"
            )

    def sections(self) -> dict[str, Any]:
        """The event without ``timestamp``, ``seq``, hashes and ``detail`` (raw values)."""
        event: dict[str, Any] = {
            "schema": SCHEMA_NAME,
            "schema_version": SCHEMA_VERSION,
            "action_id": self.action_id,
            "timestamp": None,
            "event_type": self.event_type,
            "agent": self.agent,
            "principal": self.principal,
            "delegation": self.delegation,
            "requested_action": self.requested_action,
            "authorization": self.authorization,
            "result": self.result,
        }
        for name in _SECTIONS:
            value = getattr(self, name)
            if value is not None:
                event[name] = value
        event["evidence"] = {
            "evidence_id": f"ev_{uuid.uuid4().hex}",
            "retention_class": self.retention_class,
            "tamper_evidence": "hash_chain",
        }
        graphflow: dict[str, Any] = {name: None for name in GRAPHFLOW_FIELDS}
        graphflow.update({name: getattr(self, name) for name in _DRAFT_FIELDS}, stage=self.stage)
        graphflow.update(self.graphflow)
        event["extensions"] = {"graphflow": graphflow}
        return event


def draft_as_dict(draft: EventDraft) -> dict[str, Any]:
    """``draft`` as plain data (kept in the checkpoint store's outbox until it is written);
    ``draft_from_dict`` makes it again."""
    return {f.name: getattr(draft, f.name) for f in fields(EventDraft)}


def draft_from_dict(data: Mapping[str, Any]) -> EventDraft:
    """The draft ``draft_as_dict`` gave (its fields are checked again)."""
    known = {f.name for f in fields(EventDraft)}
    return EventDraft(**{k: v for k, v in data.items() if k in known})
