"""The stages of a call that runs: the dispatch claim, its outcome (executed, failed, or
unknown after a crash), and a gap (it ran while the log could not be written);
``graphflow.evidence.stages`` documents each event."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from graphflow.evidence.events import CallFacts, EventDraft, rfc3339
from graphflow.evidence.redact import digest
from graphflow.evidence.stages import build


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
    return build.call_event(
        call,
        "agentic_action_allowed",
        "dispatch_claimed",
        authorization=build.authorization(
            "allow", "graphflow.dispatch", "dispatch enforcement passed; the claim is committed"
        ),
        result=build.result("allowed_after_approval" if approved_by else "allowed"),
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
    return build.call_event(
        call,
        "agentic_action_executed",
        "executed",
        authorization=build.authorization("allow", "graphflow.dispatch"),
        result=build.result(
            "allowed_after_approval" if approved_by else "allowed",
            call.effect_expected if external_effect is None else external_effect,
            tool_invoked=call.tool,
            result_digest=digest(result, where="the tool's result"),
        ),
        approval=_approved(approved_by),
        nonce=nonce,
    )


def _approved(by: str | None) -> dict[str, Any] | None:
    """The ``approval`` of a call a human (``by``) approved (None: none was needed)."""
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
    return build.call_event(
        call,
        "agentic_action_failed",
        "failed",
        authorization=build.authorization("allow", "graphflow.dispatch"),
        result=build.result("failed", external_effect, tool_invoked=call.tool, error_code=code),
        approval=_approved(approved_by),
        nonce=nonce,
        detail={"error": text[:4000]},
    )


def outcome_unknown(
    call: CallFacts, *, reason: str | None = None, pause_id: str | None = None
) -> EventDraft:
    """``call`` was claimed but no outcome was recorded: it is not run again by itself."""
    reason = reason or "dispatch was claimed but no outcome was recorded; a human must decide"
    return build.call_event(
        call,
        "agentic_action_failed",
        "outcome_unknown",
        authorization=build.authorization("allow", "graphflow.dispatch", reason),
        result=build.result("quarantined", call.effect_expected, error_code="outcome_unknown"),
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
    return build.call_event(
        call,
        "agentic_action_executed",
        "gap",
        authorization=build.authorization("allow", "graphflow.dispatch", "recorded after a gap"),
        result=build.result(
            "allowed",
            call.effect_expected,
            tool_invoked=call.tool,
            result_digest=digest(result, where="the tool's result"),
        ),
        graphflow={"gap": {"reason": reason, "missed": list(missed), "since": rfc3339(since)}},
        detail={"arguments": call.args},
    )
