"""Each stage's event: the AAEF type and status it maps to, its fields, and that it validates."""

from __future__ import annotations

import inspect
import re
from datetime import datetime
from typing import Any, get_args

import pytest

from graphflow.errors import InvalidArgumentError
from graphflow.evidence import (
    AUDIT_STAGE,
    CallFacts,
    EventDraft,
    EvidenceLog,
    InvalidEventError,
    Stage,
    stages,
)
from graphflow.evidence.events import GRAPHFLOW_FIELDS

from ._support import every_stage, facts

# draft -> (event_type, authorization.decision, result.status)
MAPPING = {
    "proposed": ("agentic_action_attempted", "requires_additional_verification", "deferred"),
    "access_denied": ("agentic_action_denied", "deny", "denied"),
    "callback_skipped": ("agentic_action_denied", "deny", "safely_terminated"),
    "paused": ("agentic_action_deferred", "requires_human_approval", "deferred"),
    "paused_escalate": ("agentic_action_escalated", "escalate", "escalated"),
    "decision_approved": ("agentic_action_allowed", "allow", "allowed_after_approval"),
    "decision_denied": ("agentic_action_denied", "deny", "denied"),
    "decision_refused": ("agentic_action_deferred", "requires_human_approval", "deferred"),
    "decision_expired": ("agentic_action_deferred", "requires_human_approval", "deferred"),
    "dispatch_claimed": ("agentic_action_allowed", "allow", "allowed_after_approval"),
    "dispatch_unapproved": ("agentic_action_allowed", "allow", "allowed"),
    "executed": ("agentic_action_executed", "allow", "allowed_after_approval"),
    "executed_plain": ("agentic_action_executed", "allow", "allowed"),
    "failed": ("agentic_action_failed", "allow", "failed"),
    "outcome_unknown": ("agentic_action_failed", "allow", "quarantined"),
    "denied_by_human": ("agentic_action_denied", "deny", "denied"),
    "denied_by_policy": ("agentic_action_denied", "deny", "denied"),
    "deferred": ("agentic_action_deferred", "defer", "deferred"),
    "escalated": ("agentic_action_escalated", "escalate", "escalated"),
    "reauthorization": (
        "reauthorization_requested",
        "reauthorization_required",
        "reauthorization_requested",
    ),
    "gap": ("agentic_action_executed", "allow", "allowed"),
    "frozen_by_human": ("authority_frozen", "freeze", "frozen"),
    "frozen_by_policy": ("authority_frozen", "freeze", "frozen"),
    "unfrozen": ("human_override_recorded", "allow", "allowed"),
    "cancelled": ("agentic_action_revoked", "deny", "safely_terminated"),
    "cancelled_call": ("agentic_action_revoked", "deny", "safely_terminated"),
    "interrupt_paused": ("agentic_action_deferred", "defer", "deferred"),
    "interrupt_resumed": ("agentic_action_allowed", "allow", "allowed"),
    "policy_allow": ("agentic_action_allowed", "allow", "allowed"),
    "policy_deny": ("agentic_action_denied", "deny", "denied"),
    "policy_requires_human_approval": (
        "agentic_action_deferred",
        "requires_human_approval",
        "deferred",
    ),
    "policy_requires_additional_verification": (
        "agentic_action_deferred",
        "requires_additional_verification",
        "deferred",
    ),
    "policy_escalate": ("agentic_action_escalated", "escalate", "escalated"),
    "policy_defer": ("agentic_action_deferred", "defer", "deferred"),
    "policy_freeze": ("authority_frozen", "freeze", "frozen"),
    "policy_reauthorization_required": (
        "reauthorization_requested",
        "reauthorization_required",
        "reauthorization_requested",
    ),
}


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    """Every stage's event as appended to a log (validated on append) and read back."""
    log = EvidenceLog(":memory:", validate=True)
    drafts = every_stage(facts())
    records = {name: log.append(draft) for name, draft in drafts.items()}
    assert log.verify().ok
    return {name: rec.event for name, rec in records.items()}


