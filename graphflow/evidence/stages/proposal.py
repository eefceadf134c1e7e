"""The stages before anything is decided by a human: the proposal, access control, a
before-tool callback, and the policy's decision (``graphflow.evidence.stages`` documents
each event)."""

from __future__ import annotations

from typing import Any

from graphflow.evidence.events import CallFacts, EventDraft
from graphflow.evidence.redact import digest
from graphflow.evidence.stages import build
from graphflow.evidence.stages.build import AuthorizationDecision


def proposed(call: CallFacts) -> EventDraft:
    """The model proposed ``call``: nothing is authorized yet; its arguments are stored."""
    return build.call_event(
        call,
        "agentic_action_attempted",
        "proposed",
        authorization=build.authorization(
            "requires_additional_verification",
            "graphflow.authorization_pipeline",
            "proposed by the model; the authorization pipeline has not decided yet",
        ),
        result=build.result("deferred"),
        detail={"arguments": call.args},
    )


def access_denied(
    call: CallFacts, *, reason: str | None = None, policy_id: str = "graphflow.access_control"
) -> EventDraft:
    """Access control refused ``call``: it does not run."""
    reason = reason or "the principal's roles do not allow this tool"
    return build.call_event(
        call,
        "agentic_action_denied",
        "access_denied",
        authorization=build.authorization("deny", policy_id, reason),
        result=build.result("denied"),
        non_execution=build.non_execution("denied", reason, authority_gap=f"tool:{call.tool}"),
    )


def callback_skipped(call: CallFacts, *, callback: str, result: Any = None) -> EventDraft:
    """The before-tool callback ``callback`` gave ``result`` in place of running the tool."""
    reason = f"before-tool callback {callback} supplied the result; the tool did not run"
    return build.call_event(
        call,
        "agentic_action_denied",
        "callback_skipped",
        authorization=build.authorization("deny", f"graphflow.before_tool:{callback}", reason),
        result=build.result("safely_terminated", result_digest=digest(result, where="the result")),
        non_execution=build.non_execution("safely_terminated", reason),
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
    return build.decided(
        call,
        "policy_decision",
        decision,
        policy_id=rule_id or "graphflow.policy.default",
        reason=reason,
        required_role=required_role,
    )
