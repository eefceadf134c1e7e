"""One ``EventDraft`` per stage of a tool call (and of a thread), in AAEF's terms.

Every call event has ``action_id`` = ``CallFacts.action_id``, ``agent`` = {the agent's name,
``"<thread_id>/<node>"``}, ``principal`` = the run's principal (``unknown``/``"unknown"``
when there is none), ``delegation.authority_scope`` = the call's scope (default
``["tool:<name>"]``), ``requested_action`` = {``action_type``: the category or
``"tool_call"``, ``resource`` (default ``"tool:<name>"``), ``purpose``, ``risk_level``,
``tool_name``, ``argument_digest``, ``high_impact_category``, ``external_effect_expected``},
``context`` = {``correlation_id``: the thread, taint as ``untrusted_content_influenced_action``
and ``input_sources``}, and ``retention_class`` ``high_impact_action`` for high and critical
risk (``agentic_action`` otherwise). The tool's arguments are stored (redacted) in the
``proposed`` and ``gap`` events' ``detail.arguments``; every event carries their digest.

The mapping (``authorization.decision`` / ``result.status``; external_effect is false
unless said):

============================  ===========================  ==================================
stage                         event_type                   decision / status, other sections
============================  ===========================  ==================================
proposed                      agentic_action_attempted     requires_additional_verification /
                                                           deferred (not yet authorized)
access_denied                 agentic_action_denied        deny / denied, non_execution denied
callback_skipped              agentic_action_denied        deny / safely_terminated,
                                                           non_execution safely_terminated
policy_decision               by decision: allow ->        the policy's decision / allowed,
                              allowed, deny -> denied,     denied, deferred, escalated,
                              requires_human_approval,     frozen, reauthorization_requested
                              defer, requires_additional_
                              verification -> deferred,
                              escalate -> escalated,
                              freeze -> authority_frozen,
                              reauthorization_required ->
                              reauthorization_requested
paused                        as policy_decision           the pause's decision, approval
                                                           (required, pending), an
                                                           authorization_decision_artifact
                                                           bound to the action digest
decision_received, applied,   agentic_action_allowed       allow / allowed_after_approval,
approve                                                    approval approved
decision_received, applied,   agentic_action_denied        deny / denied, approval denied
deny
decision_received, not        agentic_action_deferred      requires_human_approval / deferred,
applied                                                    approval expired or unknown,
                                                           ``applied: false`` and the reason
dispatch_claimed              agentic_action_allowed       allow / allowed or
                                                           allowed_after_approval, approval
                                                           enforcement_result allow at the
                                                           execution boundary, the nonce
executed                      agentic_action_executed      allow / allowed or
                                                           allowed_after_approval,
                                                           tool_invoked, result_digest,
                                                           external_effect as expected
failed                        agentic_action_failed        allow / failed, error_code (the
                                                           exception's type)
outcome_unknown               agentic_action_failed        allow / quarantined, error_code
                                                           ``outcome_unknown``, external_effect
                                                           as expected (it may have run)
denied                        agentic_action_denied        deny / denied, non_execution
deferred                      agentic_action_deferred      defer / deferred, non_execution
escalated                     agentic_action_escalated     escalate / escalated, non_execution
                                                           escalation_target = required role
reauthorization_requested     reauthorization_requested    reauthorization_required /
                                                           reauthorization_requested,
                                                           reauthorization
frozen                        authority_frozen             freeze / frozen, non_execution,
                                                           state_checks authority_frozen,
                                                           override emergency_stop (by a human)
unfrozen                      human_override_recorded      allow / allowed, override other
cancelled                     agentic_action_revoked       deny / safely_terminated,
                                                           non_execution, response
                                                           revocation_triggered
interrupt_paused              agentic_action_deferred      defer / deferred, the value's digest
interrupt_resumed             agentic_action_allowed       allow / allowed, the answer's digest
gap                           agentic_action_executed      allow / allowed, ``gap`` (reason,
                                                           missed stages, since)
============================  ===========================  ==================================

Thread events (``frozen``, ``unfrozen``, ``cancelled`` without a call, interrupts) describe
the operation as the requested action: ``action_type`` ``graphflow.thread.freeze`` (and so
on), ``resource`` ``"thread:<id>"`` or ``"node:<name>"``, ``risk_level`` ``unknown``; their
agent is ``graphflow`` and their principal the actor (``system``/``graphflow`` when none).
Interrupt values and answers are stored as digests only: they may carry model text.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from graphflow.evidence.events import CallFacts, EventDraft, EventType, PrincipalType, rfc3339
from graphflow.evidence.redact import digest

AuthorizationDecision = Literal[
    "allow",
    "deny",
    "requires_human_approval",
    "requires_additional_verification",
    "escalate",
    "defer",
    "freeze",
    "reauthorization_required",
]
"""AAEF's authorization decisions (graphflow's policy decisions are a subset)."""

PauseDecision = Literal["requires_human_approval", "defer", "escalate", "reauthorization_required"]

_BY_DECISION: Mapping[str, tuple[EventType, str]] = {
    "allow": ("agentic_action_allowed", "allowed"),
    "deny": ("agentic_action_denied", "denied"),
    "requires_human_approval": ("agentic_action_deferred", "deferred"),
    "requires_additional_verification": ("agentic_action_deferred", "deferred"),
    "defer": ("agentic_action_deferred", "deferred"),
    "escalate": ("agentic_action_escalated", "escalated"),
    "freeze": ("authority_frozen", "frozen"),
    "reauthorization_required": ("reauthorization_requested", "reauthorization_requested"),
}
_NON_EXECUTION = {
    "denied": "denied",
    "deferred": "deferred",
    "escalated": "escalated",
    "frozen": "frozen",
    "reauthorization_requested": "deferred",
}


def _call(
    call: CallFacts,
    event_type: EventType,
    stage: Any,
    *,
    authorization: dict[str, Any],
    result: dict[str, Any],
    pause_id: str | None = None,
    nonce: str | None = None,
    checkpoint_id: str | None = None,
    detail: Mapping[str, Any] | None = None,
    graphflow: Mapping[str, Any] | None = None,
    principal_id: str | None = None,
    principal_type: PrincipalType | None = None,
    **sections: Any,
) -> EventDraft:
    """The draft of one event about ``call``; ``sections`` are the optional AAEF ones."""
    requested: dict[str, Any] = {
        "action_type": call.category or "tool_call",
        "resource": call.resource or f"tool:{call.tool}",
        "purpose": call.purpose or f"tool call proposed by agent {call.agent}",
        "risk_level": call.risk,
        "tool_name": call.tool,
        "argument_digest": call.argument_digest,
        "external_effect_expected": call.effect_expected,
    }
    if call.category:
        requested["high_impact_category"] = call.category
    context: dict[str, Any] = {
        "correlation_id": call.thread_id,
        "untrusted_content_influenced_action": call.tainted,
    }
    if call.taint_sources:
        context["input_sources"] = [
            {"source_type": "untrusted_content", "source_id": s, "trust_level": "untrusted"}
            for s in call.taint_sources
        ]
    pid = principal_id if principal_id is not None else call.principal_id
    ptype = principal_type or (call.principal_type if principal_id is None else "human_user")
    extra = {"node": call.node, **(graphflow or {})}
    return EventDraft(
        event_type=event_type,
        stage=stage,
        action_id=call.action_id or call.call_id,
        agent={
            "agent_id": call.agent,
            "agent_instance_id": f"{call.thread_id}/{call.node}" if call.node else call.thread_id,
            "agent_product": "graphflow",
        },
        principal=_principal(pid, ptype),
        delegation={"authority_scope": list(call.authority_scope) or [f"tool:{call.tool}"]},
        requested_action=requested,
        authorization=authorization,
        result=result,
        context=context,
        retention_class=(
            "high_impact_action" if call.risk in ("high", "critical") else "agentic_action"
        ),
        thread_id=call.thread_id,
        checkpoint_id=checkpoint_id or call.checkpoint_id,
        pause_id=pause_id,
        call_id=call.call_id,
        nonce=nonce,
        policy_version=call.policy_version,
        action_digest=call.action_digest,
        graphflow=extra,
        detail=detail,
        **{k: v for k, v in sections.items() if v is not None},
    )


def _principal(principal_id: str | None, principal_type: PrincipalType) -> dict[str, Any]:
    if not principal_id:
        return {"principal_type": "unknown", "principal_id": "unknown"}
    return {"principal_type": principal_type, "principal_id": principal_id}


def _authorization(
    decision: str, policy_id: str, reason: str | None = None, **more: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {"decision": decision, "policy_id": policy_id}
    if reason:
        out["reason"] = reason
    out.update({k: v for k, v in more.items() if v is not None})
    return out


def _result(status: str, external_effect: bool = False, **more: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status, "external_effect": external_effect}
    out.update({k: v for k, v in more.items() if v is not None})
    return out


def _non_execution(decision: str, reason: str | None, **more: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"non_execution_decision": decision}
    if reason:
        out["reason"] = reason
    out.update({k: v for k, v in more.items() if v is not None})
    return out


def _when(at: datetime | None) -> str | None:
    return rfc3339(at) if at is not None else None


# -- stages of a call -----------------------------------------------------------------------


def proposed(call: CallFacts) -> EventDraft:
    """The model proposed ``call``: nothing is authorized yet; its arguments are stored."""
    return _call(
        call,
        "agentic_action_attempted",
        "proposed",
        authorization=_authorization(
            "requires_additional_verification",
            "graphflow.authorization_pipeline",
            "proposed by the model; the authorization pipeline has not decided yet",
        ),
        result=_result("deferred"),
        detail={"arguments": call.args},
    )


def access_denied(
    call: CallFacts, *, reason: str | None = None, policy_id: str = "graphflow.access_control"
) -> EventDraft:
    """Access control refused ``call``: it does not run."""
    reason = reason or "the principal's roles do not allow this tool"
    return _call(
        call,
        "agentic_action_denied",
        "access_denied",
        authorization=_authorization("deny", policy_id, reason),
        result=_result("denied"),
        non_execution=_non_execution("denied", reason, authority_gap=f"tool:{call.tool}"),
    )


def callback_skipped(call: CallFacts, *, callback: str, result: Any = None) -> EventDraft:
    """The before-tool callback ``callback`` gave ``result`` in place of running the tool."""
    reason = f"before-tool callback {callback} supplied the result; the tool did not run"
    return _call(
        call,
        "agentic_action_denied",
        "callback_skipped",
        authorization=_authorization("deny", f"graphflow.before_tool:{callback}", reason),
        result=_result("safely_terminated", result_digest=digest(result, where="the result")),
        non_execution=_non_execution("safely_terminated", reason),
    )


def policy_decision(
    call: CallFacts,
    *,
    decision: AuthorizationDecision,
    rule_id: str | None = None,
    reason: str | None = None,
    required_role: str | None = None,
) -> EventDraft:
    """The policy decided ``decision`` for ``call`` (``rule_id``: the rule that won)."""
    event_type, status = _BY_DECISION[decision]
    non_execution = (
        _non_execution(_NON_EXECUTION[status], reason, escalation_target=required_role)
        if status in _NON_EXECUTION
        else None
    )
    return _call(
        call,
        event_type,
        "policy_decision",
        authorization=_authorization(decision, rule_id or "graphflow.policy.default", reason),
        result=_result(status),
        non_execution=non_execution,
        graphflow={"required_role": required_role} if required_role else None,
    )


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
    event_type, status = _BY_DECISION[decision]
    policy_id = policy_id or "graphflow.confirmation"
    artifact = None
    if call.action_digest:
        artifact = {
            "decision_id": pause_id,
            "decision": decision,
            "bound_action_digest": call.action_digest,
            "issuer": policy_id,
            "resource": call.resource or f"tool:{call.tool}",
        }
        if call.principal_id:
            artifact["principal_id"] = call.principal_id
        if expires_at is not None:
            artifact["expires_at"] = rfc3339(expires_at)
    return _call(
        call,
        event_type,
        "paused",
        authorization=_authorization(
            decision, policy_id, reason, authorization_decision_artifact=artifact
        ),
        result=_result(status),
        approval={"approval_required": True, "approval_id": pause_id},
        non_execution=_non_execution(
            _NON_EXECUTION[status],
            reason or "waiting for a human decision",
            escalation_target=required_role,
        ),
        pause_id=pause_id,
        checkpoint_id=checkpoint_id,
        graphflow={"required_role": required_role} if required_role else None,
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
) -> EventDraft:
    """A human's decision (``approve`` or deny, ``by`` whom) on ``call`` arrived.

    ``applied`` False: it was not applied (``refusal`` says why: a fingerprint mismatch, a
    missing role, an expired approval (``expired``), a frozen thread...) and the call stays
    pending."""
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
        return _call(
            call,
            "agentic_action_allowed",
            "decision_received",
            authorization=_authorization("allow", "graphflow.confirmation", reason),
            result=_result("allowed_after_approval"),
            approval=approval,
            graphflow={"applied": True, "verdict": "approve"},
            **common,
        )
    if applied:
        return _call(
            call,
            "agentic_action_denied",
            "decision_received",
            authorization=_authorization("deny", "graphflow.confirmation", reason),
            result=_result("denied"),
            approval=approval,
            non_execution=_non_execution("denied", reason or "denied by a human"),
            graphflow={"applied": True, "verdict": "deny"},
            **common,
        )
    refusal = refusal or "the decision was not applied"
    approval["approval_decision"] = "expired" if expired else "unknown"
    return _call(
        call,
        "agentic_action_deferred",
        "decision_received",
        authorization=_authorization("requires_human_approval", "graphflow.confirmation", refusal),
        result=_result("deferred"),
        approval=approval,
        non_execution=_non_execution("deferred", refusal),
        graphflow={
            "applied": False,
            "verdict": "approve" if approve else "deny",
            "refusal": refusal,
        },
        **common,
    )


def dispatch_claimed(
    call: CallFacts,
    *,
    nonce: str | None = None,
    approved_by: str | None = None,
    pause_id: str | None = None,
) -> EventDraft:
    """Dispatch enforcement passed for ``call`` and its single-use claim is committed."""
    approval: dict[str, Any] = {
        "approval_required": approved_by is not None,
        "approval_decision": "approved" if approved_by else "not_required",
        "enforcement_result": "allow",
        "checked_at_execution_boundary": True,
    }
    if approved_by:
        approval["approver_id"] = approved_by
    if call.action_digest:
        approval["action_digest"] = call.action_digest
    return _call(
        call,
        "agentic_action_allowed",
        "dispatch_claimed",
        authorization=_authorization(
            "allow", "graphflow.dispatch", "dispatch enforcement passed; the claim is committed"
        ),
        result=_result("allowed_after_approval" if approved_by else "allowed"),
        approval=approval,
        nonce=nonce,
        pause_id=pause_id,
    )


def executed(
    call: CallFacts,
    *,
    result: Any = None,
    approved_by: str | None = None,
    nonce: str | None = None,
    external_effect: bool | None = None,
) -> EventDraft:
    """The tool ran and returned ``result`` (stored as a digest)."""
    return _call(
        call,
        "agentic_action_executed",
        "executed",
        authorization=_authorization("allow", "graphflow.dispatch"),
        result=_result(
            "allowed_after_approval" if approved_by else "allowed",
            call.effect_expected if external_effect is None else external_effect,
            tool_invoked=call.tool,
            result_digest=digest(result, where="the tool's result"),
        ),
        approval=_approved(approved_by),
        nonce=nonce,
    )


def _approved(by: str | None) -> dict[str, Any] | None:
    if by is None:
        return None
    return {"approval_required": True, "approval_decision": "approved", "approver_id": by}


def failed(
    call: CallFacts,
    *,
    error: BaseException | str,
    approved_by: str | None = None,
    nonce: str | None = None,
    external_effect: bool = False,
) -> EventDraft:
    """The tool raised ``error``: its type is the error code, its text the detail."""
    code = error if isinstance(error, str) else type(error).__name__
    text = error if isinstance(error, str) else str(error)
    return _call(
        call,
        "agentic_action_failed",
        "failed",
        authorization=_authorization("allow", "graphflow.dispatch"),
        result=_result("failed", external_effect, tool_invoked=call.tool, error_code=code),
        approval=_approved(approved_by),
        nonce=nonce,
        detail={"error": text[:4000]},
    )


def outcome_unknown(
    call: CallFacts, *, reason: str | None = None, pause_id: str | None = None
) -> EventDraft:
    """``call`` was claimed but no outcome was recorded: it is not run again by itself."""
    reason = reason or "dispatch was claimed but no outcome was recorded; a human must decide"
    return _call(
        call,
        "agentic_action_failed",
        "outcome_unknown",
        authorization=_authorization("allow", "graphflow.dispatch", reason),
        result=_result("quarantined", call.effect_expected, error_code="outcome_unknown"),
        pause_id=pause_id,
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
    reason = reason or ("denied by a human" if by else "denied by policy")
    return _call(
        call,
        "agentic_action_denied",
        "denied",
        authorization=_authorization(
            "deny", policy_id or ("graphflow.confirmation" if by else "graphflow.policy"), reason
        ),
        result=_result("denied"),
        approval=(
            {"approval_required": True, "approval_decision": "denied", "approver_id": by}
            if by
            else None
        ),
        non_execution=_non_execution("denied", reason),
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
    reason = reason or "deferred: evaluated again on a later run"
    return _call(
        call,
        "agentic_action_deferred",
        "deferred",
        authorization=_authorization("defer", policy_id or "graphflow.policy", reason),
        result=_result("deferred"),
        non_execution=_non_execution("deferred", reason),
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
    reason = reason or "escalated for review"
    return _call(
        call,
        "agentic_action_escalated",
        "escalated",
        authorization=_authorization("escalate", policy_id or "graphflow.policy", reason),
        result=_result("escalated"),
        non_execution=_non_execution("escalated", reason, escalation_target=required_role),
        pause_id=pause_id,
        graphflow={"required_role": required_role} if required_role else None,
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
    reason = reason or "reauthorization required"
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
    return _call(
        call,
        "reauthorization_requested",
        "reauthorization_requested",
        authorization=_authorization(
            "reauthorization_required", policy_id or "graphflow.policy", reason
        ),
        result=_result("reauthorization_requested"),
        non_execution=_non_execution("deferred", reason),
        reauthorization=reauthorization,
        pause_id=pause_id,
    )


def gap(
    call: CallFacts,
    *,
    reason: str,
    missed: Sequence[str],
    since: datetime,
    result: Any = None,
) -> EventDraft:
    """``call`` ran while the log could not be written; ``missed`` names the stages whose
    events were lost, ``since`` when (``reason``: the log's error)."""
    return _call(
        call,
        "agentic_action_executed",
        "gap",
        authorization=_authorization("allow", "graphflow.dispatch", "recorded after a gap"),
        result=_result(
            "allowed",
            call.effect_expected,
            tool_invoked=call.tool,
            result_digest=digest(result, where="the tool's result"),
        ),
        graphflow={"gap": {"reason": reason, "missed": list(missed), "since": rfc3339(since)}},
        detail={"arguments": call.args},
    )


# -- thread events ------------------------------------------------------------------------


def _thread(
    event_type: EventType,
    stage: Any,
    *,
    thread_id: str,
    operation: str,
    resource: str,
    purpose: str,
    by: str | None,
    by_type: PrincipalType,
    authorization: dict[str, Any],
    result: dict[str, Any],
    checkpoint_id: str | None = None,
    pause_id: str | None = None,
    node: str | None = None,
    graphflow: Mapping[str, Any] | None = None,
    **sections: Any,
) -> EventDraft:
    return EventDraft(
        event_type=event_type,
        stage=stage,
        # An interrupt and its answer are one action (named by the pause); each freeze,
        # unfreeze or cancel is its own.
        action_id=f"{thread_id}:{operation}:{pause_id or uuid.uuid4().hex}",
        agent={
            "agent_id": "graphflow",
            "agent_instance_id": f"{thread_id}/{node}" if node else thread_id,
            "agent_product": "graphflow",
        },
        principal=_principal(by, by_type) if by else _principal("graphflow", "system"),
        delegation={"authority_scope": [f"thread:{thread_id}"]},
        requested_action={
            "action_type": f"graphflow.{operation}",
            "resource": resource,
            "purpose": purpose,
            "risk_level": "unknown",
            "external_effect_expected": False,
        },
        authorization=authorization,
        result=result,
        context={"correlation_id": thread_id},
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
        pause_id=pause_id,
        graphflow={"node": node, **(graphflow or {})},
        **{k: v for k, v in sections.items() if v is not None},
    )


def frozen(
    *,
    thread_id: str,
    reason: str,
    by: str | None = None,
    by_type: PrincipalType = "human_user",
    call: CallFacts | None = None,
    policy_id: str | None = None,
    checkpoint_id: str | None = None,
) -> EventDraft:
    """The thread's authority was frozen: by a human (``by``) or by the policy for ``call``."""
    state_checks = [
        {
            "state_source": "thread_status",
            "state_result": "authority_frozen",
            "freeze_reason": reason,
        }
    ]
    override = (
        {
            "override_triggered": True,
            "override_type": "emergency_stop",
            "override_actor_id": by,
            "override_reason": reason,
        }
        if by
        else None
    )
    authorization = _authorization(
        "freeze", policy_id or "graphflow.freeze", reason, state_checks=state_checks
    )
    if call is not None:
        return _call(
            call,
            "authority_frozen",
            "frozen",
            authorization=authorization,
            result=_result("frozen"),
            non_execution=_non_execution("frozen", reason),
            override=override,
            checkpoint_id=checkpoint_id,
            principal_id=by,
        )
    return _thread(
        "authority_frozen",
        "frozen",
        thread_id=thread_id,
        operation="thread.freeze",
        resource=f"thread:{thread_id}",
        purpose=reason,
        by=by,
        by_type=by_type,
        authorization=authorization,
        result=_result("frozen"),
        non_execution=_non_execution("frozen", reason),
        override=override,
        checkpoint_id=checkpoint_id,
    )


def unfrozen(
    *,
    thread_id: str,
    by: str,
    reason: str,
    by_type: PrincipalType = "human_user",
    checkpoint_id: str | None = None,
) -> EventDraft:
    """``by`` restored the thread's authority."""
    return _thread(
        "human_override_recorded",
        "unfrozen",
        thread_id=thread_id,
        operation="thread.unfreeze",
        resource=f"thread:{thread_id}",
        purpose=reason,
        by=by,
        by_type=by_type,
        authorization=_authorization("allow", "graphflow.unfreeze", reason),
        result=_result("allowed"),
        override={
            "override_triggered": True,
            "override_type": "other",
            "override_actor_id": by,
            "override_reason": reason,
        },
        checkpoint_id=checkpoint_id,
    )


def cancelled(
    *,
    thread_id: str,
    reason: str | None = None,
    by: str | None = None,
    by_type: PrincipalType = "human_user",
    call: CallFacts | None = None,
    checkpoint_id: str | None = None,
) -> EventDraft:
    """The thread was cancelled (``call``: a pending call it ends)."""
    reason = reason or "the thread was cancelled"
    authorization = _authorization("deny", "graphflow.cancel", reason)
    sections: dict[str, Any] = {
        "non_execution": _non_execution("safely_terminated", reason),
        "response": {"revocation_triggered": True},
    }
    if call is not None:
        return _call(
            call,
            "agentic_action_revoked",
            "cancelled",
            authorization=authorization,
            result=_result("safely_terminated"),
            checkpoint_id=checkpoint_id,
            principal_id=by,
            principal_type=by_type,
            **sections,
        )
    return _thread(
        "agentic_action_revoked",
        "cancelled",
        thread_id=thread_id,
        operation="thread.cancel",
        resource=f"thread:{thread_id}",
        purpose=reason,
        by=by,
        by_type=by_type,
        authorization=authorization,
        result=_result("safely_terminated"),
        checkpoint_id=checkpoint_id,
        **sections,
    )


def interrupt_paused(
    *,
    thread_id: str,
    node: str,
    pause_id: str,
    checkpoint_id: str | None = None,
    value: Any = None,
) -> EventDraft:
    """A node's ``interrupt(value)`` paused the thread (``value`` stored as a digest)."""
    reason = "waiting for human input"
    return _thread(
        "agentic_action_deferred",
        "interrupt_paused",
        thread_id=thread_id,
        operation="interrupt",
        resource=f"node:{node}",
        purpose="human input requested by the node",
        by=None,
        by_type="system",
        authorization=_authorization("defer", "graphflow.interrupt", reason),
        result=_result("deferred"),
        non_execution=_non_execution("deferred", reason),
        checkpoint_id=checkpoint_id,
        pause_id=pause_id,
        node=node,
        graphflow={"value_digest": digest(value, where="the interrupt's value")},
    )


def interrupt_resumed(
    *,
    thread_id: str,
    node: str,
    pause_id: str,
    answer: Any = None,
    by: str | None = None,
    by_type: PrincipalType = "human_user",
    checkpoint_id: str | None = None,
) -> EventDraft:
    """The interrupt ``pause_id`` was answered (``answer`` stored as a digest)."""
    return _thread(
        "agentic_action_allowed",
        "interrupt_resumed",
        thread_id=thread_id,
        operation="interrupt",
        resource=f"node:{node}",
        purpose="human input answered",
        by=by,
        by_type=by_type,
        authorization=_authorization("allow", "graphflow.interrupt", "answered"),
        result=_result("allowed"),
        checkpoint_id=checkpoint_id,
        pause_id=pause_id,
        node=node,
        graphflow={"answer_digest": digest(answer, where="the interrupt's answer")},
    )