def test_every_stage_maps_to_its_aaef_type_decision_and_status(recorded: dict[str, Any]) -> None:
    assert set(recorded) == set(MAPPING)
    got = {
        name: (e["event_type"], e["authorization"]["decision"], e["result"]["status"])
        for name, e in recorded.items()
    }
    assert got == MAPPING


@pytest.mark.parametrize("name", sorted(MAPPING))
def test_every_stage_validates(name: str, recorded: dict[str, Any], schema_validator: Any) -> None:
    errors = [f"{e.json_path}: {e.message}" for e in schema_validator.iter_errors(recorded[name])]
    assert errors == []


def test_every_public_stage_helper_is_exercised(recorded: dict[str, Any]) -> None:
    helpers = {
        name
        for name, fn in vars(stages).items()
        if inspect.isfunction(fn) and not name.startswith("_") and fn.__module__ == stages.__name__
    }
    used = {e["extensions"]["graphflow"]["stage"] for e in recorded.values()}
    assert helpers == used == set(get_args(Stage))  # one helper per stage, named after it


def test_every_event_has_the_graphflow_fields(recorded: dict[str, Any]) -> None:
    for name, event in recorded.items():
        graphflow = event["extensions"]["graphflow"]
        assert set(GRAPHFLOW_FIELDS) <= set(graphflow), name
        assert graphflow["thread_id"] == "t1", name
        assert type(graphflow["seq"]) is int and re.fullmatch(
            r"[0-9a-f]{64}", graphflow["prev_hash"]
        )
        assert event["evidence"]["tamper_evidence"] == "hash_chain"
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", event["evidence"]["evidence_hash"])
    paused = recorded["paused"]["extensions"]["graphflow"]
    assert (paused["pause_id"], paused["checkpoint_id"]) == ("p1", "ck-2")
    assert recorded["dispatch_claimed"]["extensions"]["graphflow"]["nonce"] == "n1"
    proposed = recorded["proposed"]["extensions"]["graphflow"]
    assert (proposed["pause_id"], proposed["nonce"]) == (None, None)
    assert proposed["call_id"] == "call_1" and proposed["checkpoint_id"] == "ck-1"
    assert proposed["policy_version"] == "sha256:" + "c" * 64
    assert proposed["action_digest"] == "sha256:" + "d" * 64
    assert proposed["detail"] == {"arguments": {"order_id": "A-1", "amount": 12.5}}
    unfrozen = recorded["unfrozen"]["extensions"]["graphflow"]
    assert unfrozen["call_id"] is None and unfrozen["action_digest"] is None


def test_events_bind_the_call_and_its_actors(recorded: dict[str, Any]) -> None:
    proposed = recorded["proposed"]
    assert proposed["action_id"] == "t1:call_1"
    assert proposed["agent"] == {
        "agent_id": "support",
        "agent_instance_id": "t1/agent",
        "agent_product": "graphflow",
    }
    assert proposed["principal"] == {"principal_type": "human_user", "principal_id": "alice@co.com"}
    digest = proposed["requested_action"]["argument_digest"]
    assert all(e["requested_action"]["argument_digest"] == digest for e in recorded.values() if
               e["requested_action"].get("tool_name") == "issue_refund")  # fmt: skip
    approved = recorded["decision_approved"]
    assert approved["principal"]["principal_id"] == "bob"
    assert approved["approval"]["approval_timestamp"] == "2026-04-26T12:00:00.000000Z"
    refused = recorded["decision_refused"]
    assert refused["extensions"]["graphflow"]["applied"] is False
    assert refused["non_execution"]["reason"] == "no role"
    assert recorded["decision_expired"]["approval"]["approval_decision"] == "expired"
    paused = recorded["paused"]["authorization"]["authorization_decision_artifact"]
    assert paused["bound_action_digest"] == "sha256:" + "d" * 64
    assert paused["expires_at"] == "2026-04-26T12:00:00.000000Z"
    assert recorded["escalated"]["non_execution"]["escalation_target"] == "admin"
    assert recorded["failed"]["result"]["error_code"] == "RuntimeError"
    assert recorded["frozen_by_human"]["override"]["override_actor_id"] == "ops"
    assert recorded["frozen_by_policy"]["principal"]["principal_id"] == "alice@co.com"
    assert recorded["cancelled"]["principal"] == {
        "principal_type": "human_user",
        "principal_id": "ops",
    }
    gap = recorded["gap"]["extensions"]["graphflow"]["gap"]
    assert gap == {"reason": "disk full", "missed": ["proposed", "executed"],
                   "since": "2026-04-26T12:00:00.000000Z"}  # fmt: skip
    resumed = recorded["interrupt_resumed"]
    assert resumed["action_id"] == recorded["interrupt_paused"]["action_id"] == "t1:interrupt:p4"


