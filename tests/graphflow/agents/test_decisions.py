"""``graphflow.auth``: decisions, tool-call fingerprints and matching decisions to pauses.

Pure unit tests (no graph runs): ``tool_call_fingerprint`` is independent of key order at
every nesting level and changes when anything else changes; ``Decision`` builds, coerces
and rejects bad values; ``match_decisions`` binds decisions to function call ids (never
tool names) and fingerprints, and records every decision, applied or not.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoints.models import CheckpointId, PauseId, PauseRecord, TaskId, ThreadId
from graphflow.auth import Decision, match_decisions, tool_call_fingerprint
from graphflow.errors import GraphflowError, InvalidArgumentError

# -- tool_call_fingerprint ------------------------------------------------------------------------

NESTED = {
    "path": "/data/report.csv",
    "options": {"force": True, "depth": 2, "filters": [{"a": 1, "b": {"c": None, "d": [1, 2]}}]},
    "tags": ["x", "y"],
    "n": 1.5,
}


def reorder(value: Any, rng: random.Random) -> Any:
    """The same value with the keys of every mapping, at every level, in a shuffled order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: reorder(v, rng) for k, v in items}
    if isinstance(value, list):
        return [reorder(v, rng) for v in value]
    return value


def test_fingerprint_is_a_stable_sha256_string() -> None:
    fp = tool_call_fingerprint("delete_file", {"path": "/data/report.csv"})
    assert fp.startswith("sha256:") and len(fp) == len("sha256:") + 64
    assert fp == tool_call_fingerprint("delete_file", {"path": "/data/report.csv"})


def test_fingerprint_ignores_key_order_at_the_top_level() -> None:
    a = tool_call_fingerprint("move", {"src": "a", "dst": "b"})
    b = tool_call_fingerprint("move", {"dst": "b", "src": "a"})
    assert a == b


def test_fingerprint_ignores_key_order_at_every_nesting_level() -> None:
    flipped = {
        "n": 1.5,
        "tags": ["x", "y"],
        "options": {
            "filters": [{"b": {"d": [1, 2], "c": None}, "a": 1}],
            "depth": 2,
            "force": True,
        },
        "path": "/data/report.csv",
    }
    assert list(flipped) != list(NESTED)
    assert list(flipped["options"]) != list(NESTED["options"])
    assert list(flipped["options"]["filters"][0]) != list(NESTED["options"]["filters"][0])
    assert tool_call_fingerprint("t", flipped) == tool_call_fingerprint("t", NESTED)


def test_fingerprint_ignores_key_order_for_many_shuffles() -> None:
    rng = random.Random(7)
    expected = tool_call_fingerprint("t", NESTED)
    for _ in range(50):
        assert tool_call_fingerprint("t", reorder(NESTED, rng)) == expected


json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(args=st.dictionaries(st.text(max_size=6), json_values, max_size=5), seed=st.integers())
def test_fingerprint_key_order_property(args: dict[str, Any], seed: int) -> None:
    shuffled = reorder(args, random.Random(seed))
    assert tool_call_fingerprint("tool", shuffled) == tool_call_fingerprint("tool", args)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("t", {**NESTED, "path": "/data/other.csv"}),  # a top-level value
        ("t", {**NESTED, "options": {**NESTED["options"], "depth": 3}}),  # a nested value
        (
            "t",
            {
                **NESTED,
                "options": {**NESTED["options"], "filters": [{"a": 1, "b": {"c": 0, "d": [1, 2]}}]},
            },
        ),
        ("t", {**NESTED, "tags": ["y", "x"]}),  # list order matters
        ("t", {**NESTED, "extra": None}),  # an extra key, even with a None value
        ("t", {k: v for k, v in NESTED.items() if k != "n"}),  # a missing key
        ("t", {**NESTED, "path": "/DATA/REPORT.CSV"}),  # case
        ("t", {**NESTED, "n": "1.5"}),  # type: a string is not a number
        ("t", {**NESTED, "options": {**NESTED["options"], "force": 1}}),  # True is not 1
        ("other_tool", NESTED),  # the tool name
    ],
    ids=[
        "value",
        "nested-value",
        "deep-value",
        "list-order",
        "extra-key",
        "missing-key",
        "case",
        "str-vs-number",
        "bool-vs-int",
        "tool-name",
    ],
)
def test_fingerprint_differs_when_the_call_differs(name: str, args: dict[str, Any]) -> None:
    assert tool_call_fingerprint(name, args) != tool_call_fingerprint("t", NESTED)


def test_fingerprint_of_a_value_it_cannot_canonicalize_is_a_clear_error() -> None:
    with pytest.raises(InvalidArgumentError, match="object"):
        tool_call_fingerprint("t", {"x": object()})


