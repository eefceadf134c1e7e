"""What each stage of a tool call's authorization records.

The pipeline runs, for every proposed call: access control -> before-tool callbacks ->
policy and confirmation -> dispatch enforcement -> execute -> after-tool callbacks. Each
stage produces one :class:`StageRecord`: plain data (stored by ``checkpoints.serde``, or
as :meth:`StageRecord.to_dict`), from which the evidence log builds an AAEF event
(:attr:`StageRecord.aaef_event_type` names its ``event_type``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from checkpoints import serde
from graphflow.auth.vocab import DECISIONS
from graphflow.errors import InvalidArgumentError

__all__ = ["STAGE_DECISIONS", "Stage", "StageRecord"]

Stage = Literal[
    "access_control",
    "before_tool",
    "policy",
    "confirmation",
    "dispatch",
    "execute",
    "after_tool",
]
"""The stages of a call's authorization, in order, each with its decisions:

- ``access_control``: RBAC; ``allow`` or ``deny`` (the model is told access was denied).
- ``before_tool``: the callbacks; ``continue``, ``skip`` (a callback returned the result
  the model gets instead) or ``error`` (a callback raised; the run aborts).
- ``policy``: the policy's decision, one of the seven policy decisions.
- ``confirmation``: a human's answer; ``approved``, ``denied``, or ``refused`` (the answer
  did not apply: a fingerprint mismatch, an approver without the required role, an
  approval that expired; the call stays pending).
- ``dispatch``: the checks at dispatch (digest, principal, expiry, single use, frozen
  thread); ``allow``, or ``deny`` (the call does not run and pauses again).
- ``execute``: the tool ran; ``executed`` or ``failed`` (it raised).
- ``after_tool``: the callbacks on the result; ``kept``, ``replaced`` or ``error``.
"""

STAGE_DECISIONS: dict[str, tuple[str, ...]] = {
    "access_control": ("allow", "deny"),
    "before_tool": ("continue", "skip", "error"),
    "policy": DECISIONS,
    "confirmation": ("approved", "denied", "refused"),
    "dispatch": ("allow", "deny"),
    "execute": ("executed", "failed"),
    "after_tool": ("kept", "replaced", "error"),
}
"""The decisions each stage may record."""

_POLICY_EVENTS = {
    "allow": "agentic_action_allowed",
    "deny": "agentic_action_denied",
    "requires_human_approval": "agentic_action_deferred",
    "defer": "agentic_action_deferred",
    "escalate": "agentic_action_escalated",
    "freeze": "authority_frozen",
    "reauthorization_required": "reauthorization_requested",
}
_EVENTS: dict[tuple[str, str], str] = {
    ("access_control", "allow"): "agentic_action_attempted",
    ("access_control", "deny"): "agentic_action_denied",
    ("before_tool", "continue"): "agentic_action_attempted",
    ("before_tool", "skip"): "agentic_action_denied",
    ("before_tool", "error"): "agentic_action_failed",
    **{("policy", d): e for d, e in _POLICY_EVENTS.items()},
    ("confirmation", "approved"): "agentic_action_allowed",
    ("confirmation", "denied"): "agentic_action_denied",
    ("confirmation", "refused"): "agentic_action_deferred",
    ("dispatch", "allow"): "agentic_action_allowed",
    ("dispatch", "deny"): "agentic_action_deferred",
    ("execute", "executed"): "agentic_action_executed",
    ("execute", "failed"): "agentic_action_failed",
    ("after_tool", "kept"): "agentic_action_executed",
    ("after_tool", "replaced"): "agentic_action_executed",
    ("after_tool", "error"): "agentic_action_failed",
}
_FIELDS = (
    "stage",
    "call_id",
    "tool",
    "decision",
    "reason",
    "rule_id",
    "principal_id",
    "action_digest",
    "policy_version",
    "thread_id",
    "risk",
    "category",
    "at",
    "detail",
)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class StageRecord:
    """One stage's outcome for one proposed tool call.

    Attributes:
        stage: which stage (see :data:`Stage`).
        call_id: the model's function call id.
        tool: the tool's name.
        decision: the stage's decision (see :data:`STAGE_DECISIONS`).
        reason: why, in words.
        rule_id: the policy rule that decided (``policy`` stage), if any.
        principal_id: who the call runs for, if anyone.
        action_digest: the call's :func:`~graphflow.auth.action_digest`, once known.
        policy_version: the version of the policy in force.
        thread_id: the thread of the run.
        risk: the tool's effective risk.
        category: the tool's AAEF high-impact category.
        at: when (timezone-aware, UTC by default).
        detail: more plain data of the stage (the role that denied, the approver, ...).

    Raises:
        InvalidArgumentError: an unknown stage, a decision the stage does not have, or a
            naive ``at``.
    """

    stage: Stage
    call_id: str
    tool: str
    decision: str
    reason: str | None = None
    rule_id: str | None = None
    principal_id: str | None = None
    action_digest: str | None = None
    policy_version: str | None = None
    thread_id: str | None = None
    risk: str | None = None
    category: str | None = None
    at: datetime = field(default_factory=_now)
    detail: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        allowed = STAGE_DECISIONS.get(self.stage)
        if allowed is None:
            raise InvalidArgumentError(
                f"unknown stage {self.stage!r}; use one of {', '.join(STAGE_DECISIONS)}"
            )
        if self.decision not in allowed:
            raise InvalidArgumentError(
                f"stage {self.stage!r} of call {self.call_id!r}: decision {self.decision!r} "
                f"is not one of {', '.join(allowed)}"
            )
        if not isinstance(self.at, datetime) or self.at.tzinfo is None:
            raise InvalidArgumentError(
                f"stage {self.stage!r} of call {self.call_id!r}: at must be a timezone-aware "
                "datetime"
            )
        object.__setattr__(self, "detail", dict(self.detail))

    @property
    def aaef_event_type(self) -> str:
        """The AAEF ``event_type`` this record becomes."""
        return _EVENTS[(self.stage, self.decision)]

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-able data (``at`` as ISO 8601 text)."""
        out = {name: getattr(self, name) for name in _FIELDS}
        out["at"] = self.at.isoformat()
        out["detail"] = dict(self.detail)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StageRecord:
        """The record :meth:`to_dict` wrote.

        Raises:
            InvalidArgumentError: unknown keys, or values the record refuses.
        """
        unknown = set(data) - set(_FIELDS)
        missing = {"stage", "call_id", "tool", "decision"} - set(data)
        if unknown or missing:
            raise InvalidArgumentError(
                f"a stage record needs stage, call_id, tool and decision and has no other keys "
                f"than {', '.join(_FIELDS)}; got {sorted(map(str, data))}"
            )
        values = dict(data)
        if isinstance(values.get("at"), str):
            try:
                values["at"] = datetime.fromisoformat(values["at"])
            except ValueError as exc:
                raise InvalidArgumentError(f"stage record: bad time {values['at']!r}") from exc
        return cls(**values)


serde.register(StageRecord, name="graphflow.auth.StageRecord")
