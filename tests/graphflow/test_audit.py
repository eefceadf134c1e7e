"""``graphflow.audit.as_taken``: the trail as decisions and answers took effect (pure)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from checkpoints.models import AnswerRecord, CallId, DecisionRecord, PauseId, ThreadId
from graphflow.audit import AuditEntry, as_taken
from graphflow.evidence.events import rfc3339

AT = datetime(2026, 12, 1, tzinfo=UTC)


def _decision(seq: int, actor: str, decision: str, applied: bool = True) -> AuditEntry:
    return AuditEntry(seq=seq, at=AT, stage="decision", call_id="c1", tool="t", actor=actor,
                      decision=decision, applied=applied, checkpoint_id="ck", pause_id="p1",
                      detail=None, event_type="agentic_action_allowed")  # fmt: skip


def _record(by: str, verdict: str, at: float) -> DecisionRecord:
    return DecisionRecord(ThreadId("t"), CallId("c1"), verdict, by=by, created_at=at,  # type: ignore[arg-type]
                          pause_id=PauseId("p1"))  # fmt: skip


def _stamp(at: float) -> str:
    return rfc3339(datetime.fromtimestamp(at, UTC))


def test_the_latest_in_the_stores_order_wins_though_the_log_has_them_the_other_way() -> None:
    """Two approvers at once: alice's event was appended first, but bob's record was stored
    first, so alice's decision is the one that took effect."""
    entries = [_decision(1, "alice", "allow"), _decision(2, "bob", "deny")]
    marks = [(_stamp(20.0), False), (_stamp(10.0), False)]
    decided = [_record("bob", "deny", 10.0), _record("alice", "approve", 20.0)]
    got = as_taken(entries, marks, decided)
    assert [(e.actor, e.applied, e.detail) for e in got] == [
        ("alice", True, None),
        ("bob", False, "superseded by the approve of alice"),
    ]
    # Without the store's records (an old log, no store): the log's order.
    old = as_taken(entries, [(None, False), (None, False)])
    assert [(e.actor, e.applied) for e in old] == [("alice", False), ("bob", True)]


def test_a_refusal_when_the_call_ran_takes_the_decision_back() -> None:
    refusal = dataclasses.replace(
        _decision(2, "bob", "requires_human_approval", applied=False),
        detail="'bob' lacks the role 'finance'",
    )
    got = as_taken([_decision(1, "bob", "allow"), refusal], [(_stamp(1.0), False), (None, True)])
    assert [(e.applied, e.detail) for e in got] == [
        (False, "'bob' lacks the role 'finance'"),
        (False, "'bob' lacks the role 'finance'"),
    ]


def _answer(seq: int, actor: str) -> AuditEntry:
    return AuditEntry(seq=seq, at=AT, stage="resume", call_id=None, tool=None, actor=actor,
                      decision="allow", applied=True, checkpoint_id="ck", pause_id="p1",
                      detail="answered", event_type="agentic_action_allowed")  # fmt: skip


def test_of_two_answers_to_an_interrupt_the_stores_latest_wins_whatever_the_logs_order() -> None:
    """Two answers at once: alice's event was appended first, but her record was stored
    last (the latest answer record of the pause is hers), so hers took effect."""
    entries = [_answer(1, "alice"), _answer(2, "bob")]
    marks = [(_stamp(20.0), False), (_stamp(10.0), False)]
    latest = [AnswerRecord(PauseId("p1"), ThreadId("t"), "yes", by="alice", created_at=20.0)]
    got = as_taken(entries, marks, answered=latest)
    assert [(e.actor, e.applied, e.detail) for e in got] == [
        ("alice", True, "answered"),
        ("bob", False, "superseded by the answer of alice"),
    ]
    # Without the store's records (events of an older graphflow, no answered_at): the log's.
    old = as_taken(entries, [(None, False), (None, False)], answered=latest)
    assert [(e.actor, e.applied) for e in old] == [("alice", False), ("bob", True)]
