"""Shared builders for the evidence tests: call facts, one draft of every stage, logs."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from graphflow.evidence import CallFacts, EventDraft, EvidenceLog, stages

AT = datetime(2026, 4, 26, 12, 0, tzinfo=UTC)


def facts(**overrides: Any) -> CallFacts:
    fields: dict[str, Any] = {
        "thread_id": "t1",
        "call_id": "call_1",
        "tool": "issue_refund",
        "args": {"order_id": "A-1", "amount": 12.5},
        "agent": "support",
        "node": "agent",
        "principal_id": "alice@co.com",
        "risk": "high",
        "category": "financial",
        "checkpoint_id": "ck-1",
        "policy_version": "sha256:" + "c" * 64,
        "action_digest": "sha256:" + "d" * 64,
    }
    fields.update(overrides)
    return CallFacts(**fields)


def every_stage(call: CallFacts) -> dict[str, EventDraft]:
    """One draft of each helper in ``stages`` (several for those with variants)."""
    drafts: dict[str, EventDraft] = {
        "proposed": stages.proposed(call),
        "access_denied": stages.access_denied(call),
        "callback_skipped": stages.callback_skipped(call, callback="check_budget", result="no"),
        "paused": stages.paused(call, pause_id="p1", checkpoint_id="ck-2", expires_at=AT),
        "paused_escalate": stages.paused(
            call, pause_id="p1", decision="escalate", required_role="admin"
        ),
        "decision_approved": stages.decision_received(
            call, pause_id="p1", approve=True, by="bob", applied=True, at=AT
        ),
        "decision_denied": stages.decision_received(
            call, pause_id="p1", approve=False, by="bob", applied=True, reason="too much"
        ),
        "decision_refused": stages.decision_received(
            call, pause_id="p1", approve=True, by="eve", applied=False, refusal="no role"
        ),
        "decision_expired": stages.decision_received(
            call, pause_id="p1", approve=True, by="bob", applied=False, expired=True
        ),
        "dispatch_claimed": stages.dispatch_claimed(call, nonce="n1", approved_by="bob"),
        "dispatch_unapproved": stages.dispatch_claimed(call),
        "executed": stages.executed(call, result={"refund_id": "r1"}, approved_by="bob"),
        "executed_plain": stages.executed(call, result=None),
        "failed": stages.failed(call, error=RuntimeError("gateway down")),
        "outcome_unknown": stages.outcome_unknown(call, pause_id="p9"),
        "denied_by_human": stages.denied(call, by="bob", reason="no"),
        "denied_by_policy": stages.denied(call, policy_id="rule-7"),
        "deferred": stages.deferred(call, reason="authorization unavailable: timeout"),
        "escalated": stages.escalated(call, required_role="admin"),
        "reauthorization": stages.reauthorization_requested(call, pause_id="p3", retry_count=1),
        "gap": stages.gap(call, reason="disk full", missed=["proposed", "executed"], since=AT),
        "frozen_by_human": stages.frozen(thread_id="t1", reason="incident", by="ops"),
        "frozen_by_policy": stages.frozen(thread_id="t1", reason="rule 9", call=call),
        "unfrozen": stages.unfrozen(thread_id="t1", by="ops", reason="resolved"),
        "cancelled": stages.cancelled(thread_id="t1", by="ops"),
        "cancelled_call": stages.cancelled(thread_id="t1", call=call),
        "interrupt_paused": stages.interrupt_paused(
            thread_id="t1", node="review", pause_id="p4", checkpoint_id="ck-3", value={"q": 1}
        ),
        "interrupt_resumed": stages.interrupt_resumed(
            thread_id="t1", node="review", pause_id="p4", answer="yes", by="bob"
        ),
    }
    for decision in (
        "allow",
        "deny",
        "requires_human_approval",
        "requires_additional_verification",
        "escalate",
        "defer",
        "freeze",
        "reauthorization_required",
    ):
        drafts[f"policy_{decision}"] = stages.policy_decision(
            call,
            decision=decision,
            rule_id="rule-1",
            reason="because",  # type: ignore[arg-type]
        )
    return drafts


def fill(path: Path | str, n: int, *, threads: int = 2) -> EvidenceLog:
    """A log at ``path`` with ``n`` events (call ``c<i>`` on thread ``t<i % threads>``)."""
    log = EvidenceLog(path)
    for i in range(1, n + 1):
        call = facts(thread_id=f"t{i % threads}", call_id=f"c{i}", args={"order_id": f"A-{i}"})
        log.append(stages.proposed(call))
    return log


@contextlib.contextmanager
def tampering(path: Path | str) -> Iterator[sqlite3.Connection]:
    """A raw connection to the log file with its guards dropped, as an attacker has it."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP TRIGGER IF EXISTS evidence_events_no_update")
    conn.execute("DROP TRIGGER IF EXISTS evidence_events_no_delete")
    try:
        yield conn
    finally:
        conn.close()
