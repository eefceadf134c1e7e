"""``graphflow.engine.answers``: what a call answers, one pure function for invoke and submit."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from checkpoints import SerializationError
from checkpoints.models import CallId, CheckpointId, DecisionRecord, PauseId, PauseRecord, ThreadId
from graphflow.decisions import Decision, normalize_fingerprint, tool_call_fingerprint
from graphflow.engine.answers import check_decisions, effective, resolve
from graphflow.engine.pauses import UNSET
from graphflow.errors import (
    AmbiguousResumeError,
    InvalidArgumentError,
    NothingToResumeError,
    UnknownPauseError,
)

TID = "t1"
FP = tool_call_fingerprint("delete_file", {"path": "/a"})


def tool_pause(call_id: str, task: str = "0123456789abcdef", turn: int = 0) -> PauseRecord:
    request = {
        "tool_name": "delete_file",
        "function_call_id": call_id,
        "args": {"path": "/a"},
        "fingerprint": FP,
        "agent": "files",
    }
    return PauseRecord(
        PauseId(f"{task}:tc:t{turn}:{call_id}"),
        ThreadId(TID),
        "",
        CheckpointId("ck"),
        task,  # type: ignore[arg-type]
        "files",
        "tool_confirmation",
        {"request": request},
    )


def interrupt_pause(task: str = "fedcba9876543210", node: str = "review") -> PauseRecord:
    return PauseRecord(
        PauseId(f"{task}:i0"),
        ThreadId(TID),
        "",
        CheckpointId("ck"),
        task,  # type: ignore[arg-type]
        node,
        "interrupt",
        {"question": "ok?"},
    )


def gate(kind: str = "before") -> PauseRecord:
    task = "aaaaaaaaaaaaaaaa"
    return PauseRecord(
        PauseId(f"{task}:{kind}"),
        ThreadId(TID),
        "",
        CheckpointId("ck"),
        task,  # type: ignore[arg-type]
        "n",
        kind,  # type: ignore[arg-type]
        {"node": "n"},
    )


TOOL = tool_pause("call_1")
ASK = interrupt_pause()


# -- resume= --------------------------------------------------------------------------------
def test_a_bare_resume_never_answers_a_tool_confirmation() -> None:
    with pytest.raises(InvalidArgumentError, match="decisions="):
        resolve(TID, [TOOL], resume="approve")


def test_a_bare_resume_answers_the_one_interrupt_beside_a_tool_confirmation() -> None:
    found = resolve(TID, [TOOL, ASK], resume="yes", by="ann")
    assert [(a.pause_id, a.value, a.by) for a in found.answers] == [(ASK.id, "yes", "ann")]


def test_a_pause_map_with_a_tool_confirmation_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="tool confirmation"):
        resolve(TID, [TOOL, ASK], resume={TOOL.id: "approve"})


def test_a_bare_resume_with_two_interrupts_is_ambiguous() -> None:
    other = interrupt_pause("1111111111111111", "check")
    with pytest.raises(AmbiguousResumeError):
        resolve(TID, [ASK, other], resume="x")


def test_a_resume_with_nothing_answerable_says_so() -> None:
    with pytest.raises(NothingToResumeError):
        resolve(TID, [], resume="x")


@pytest.mark.parametrize(
    "key",
    ["review", "fedcba98", "fedcba9876543210:i1", "0000000000000000:i0"],
    ids=["node name", "truncated id", "other key of the task", "unknown pause id"],
)
def test_a_resume_mapping_with_a_mistaken_key_names_the_pending_ids(key: str) -> None:
    with pytest.raises(UnknownPauseError) as err:
        resolve(TID, [ASK], resume={key: "yes"})
    assert ASK.id in str(err.value) and "wrap it" in str(err.value)


def test_a_resume_mapping_mixing_known_and_unknown_ids_is_refused() -> None:
    with pytest.raises(UnknownPauseError):
        resolve(TID, [ASK], resume={ASK.id: "yes", "nope": 1})


@pytest.mark.parametrize("answer", [{"approved": True, "note": "fine"}, {}, {"question": "ok"}])
def test_a_dict_without_mistaken_keys_is_a_plain_answer(answer: dict[str, Any]) -> None:
    found = resolve(TID, [ASK], resume=answer)
    assert [(a.pause_id, a.value) for a in found.answers] == [(ASK.id, answer)]


def test_a_wrapped_dict_answer_may_have_any_keys() -> None:
    found = resolve(TID, [ASK], resume={ASK.id: {"review": "ok"}})
    assert [(a.pause_id, a.value) for a in found.answers] == [(ASK.id, {"review": "ok"})]


def test_an_answer_that_cannot_be_stored_is_refused_when_taken() -> None:
    with pytest.raises(SerializationError, match="answer to pause"):
        resolve(TID, [ASK], resume=threading.Lock())


def test_gates_are_released_only_when_asked_and_no_decision_is_given() -> None:
    g = gate()
    assert resolve(TID, [g, TOOL]).answers == ()
    released = resolve(TID, [g, TOOL], release_gates=True)
    assert [(a.pause_id, a.reason) for a in released.answers] == [(g.id, "continued")]
    with_decision = resolve(
        TID, [g, TOOL], decisions=check_decisions({"call_1": "deny"}), release_gates=True
    )
    assert [a.pause_id for a in with_decision.answers] == [TOOL.id]


# -- decisions= -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad", ["approve", ["approve"], 3, {"call_1": "yes"}, {"": "approve"}, {1: "approve"}]
)
def test_decisions_of_the_wrong_shape_are_refused_up_front(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        check_decisions(bad)


def _decide(pending: list[PauseRecord], decisions: dict[str, Any], **kw: Any) -> Any:
    return resolve(TID, pending, decisions=check_decisions(decisions), **kw)


def test_a_decision_by_call_id_answers_its_pause_and_is_recorded_with_it() -> None:
    found = _decide([TOOL], {"call_1": Decision.approve(by="ann", reason="ok")})
    assert [a.pause_id for a in found.answers] == [TOOL.id]
    (rec,) = found.decisions
    assert (rec.call_id, rec.pause_id, rec.by, rec.reason, rec.applied) == (
        "call_1",
        TOOL.id,
        "ann",
        "ok",
        True,
    )
    assert found.ignored == ()


@pytest.mark.parametrize(
    ("key", "decision", "reason"),
    [
        ("call_9", "approve", "no pending tool call 'call_9'"),
        ("delete_file", "approve", "is a tool name"),
        ("call_1", Decision.approve(fingerprint="sha256:" + "0" * 64), "does not match"),
        ("call_1", Decision.approve(fingerprint="abc"), "malformed"),
        (ASK.id, "approve", "not a tool call: answer it with resume="),
    ],
    ids=["unknown call", "tool name", "wrong fingerprint", "malformed fingerprint", "interrupt"],
)
def test_an_ignored_decision_answers_nothing_and_says_why(
    key: str, decision: Any, reason: str
) -> None:
    found = _decide([TOOL, ASK], {key: decision})
    assert found.answers == ()
    (rec,) = found.ignored
    assert not rec.applied and rec.note is not None and reason in rec.note


def test_a_fingerprint_without_its_prefix_or_in_upper_case_is_the_same_fingerprint() -> None:
    bare = FP.removeprefix("sha256:")
    for given in (bare, bare.upper(), FP.upper()):
        assert normalize_fingerprint(given) == FP
        found = _decide([TOOL], {"call_1": Decision.approve(fingerprint=given)})
        assert [a.pause_id for a in found.answers] == [TOOL.id]
        assert Decision.coerce(found.answers[0].value).fingerprint == FP


def test_two_pending_calls_sharing_an_id_need_decisions_by_pause_id() -> None:
    a, b = tool_pause("call_0", "1111111111111111"), tool_pause("call_0", "2222222222222222")
    with pytest.raises(InvalidArgumentError, match="key each decision by its pause id"):
        _decide([a, b], {"call_0": "approve"})
    found = _decide([a, b], {a.id: "approve", b.id: "deny"})
    assert [(x.pause_id, Decision.coerce(x.value).verdict) for x in found.answers] == [
        (a.id, "approve"),
        (b.id, "deny"),
    ]
    assert [r.call_id for r in found.decisions] == ["call_0", "call_0"]


def test_two_decisions_for_one_call_in_one_call_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="both answer"):
        _decide([TOOL], {"call_1": "approve", TOOL.id: "deny"})


def test_the_call_reason_reaches_decisions_without_their_own() -> None:
    found = _decide([TOOL], {"call_1": "deny"}, by="ops", reason="not today")
    assert (found.decisions[0].reason, found.answers[0].reason) == ("not today", "not today")


# -- superseded decisions -------------------------------------------------------------------
def _rec(call: str, verdict: str, by: str, *, applied: bool = True) -> DecisionRecord:
    return DecisionRecord(
        ThreadId(TID),
        CallId(call),
        verdict,  # type: ignore[arg-type]
        None,
        by,
        applied=applied,
        note=None if applied else "no pending tool call",
        pause_id=PauseId(f"0123456789abcdef:tc:t0:{call}"),
    )


def test_of_two_applied_decisions_on_one_call_the_later_takes_effect() -> None:
    alice, bob, other = _rec("c", "approve", "alice"), _rec("c", "deny", "bob"), _rec("d", "x", "z")
    out = effective([alice, other, bob])
    assert [(r.by, r.applied) for r in out] == [("alice", False), ("z", True), ("bob", True)]
    assert out[0].note == "superseded by the deny of bob"
    assert out[2] is bob


def test_an_ignored_decision_never_supersedes_one_that_applied() -> None:
    alice, late = _rec("c", "approve", "alice"), _rec("c", "deny", "bob", applied=False)
    assert effective([alice, late]) == [alice, late]


def test_resolve_leaves_unset_resume_alone() -> None:
    assert resolve(TID, [ASK], resume=UNSET) == resolve(TID, [ASK])