# -- Decision -------------------------------------------------------------------------------------
def test_approve_and_deny_build_decisions() -> None:
    assert Decision.approve() == Decision("approve", None, None, None)
    d = Decision.approve(fingerprint="sha256:ab", by="alice", reason="checked")
    assert (d.verdict, d.fingerprint, d.by, d.reason) == (
        "approve",
        "sha256:ab",
        "alice",
        "checked",
    )
    d = Decision.deny(reason="too risky", by="bob")
    assert (d.verdict, d.fingerprint, d.by, d.reason) == ("deny", None, "bob", "too risky")
    assert Decision.deny().reason is None


def test_decisions_are_frozen() -> None:
    d = Decision.approve()
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.verdict = "deny"  # type: ignore[misc]


@pytest.mark.parametrize("verdict", ["approve", "deny"])
def test_coerce_accepts_the_strings(verdict: str) -> None:
    d = Decision.coerce(verdict)
    assert d == Decision(verdict)  # type: ignore[arg-type]
    assert (d.fingerprint, d.by, d.reason) == (None, None, None)


def test_coerce_returns_a_decision_as_is_and_revives_stored_answers() -> None:
    d = Decision.approve(fingerprint="sha256:ff", by="alice", reason="ok")
    assert Decision.coerce(d) is d
    assert Decision.coerce(d.as_answer()) == d
    deny = Decision.deny(reason="no")
    assert Decision.coerce(deny.as_answer()) == deny
    assert Decision.coerce({"verdict": "deny"}) == Decision("deny")