def test_a_call_without_a_principal_or_node(schema_validator: Any) -> None:
    log = EvidenceLog(":memory:")
    call = facts(principal_id=None, node=None, category=None, risk="low", action_digest=None)
    for draft in every_stage(call).values():
        event = log.append(draft).event
        assert not list(schema_validator.iter_errors(event))
    event = log.events()[0].event
    assert event["principal"] == {"principal_type": "unknown", "principal_id": "unknown"}
    assert event["agent"]["agent_instance_id"] == "t1"
    assert event["requested_action"]["action_type"] == "tool_call"
    assert event["evidence"]["retention_class"] == "agentic_action"


def test_timestamps_are_rfc3339_utc_text_made_once() -> None:
    log = EvidenceLog(":memory:")
    written = log.append(stages.proposed(facts())).event["timestamp"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", written)
    assert log.events()[0].event["timestamp"] == written  # stored as text, read as text
    assert datetime.fromisoformat(written).tzinfo is not None


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("thread_id", "", "CallFacts.thread_id must be a non-empty str"),
        ("tool", None, "CallFacts.tool must be a non-empty str"),
        ("risk", "severe", r"CallFacts.risk must be one of \['low'"),
        ("principal_type", "robot", "CallFacts.principal_type must be one of"),
        ("args", ["a"], "CallFacts.args must be a mapping, not list"),
        ("args", {"when": datetime(2026, 1, 1)}, r"CallFacts.args\['when'\]: a datetime"),
        ("authority_scope", "tool:x", "CallFacts.authority_scope must be a tuple"),
    ],
)
def test_bad_call_facts_are_refused_naming_the_field(field: str, value: Any, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        facts(**{field: value})


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="timezone-aware"):
        stages.paused(facts(), pause_id="p", expires_at=datetime(2026, 1, 1))


def test_a_draft_may_not_set_reserved_graphflow_fields() -> None:
    draft = stages.proposed(facts())
    with pytest.raises(InvalidArgumentError, match=r"may not set \['seq'\]"):
        EventDraft(**{**_fields(draft), "graphflow": {"seq": 7}})


def _fields(draft: EventDraft) -> dict[str, Any]:
    return {name: getattr(draft, name) for name in draft.__dataclass_fields__}


def test_an_event_that_does_not_fit_the_schema_writes_nothing() -> None:
    log = EvidenceLog(":memory:", validate=True)
    good = stages.proposed(facts())
    bad = EventDraft(**{**_fields(good), "result": {"status": "bogus", "external_effect": False}})
    with pytest.raises(InvalidEventError, match=r"\$\.result\.status: 'bogus' is not one of") as e:
        log.append_many([good, bad])
    assert e.value.errors and e.value.path == ":memory:"
    assert log.head().count == 0  # all or nothing
    log.append(good)
    assert log.verify().ok and log.head().count == 1


def test_every_stage_has_an_audit_stage() -> None:
    assert set(AUDIT_STAGE) == set(get_args(Stage))
    assert set(AUDIT_STAGE.values()) <= {
        "proposal", "access", "callback", "policy", "pause", "decision", "dispatch", "result",
        "cancel", "freeze", "unfreeze", "interrupt", "resume",
    }  # fmt: skip


def test_call_facts_defaults() -> None:
    call = CallFacts(thread_id="t", call_id="c", tool="x", args={}, agent="a")
    assert call.action_id == "t:c" and call.effect_expected is True  # risk defaults to high
    assert CallFacts(thread_id="t", call_id="c", tool="x", args={}, agent="a", risk="low",
                     ).effect_expected is False  # fmt: skip
