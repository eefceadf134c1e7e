"""The stages of a thread's life: freeze, unfreeze, cancel, and a node's interrupt paused
and answered (``graphflow.evidence.stages`` documents each event)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from graphflow.evidence.events import (
    CallFacts,
    EventDraft,
    EventType,
    PrincipalType,
    Stage,
    rfc3339,
)
from graphflow.evidence.redact import digest
from graphflow.evidence.stages import build


def _operation(
    call: CallFacts | None,
    event_type: EventType,
    stage: Stage,
    *,
    thread_id: str,
    operation: str,
    purpose: str,
    by: str | None,
    by_type: PrincipalType,
    call_principal_type: PrincipalType | None,
    **sections: Any,
) -> EventDraft:
    """The event of an operation on the thread: about ``call`` when the operation ends it
    (``by`` its principal, typed ``call_principal_type``, as ``call_event`` takes them),
    else about the thread itself (``thread:<id>``)."""
    if call is not None:
        return build.call_event(
            call,
            event_type,
            stage,
            principal_id=by,
            principal_type=call_principal_type,
            **sections,
        )
    return build.thread_event(
        event_type,
        stage,
        thread_id=thread_id,
        operation=operation,
        resource=f"thread:{thread_id}",
        purpose=purpose,
        by=by,
        by_type=by_type,
        **sections,
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
    return _operation(
        call,
        "authority_frozen",
        "frozen",
        thread_id=thread_id,
        operation="thread.freeze",
        purpose=reason,
        by=by,
        by_type=by_type,
        call_principal_type=None,
        authorization=build.authorization(
            "freeze", policy_id or "graphflow.freeze", reason, state_checks=state_checks
        ),
        result=build.result("frozen"),
        non_execution=build.non_execution("frozen", reason),
        override=override,
        checkpoint_id=checkpoint_id,
    )


def unfrozen(
    *,
    thread_id: str,
    by: str | None,
    reason: str,
    by_type: PrincipalType = "human_user",
    checkpoint_id: str | None = None,
) -> EventDraft:
    """``by`` restored the thread's authority (no one named: graphflow itself, a system
    principal, as for a freeze by no one)."""
    if by is None:
        by, by_type = "graphflow", "system"
    return build.thread_event(
        "human_override_recorded",
        "unfrozen",
        thread_id=thread_id,
        operation="thread.unfreeze",
        resource=f"thread:{thread_id}",
        purpose=reason,
        by=by,
        by_type=by_type,
        authorization=build.authorization("allow", "graphflow.unfreeze", reason),
        result=build.result("allowed"),
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
    return _operation(
        call,
        "agentic_action_revoked",
        "cancelled",
        thread_id=thread_id,
        operation="thread.cancel",
        purpose=reason,
        by=by,
        by_type=by_type,
        call_principal_type=by_type,
        authorization=build.authorization("deny", "graphflow.cancel", reason),
        result=build.result("safely_terminated"),
        non_execution=build.non_execution("safely_terminated", reason),
        response={"revocation_triggered": True},
        checkpoint_id=checkpoint_id,
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
    return build.thread_event(
        "agentic_action_deferred",
        "interrupt_paused",
        thread_id=thread_id,
        operation="interrupt",
        resource=f"node:{node}",
        purpose="human input requested by the node",
        by=None,
        by_type="system",
        authorization=build.authorization("defer", "graphflow.interrupt", reason),
        result=build.result("deferred"),
        non_execution=build.non_execution("deferred", reason),
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
    refusal: str | None = None,
    at: datetime | None = None,
) -> EventDraft:
    """The interrupt ``pause_id`` was answered (``answer`` stored as a digest); with a
    ``refusal``, the answer did not take effect (the pause is still pending) and why.
    ``at``: the answer record's time (``answered_at``: ``graph.audit`` matches the event to
    the record by it)."""
    answer_digest = digest(answer, where="the interrupt's answer")
    ext: dict[str, Any] = {"answer_digest": answer_digest}
    if at is not None:
        ext["answered_at"] = rfc3339(at)
    if refusal is None:
        taken: dict[str, Any] = {
            "authorization": build.authorization("allow", "graphflow.interrupt", "answered"),
            "result": build.result("allowed"),
            "graphflow": ext,
        }
    else:
        taken = {
            "authorization": build.authorization("defer", "graphflow.interrupt", refusal),
            "result": build.result("deferred"),
            "non_execution": build.non_execution("deferred", refusal),
            "graphflow": {**ext, "applied": False, "refusal": refusal},
        }
    return build.thread_event(
        "agentic_action_allowed" if refusal is None else "agentic_action_deferred",
        "interrupt_resumed",
        thread_id=thread_id,
        operation="interrupt",
        resource=f"node:{node}",
        purpose="human input answered",
        by=by,
        by_type=by_type,
        checkpoint_id=checkpoint_id,
        pause_id=pause_id,
        node=node,
        **taken,
    )