@pytest.mark.parametrize(
    "bad",
    [
        "yes",
        "Approve",
        "APPROVE",
        " approve",
        "",
        "denied",
        None,
        True,
        False,
        1,
        0,
        [],
        ["approve"],
        {},
        {"verdict": "maybe"},
        {"decision": "approve"},
        {"verdict": None},
        object(),
    ],
    ids=repr,
)
def test_coerce_rejects_bad_values(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        Decision.coerce(bad)
    assert isinstance(info.value, GraphflowError) and isinstance(info.value, ValueError)
    assert "approve" in str(info.value) and "deny" in str(info.value)


@pytest.mark.parametrize("verdict", ["maybe", "reject", "APPROVE"])
def test_a_decision_with_a_bad_verdict_is_rejected(verdict: str) -> None:
    with pytest.raises(InvalidArgumentError):
        Decision.coerce(Decision(verdict))  # type: ignore[arg-type]


# -- match_decisions ------------------------------------------------------------------------------
TID = "thread-1"
FP1 = tool_call_fingerprint("delete_file", {"path": "/a"})
FP2 = tool_call_fingerprint("delete_file", {"path": "/b"})


def tc_pause(
    call_id: str, tool: str, args: dict[str, Any], *, outcome: str | None = None
) -> PauseRecord:
    value: dict[str, Any] = {
        "request": {
            "tool_name": tool,
            "function_call_id": call_id,
            "args": args,
            "fingerprint": tool_call_fingerprint(tool, args),
            "agent": "file_manager",
        }
    }
    if outcome is not None:
        value["outcome"] = outcome
    key = f"unknown:{call_id}" if outcome else f"tc:{call_id}"
    return PauseRecord(
        PauseId(f"0123456789abcdef:{key}"),
        ThreadId(TID),
        "",
        CheckpointId("ck1"),
        TaskId("0123456789abcdef"),
        "file_manager",
        "tool_confirmation",
        value,
    )


P1 = tc_pause("call_1", "delete_file", {"path": "/a"})
P2 = tc_pause("call_2", "delete_file", {"path": "/b"})
INTERRUPT = PauseRecord(
    PauseId("fedcba9876543210:i0"),
    ThreadId(TID),
    "",
    CheckpointId("ck1"),
    TaskId("fedcba9876543210"),
    "review",
    "interrupt",
    # looks like a request, but an interrupt is never answered by a decision
    {"request": {"tool_name": "x", "function_call_id": "call_i"}},
)


def test_a_decision_by_call_id_answers_that_pause_only() -> None:
    answers, records = match_decisions(TID, [P1, P2], {"call_1": "approve"})
    assert [(a.pause_id, a.thread_id) for a in answers] == [(P1.id, TID)]
    # the stored answer is bound to the call it answered, though no fingerprint was given
    fp = P1.value["request"]["fingerprint"]
    assert Decision.coerce(answers[0].value) == Decision.approve(fingerprint=fp)
    assert len(records) == 1
    r = records[0]
    assert (r.thread_id, r.call_id, r.verdict, r.applied, r.note) == (
        TID,
        "call_1",
        "approve",
        True,
        None,
    )


def test_each_call_gets_its_own_answer() -> None:
    answers, records = match_decisions(
        TID, [P1, P2], {"call_1": "approve", "call_2": Decision.deny(reason="keep it")}
    )
    by_pause = {a.pause_id: Decision.coerce(a.value) for a in answers}
    fp1, fp2 = (p.value["request"]["fingerprint"] for p in (P1, P2))
    assert by_pause == {
        P1.id: Decision.approve(fingerprint=fp1),
        P2.id: Decision("deny", fp2, None, "keep it"),
    }
    assert [(r.call_id, r.verdict, r.reason, r.applied) for r in records] == [
        ("call_1", "approve", None, True),
        ("call_2", "deny", "keep it", True),
    ]


def test_a_tool_name_key_is_ignored_and_recorded_with_a_note() -> None:
    answers, records = match_decisions(TID, [P1, P2], {"delete_file": "approve"})
    assert answers == []
    assert len(records) == 1
    r = records[0]
    assert (r.call_id, r.verdict, r.applied) == ("delete_file", "approve", False)
    assert r.note and "tool name" in r.note and "call_1" in r.note and "call_2" in r.note


def test_an_unknown_call_id_is_ignored_and_recorded_with_a_note() -> None:
    answers, records = match_decisions(TID, [P1], {"call_9": "deny"})
    assert answers == []
    assert [(r.call_id, r.applied) for r in records] == [("call_9", False)]
    assert records[0].note and "call_9" in records[0].note


def test_no_pending_pauses_ignores_everything() -> None:
    answers, records = match_decisions(TID, [], {"call_1": "approve"})
    assert answers == [] and [r.applied for r in records] == [False]


def test_interrupt_pauses_are_never_answered_by_decisions() -> None:
    answers, records = match_decisions(TID, [INTERRUPT], {"call_i": "approve"})
    assert answers == [] and [r.applied for r in records] == [False]


def test_a_fingerprint_mismatch_is_ignored_and_recorded() -> None:
    answers, records = match_decisions(
        TID, [P1], {"call_1": Decision.approve(fingerprint=FP2, by="bob")}
    )
    assert answers == []
    r = records[0]
    assert (r.call_id, r.fingerprint, r.by, r.applied) == ("call_1", FP2, "bob", False)
    assert r.note and "fingerprint" in r.note


def test_a_matching_fingerprint_is_applied_and_kept_in_the_answer() -> None:
    answers, records = match_decisions(TID, [P1], {"call_1": Decision.approve(fingerprint=FP1)})
    assert [a.pause_id for a in answers] == [P1.id]
    assert Decision.coerce(answers[0].value).fingerprint == FP1
    assert [(r.fingerprint, r.applied) for r in records] == [(FP1, True)]


def test_a_fingerprint_with_keys_in_another_order_matches() -> None:
    args = {"src": "/a", "dst": "/b", "opts": {"x": 1, "y": 2}}
    pause = tc_pause("call_m", "move", args)
    fp = tool_call_fingerprint("move", {"opts": {"y": 2, "x": 1}, "dst": "/b", "src": "/a"})
    answers, records = match_decisions(TID, [pause], {"call_m": Decision.approve(fingerprint=fp)})
    assert [a.pause_id for a in answers] == [pause.id] and records[0].applied


def test_an_outcome_unknown_pause_is_answered_by_its_call_id() -> None:
    pause = tc_pause("call_1", "delete_file", {"path": "/a"}, outcome="unknown")
    answers, records = match_decisions(TID, [pause], {"call_1": "deny"})
    assert [a.pause_id for a in answers] == [pause.id]
    assert Decision.coerce(answers[0].value).verdict == "deny"
    assert records[0].applied


def test_the_actor_is_the_decisions_by_else_the_callers() -> None:
    answers, records = match_decisions(
        TID, [P1, P2], {"call_1": "approve", "call_2": Decision.approve(by="alice")}, by="bob"
    )
    assert [r.by for r in records] == ["bob", "alice"]
    assert [a.by for a in answers] == ["bob", "alice"]
    assert [Decision.coerce(a.value).by for a in answers] == ["bob", "alice"]


def test_the_reason_reaches_record_and_answer() -> None:
    answers, records = match_decisions(TID, [P1], {"call_1": Decision.deny(reason="keep it")})
    assert records[0].reason == "keep it"
    assert answers[0].reason == "keep it"
    assert Decision.coerce(answers[0].value).reason == "keep it"


def test_every_decision_is_recorded_with_a_timestamp_in_input_order() -> None:
    decisions = {
        "call_2": Decision.approve(fingerprint=FP1),  # mismatch
        "delete_file": "deny",  # tool name
        "call_1": "approve",  # applied
        "ghost": "approve",  # unknown
    }
    answers, records = match_decisions(TID, [P1, P2], decisions)
    assert [r.call_id for r in records] == list(decisions)
    assert [r.applied for r in records] == [False, False, True, False]
    assert all(r.note for r in records if not r.applied)
    assert all(isinstance(r.created_at, float) and r.created_at > 0 for r in records)
    assert [a.pause_id for a in answers] == [P1.id]


def test_a_bad_value_raises_before_returning_anything() -> None:
    with pytest.raises(InvalidArgumentError):
        match_decisions(TID, [P1, P2], {"call_1": "approve", "call_2": "yes"})
