"""The stages of a call waiting for, or given, a decision: the pause, a human's decision,
and a call that will not run now (denied, deferred, escalated, needing reauthorization);
``graphflow.evidence.stages`` documents each event."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from graphflow.evidence.events import CallFacts, EventDraft, PrincipalType, rfc3339
from graphflow.evidence.stages import build
from graphflow.evidence.stages.build import PauseDecision


def paused(
    call: CallFacts,
    *,
    pause_id: str,
    checkpoint_id: str | None = None,
    decision: PauseDecision = "requires_human_approval",
    reason: str | None = None,
    policy_id: str | None = None,
    required_role: str | None = None,
    expires_at: datetime | None = None,
) -> EventDraft:
    """``call`` waits for a human in pause ``pause_id`` (``checkpoint_id``: the pause's)."""
    event_type, status = build.BY_DECISION[decision]
    policy_id = policy_id or "graphflow.confirmation"
    artifact = None
    if call.action_digest:
        artifact = {
            "decision_id": pause_id,
            "decision": decision,
            "bound_action_digest": call.action_digest,
            "issuer": policy_id,
            "resource": build.tool_resource(call),
        }
        if call.principal_id:
            artifact["principal_id"] = call.principal_id
        if expires_at is not None:
            artifact["expires_at"] = rfc3339(expires_at)
    return build.call_event(
        call,
        event_type,
        "paused",
        authorization=build.authorization(
            decision, policy_id, reason, authorization_decision_artifact=artifact
        ),
        result=build.result(status),
        approval={"approval_required": True, "approval_id": pause_id},
        non_execution=build.non_execution(
            build.NON_EXECUTION[status],
            reason or "waiting for a human decision",
            escalation_target=required_role,
        ),
        pause_id=pause_id,
        checkpoint_id=checkpoint_id,
        graphflow=build.required_role_field(required_role),
    )


def decision_received(
    call: CallFacts,
    *,
    pause_id: str | None,
    approve: bool,
    by: str | None,
    applied: bool,
    reason: str | None = None,
    refusal: str | None = None,
    expired: bool = False,
    at: datetime | None = None,
    by_type: PrincipalType = "human_user",
    refuses: bool = False,
) -> EventDraft:
    """A human's decision (``approve`` or deny, ``by`` whom) on ``call`` arrived.

    ``applied`` False: it was not applied (``refusal`` says why: a fingerprint mismatch, a
    missing role, an expired approval (``expired``), a frozen thread...) and the call stays
    pending. ``refuses``: it is the run's refusal, when the call ran, of a decision that
    was applied when it was given (``graph.audit`` then shows that one as not applied)."""
    verdict = "approved" if approve else "denied"
    approval: dict[str, Any] = {
        "approval_required": True,
        "approval_decision": verdict,
        "source_type": "graphflow.decision",
        "trusted_source": True,
    }
    if pause_id:
        approval["approval_id"] = pause_id
    if by:
        approval["approver_id"] = by
    if at is not None:
        approval["approval_timestamp"] = rfc3339(at)
    if call.action_digest:
        approval["action_digest"] = call.action_digest
    common: dict[str, Any] = {
        "pause_id": pause_id,
        "principal_id": by,
        "principal_type": by_type,
    }
    if applied and approve:
        return build.call_event(
            call,
            "agentic_action_allowed",
            "decision_received",
            authorization=build.authorization("allow", "graphflow.confirmation", reason),
            result=build.result("allowed_after_approval"),
            approval=approval,
            graphflow={"applied": True, "verdict": "approve"},
            **common,
        )
    if applied:
        return build.call_event(
            call,
            "agentic_action_denied",
            "decision_received",
            authorization=build.authorization("deny", "graphflow.confirmation", reason),
            result=build.result("denied"),
            approval=approval,
            non_execution=build.non_execution("denied", reason or "denied by a human"),
            graphflow={"applied": True, "verdict": "deny"},
            **common,
        )
    refusal = refusal or "the decision was not applied"
    approval["approval_decision"] = "expired" if expired else "unknown"
    return build.call_event(
        call,
        "agentic_action_deferred",
        "decision_received",
        authorization=build.authorization(
            "requires_human_approval", "graphflow.confirmation", refusal
        ),
        result=build.result("deferred"),
        approval=approval,
        non_execution=build.non_execution("deferred", refusal),
        graphflow={
            "applied": False,
            "verdict": "approve" if approve else "deny",
            "refusal": refusal,
            **({"refuses": True} if refuses else {}),
        },
        **common,
    )


def denied(
    call: CallFacts,
    *,
    reason: str | None = None,
    by: str | None = None,
    policy_id: str | None = None,
    pause_id: str | None = None,
) -> EventDraft:
    """``call`` will not run: a human (``by``) or the policy denied it."""
    return build.decided(
        call,
        "denied",
        "deny",
        policy_id=policy_id or ("graphflow.confirmation" if by else "graphflow.policy"),
        reason=reason or ("denied by a human" if by else "denied by policy"),
        approval=(
            {"approval_required": True, "approval_decision": "denied", "approver_id": by}
            if by
            else None
        ),
        pause_id=pause_id,
    )


def deferred(
    call: CallFacts,
    *,
    reason: str | None = None,
    policy_id: str | None = None,
    pause_id: str | None = None,
) -> EventDraft:
    """``call`` stays pending: it is evaluated again on a later run."""
    return build.decided(
        call,
        "deferred",
        "defer",
        policy_id=policy_id or "graphflow.policy",
        reason=reason or "deferred: evaluated again on a later run",
        pause_id=pause_id,
    )


def escalated(
    call: CallFacts,
    *,
    required_role: str | None = None,
    reason: str | None = None,
    policy_id: str | None = None,
    pause_id: str | None = None,
) -> EventDraft:
    """``call`` waits for an approver with ``required_role``."""
    return build.decided(
        call,
        "escalated",
        "escalate",
        policy_id=policy_id or "graphflow.policy",
        reason=reason or "escalated for review",
        required_role=required_role,
        pause_id=pause_id,
    )


def reauthorization_requested(
    call: CallFacts,
    *,
    reason: str | None = None,
    pause_id: str | None = None,
    policy_id: str | None = None,
    denied_action_id: str | None = None,
    retry_count: int | None = None,
) -> EventDraft:
    """``call`` needs a new approval that no earlier one satisfies."""
    reauthorization: dict[str, Any] = {
        "reauthorization_requested": True,
        "reauthorization_decision": "unknown",
    }
    if pause_id:
        reauthorization["reauthorization_request_id"] = pause_id
    if denied_action_id:
        reauthorization["denied_action_id"] = denied_action_id
    if retry_count is not None:
        reauthorization["retry_count"] = retry_count
    return build.decided(
        call,
        "reauthorization_requested",
        "reauthorization_required",
        policy_id=policy_id or "graphflow.policy",
        reason=reason or "reauthorization required",
        reauthorization=reauthorization,
        pause_id=pause_id,
    )
