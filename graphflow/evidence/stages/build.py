"""What every stage's event is made of: the sections of an event about a call or about a
thread, and the AAEF event type and result status of each authorization decision.

The stage helpers (``proposal``, ``decisions``, ``execution``, ``thread``) build their
drafts from these; ``graphflow.evidence.stages`` documents the events they give.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Literal

from graphflow.evidence.events import CallFacts, EventDraft, EventType, PrincipalType, Stage

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
"""The decisions that pause a call for a human."""

BY_DECISION: Mapping[str, tuple[EventType, str]] = {
    "allow": ("agentic_action_allowed", "allowed"),
    "deny": ("agentic_action_denied", "denied"),
    "requires_human_approval": ("agentic_action_deferred", "deferred"),
    "requires_additional_verification": ("agentic_action_deferred", "deferred"),
    "defer": ("agentic_action_deferred", "deferred"),
    "escalate": ("agentic_action_escalated", "escalated"),
    "freeze": ("authority_frozen", "frozen"),
    "reauthorization_required": ("reauthorization_requested", "reauthorization_requested"),
}
"""Each decision's event type and ``result.status``."""

NON_EXECUTION: Mapping[str, str] = {
    "denied": "denied",
    "deferred": "deferred",
    "escalated": "escalated",
    "frozen": "frozen",
    "reauthorization_requested": "deferred",
}
"""The ``non_execution_decision`` of each status under which a call does not run (now)."""


def present(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` without those that are None (an optional section or field left out)."""
    return {k: v for k, v in fields.items() if v is not None}


def tool_resource(call: CallFacts) -> str:
    """The resource ``call`` acts on (default ``"tool:<name>"``)."""
    return call.resource or f"tool:{call.tool}"


def call_event(
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
        "resource": tool_resource(call),
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
        agent=agent(call.agent, call.thread_id, call.node),
        principal=principal(pid, ptype),
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
        **present(sections),
    )


def decided(
    call: CallFacts,
    stage: Stage,
    decision: AuthorizationDecision,
    *,
    policy_id: str,
    reason: str | None,
    required_role: str | None = None,
    **sections: Any,
) -> EventDraft:
    """The draft of an event recording ``decision`` (by ``policy_id``) on ``call``: the
    decision's event type and status and, when the call does not run now, its
    ``non_execution`` (escalated to ``required_role``); ``sections`` as for ``call_event``."""
    event_type, status = BY_DECISION[decision]
    kind = NON_EXECUTION.get(status)
    return call_event(
        call,
        event_type,
        stage,
        authorization=authorization(decision, policy_id, reason),
        result=result(status),
        non_execution=(
            non_execution(kind, reason, escalation_target=required_role) if kind else None
        ),
        graphflow=required_role_field(required_role),
        **sections,
    )


def thread_event(
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
    """The draft of one event about a thread (no call): the operation is the action."""
    return EventDraft(
        event_type=event_type,
        stage=stage,
        # An interrupt and its answer are one action (named by the pause); each freeze,
        # unfreeze or cancel is its own.
        action_id=f"{thread_id}:{operation}:{pause_id or uuid.uuid4().hex}",
        agent=agent("graphflow", thread_id, node),
        principal=principal(by, by_type) if by else principal("graphflow", "system"),
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
        **present(sections),
    )


def agent(agent_id: str, thread_id: str, node: str | None) -> dict[str, Any]:
    """The ``agent`` section: ``agent_id``, running in ``thread_id`` (at ``node``)."""
    return {
        "agent_id": agent_id,
        "agent_instance_id": f"{thread_id}/{node}" if node else thread_id,
        "agent_product": "graphflow",
    }


def principal(principal_id: str | None, principal_type: PrincipalType) -> dict[str, Any]:
    """The ``principal`` section (``unknown`` when there is no principal)."""
    if not principal_id:
        return {"principal_type": "unknown", "principal_id": "unknown"}
    return {"principal_type": principal_type, "principal_id": principal_id}


def authorization(
    decision: str, policy_id: str, reason: str | None = None, **more: Any
) -> dict[str, Any]:
    """The ``authorization`` section: ``decision`` by ``policy_id``, and why."""
    out: dict[str, Any] = {"decision": decision, "policy_id": policy_id}
    if reason:
        out["reason"] = reason
    out.update(present(more))
    return out


def result(status: str, external_effect: bool = False, **more: Any) -> dict[str, Any]:
    """The ``result`` section: ``status``, and whether the world outside was changed."""
    out: dict[str, Any] = {"status": status, "external_effect": external_effect}
    out.update(present(more))
    return out


def non_execution(decision: str, reason: str | None, **more: Any) -> dict[str, Any]:
    """The ``non_execution`` section of a call that does not run (now), and why."""
    out: dict[str, Any] = {"non_execution_decision": decision}
    if reason:
        out["reason"] = reason
    out.update(present(more))
    return out


def required_role_field(role: str | None) -> dict[str, str] | None:
    """The ``extensions.graphflow`` field naming the role an approver needs (None: none)."""
    return {"required_role": role} if role else None
