"""StageRecord: plain data for each stage of the pipeline, ready to become an AAEF event."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from checkpoints import serde
from graphflow.auth import StageRecord
from graphflow.auth.records import STAGE_DECISIONS
from graphflow.errors import InvalidArgumentError

EVENT_TYPES = {  # the AAEF schema's event_type enum
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
}


def record(**overrides: object) -> StageRecord:
    fields: dict[str, object] = {
        "stage": "policy",
        "call_id": "call_1",
        "tool": "issue_refund",
        "decision": "escalate",
        "reason": "large refund",
        "rule_id": "big-refund",
        "principal_id": "alice",
        "action_digest": "sha256:" + "1" * 64,
        "policy_version": "sha256:" + "2" * 64,
        "thread_id": "t1",
        "risk": "high",
        "category": "financial",
        "at": datetime(2026, 1, 2, tzinfo=UTC),
        "detail": {"required_role": "finance_manager"},
    }
    return StageRecord(**(fields | overrides))  # type: ignore[arg-type]


def test_stages_in_pipeline_order() -> None:
    assert list(STAGE_DECISIONS) == [
        "access_control",
        "before_tool",
        "policy",
        "confirmation",
        "dispatch",
        "execute",
        "after_tool",
    ]


def test_every_stage_decision_maps_to_an_aaef_event_type() -> None:
    for stage, decisions in STAGE_DECISIONS.items():
        for decision in decisions:
            rec = record(stage=stage, decision=decision)
            assert rec.aaef_event_type in EVENT_TYPES
    assert record(decision="freeze").aaef_event_type == "authority_frozen"
    assert record(stage="execute", decision="executed").aaef_event_type == (
        "agentic_action_executed"
    )


def test_plain_data_round_trips() -> None:
    rec = record()
    data = rec.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["at"] == "2026-01-02T00:00:00+00:00"
    assert StageRecord.from_dict(data) == rec
    assert serde.loads(serde.dumps(rec)) == rec


def test_defaults() -> None:
    rec = StageRecord("access_control", "call_1", "search", "deny")
    assert rec.at.tzinfo is not None and rec.detail == {} and rec.rule_id is None
    other_zone = record(at=datetime(2026, 1, 2, tzinfo=timezone(timedelta(hours=2))))
    assert other_zone.at.utcoffset() == timedelta(hours=2)


def test_bad_records_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown stage 'approval'"):
        record(stage="approval")
    with pytest.raises(InvalidArgumentError, match="stage 'execute' of call 'call_1'"):
        record(stage="execute", decision="allow")
    with pytest.raises(InvalidArgumentError, match="timezone-aware"):
        record(at=datetime(2026, 1, 2))
    with pytest.raises(InvalidArgumentError, match="needs stage"):
        StageRecord.from_dict({"stage": "policy"})
    with pytest.raises(InvalidArgumentError, match="needs stage"):
        StageRecord.from_dict(record().to_dict() | {"extra": 1})
