"""The evidence a graph writes: which log, one event per stage of every call, the audit trail,
and fail-closed behaviour when the log cannot be written.

Every event is validated against the AAEF schema as it is written (``tests/conftest.py``).
The flow is ``_auth_flow``'s support agent (refunds, email, an inbox).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

import pytest

from checkpoints import MemoryCheckpointer, SqliteCheckpointer
from graphflow import END, START, InvalidArgumentError, StateGraph, interrupt
from graphflow.agents import tool
from graphflow.auth import Decision
from graphflow.evidence import EvidenceLog

from . import _auth_flow as flow
from ._auth_flow import EMAIL, REFUND, Spy, ask, build

HERE = Path(__file__).parent


class Answer(TypedDict, total=False):
    answer: str


@pytest.fixture
def spy(tmp_path: Path) -> Spy:
    return Spy(tmp_path / "spy.jsonl")


def stages_of(log: EvidenceLog, thread: str) -> list[str]:
    return [r.event["extensions"]["graphflow"]["stage"] for r in log.events(thread)]


# -- which log -------------------------------------------------------------------------------------
def test_a_sqlite_store_gets_its_log_beside_it(tmp_path: Path, spy: Spy) -> None:
    g = build(SqliteCheckpointer(tmp_path / "app.db"), spy)
    g.invoke(ask("refund 7 50"), thread_id="t", principal="alice")
    log = g.evidence
    assert log is not None and Path(log.path) == tmp_path / "app.evidence.db"
    assert stages_of(log, "t") == ["proposed", "policy_decision", "dispatch_claimed", "executed"]
    assert log.verify().ok


def test_graphs_on_one_memory_store_share_a_log(spy: Spy) -> None:
    store = MemoryCheckpointer()
    a, b = build(store, spy), build(store, spy)
    assert a.evidence is b.evidence and a.evidence is not None
    assert a.evidence.path == ":memory:"
    assert build(MemoryCheckpointer(), spy).evidence is not a.evidence


def test_an_explicit_log_is_used(tmp_path: Path, spy: Spy) -> None:
    log = EvidenceLog(tmp_path / "mine.db")
    g = build(MemoryCheckpointer(), spy, evidence=log)
    g.invoke(ask("refund 7 50"), thread_id="t", principal="alice")
    assert g.evidence is log and len(log.events("t")) == 4


def test_a_bad_evidence_argument_is_refused(spy: Spy) -> None:
    with pytest.raises(InvalidArgumentError, match="evidence must be an EvidenceLog"):
        build(MemoryCheckpointer(), spy, evidence="e.db")


def test_proposals_that_cannot_run_are_in_the_trail(spy: Spy) -> None:
    from graphflow.agents import ModelResponse, ScriptedModel, ToolCall

    calls = [
        ToolCall(id="c_unknown", name="format_disk", args={"disk": "/dev/sda"}),
        ToolCall(id="c_bad", name="issue_refund", args={"order": "7"}),  # no amount
    ]
    model = ScriptedModel([ModelResponse(tool_calls=calls), "Sorry."])
    g = build(MemoryCheckpointer(), spy, model=model)
    assert g.invoke(ask("anything"), thread_id="t", principal="alice").status == "done"
    assert spy.runs() == []
    log = g.evidence
    assert log is not None
    events = [r.event for r in log.events("t")]
    assert [(e["extensions"]["graphflow"]["call_id"], e["event_type"]) for e in events] == [
        ("c_unknown", "agentic_action_attempted"),
        ("c_unknown", "agentic_action_denied"),
        ("c_bad", "agentic_action_attempted"),
        ("c_bad", "agentic_action_denied"),
    ]
    # Refused before any authorization: never logged as allowed, nor as dispatched.
    for refusal in (events[1], events[3]):
        assert refusal["authorization"]["decision"] == "deny"
        assert refusal["authorization"]["policy_id"] == "graphflow.tool_check"
        assert refusal["result"]["status"] == "denied"
        assert "tool_invoked" not in refusal["result"]
    assert "unknown tool 'format_disk'" in events[1]["authorization"]["reason"]
    assert "invalid arguments for tool 'issue_refund'" in events[3]["authorization"]["reason"]
    assert [e.stage for e in g.audit("t")] == ["proposal", "result", "proposal", "result"]


def test_proposals_with_unusable_call_ids_are_refused_and_in_the_trail(spy: Spy) -> None:
    from graphflow.agents import ModelResponse, ScriptedModel, ToolCall

    calls = [
        ToolCall(id="c1", name="issue_refund", args={"order": "7", "amount": 5}),
        ToolCall(id="c1", name="issue_refund", args={"order": "8", "amount": 9}),  # repeated
        ToolCall(id="c:2", name="issue_refund", args={"order": "9", "amount": 1}),  # bad chars
    ]
    model = ScriptedModel([ModelResponse(tool_calls=calls), "Done."])
    g = build(MemoryCheckpointer(), spy, model=model)
    result = g.invoke(ask("anything"), thread_id="t", principal="alice")
    assert result.status == "done"
    assert [r["order"] for r in spy.runs()] == ["7"]  # only the usable call ran
    log = g.evidence
    assert log is not None
    events = [r.event for r in log.events("t")]
    refusals = [e for e in events if e["event_type"] == "agentic_action_denied"]
    assert [e["extensions"]["graphflow"]["call_id"] for e in refusals] == ["c1", "c:2"]
    for e in refusals:
        assert e["authorization"]["policy_id"] == "graphflow.tool_check"
        assert "was not run" in e["authorization"]["reason"]
    assert "repeats an earlier call" in refusals[0]["authorization"]["reason"]
    proposed = [e for e in events if e["event_type"] == "agentic_action_attempted"]
    assert len(proposed) == 3  # every call the model proposed
    texts = [m.content for m in result.state.messages if m.role == "tool"]
    assert len(texts) == 3 and all(t.startswith("Error: tool call") for t in texts[1:])


def test_without_evidence_submit_records_answers() -> None:
    def ask_it(state: Answer) -> Answer:
        return {"answer": str(interrupt("ship?"))}

    b = StateGraph(Answer).add_node("ask_it", ask_it)
    g = (
        b.add_edge(START, "ask_it")
        .add_edge("ask_it", END)
        .compile(checkpointer=MemoryCheckpointer(), evidence=False)
    )
    assert g.invoke({}, thread_id="t").status == "paused"
    g.submit("t", resume="yes", by="alice")
    assert g.invoke(None, thread_id="t").state == {"answer": "yes"}
    g.invoke({}, thread_id="u")  # and the thread operations that write evidence elsewhere
    g.freeze("u", reason="incident", by="alice")
    g.unfreeze("u", reason="resolved", by="alice")
    g.cancel("u", reason="not needed")


def test_without_evidence_a_high_risk_call_never_runs(spy: Spy) -> None:
    g = build(MemoryCheckpointer(), spy, evidence=False)
    assert g.evidence is None
    [p] = g.invoke(ask("refund 7 50"), thread_id="t", principal="alice").pauses
    assert p.request is not None and p.request.policy_decision == "defer"
    assert p.request.reason is not None
    assert p.request.reason.startswith("evidence unavailable: this graph keeps no evidence")
    assert spy.runs() == []
    assert g.invoke(None, thread_id="t").status == "paused"  # evaluated again: still none
    assert spy.runs() == []


def test_without_evidence_a_low_risk_call_runs(spy: Spy) -> None:
    g = build(MemoryCheckpointer(), spy, evidence=False)
    g.invoke(ask("inbox"), thread_id="t", principal="alice")
    assert [r["tool"] for r in spy.runs()] == ["read_inbox"]


# -- the stages of a call --------------------------------------------------------------------------
def test_every_stage_of_an_approved_call_is_one_event(spy: Spy) -> None:
    g = build(MemoryCheckpointer(), spy)
    first = g.invoke(ask("refund 7 500"), thread_id="t", principal="alice")
    g.invoke(None, thread_id="t", decisions={REFUND: Decision.approve(by="bob")})  # no role
    g.invoke(None, thread_id="t")  # a rerun that answers nothing writes nothing new
    g.invoke(None, thread_id="t", decisions={REFUND: Decision.approve(by="carol")})
    log = g.evidence
    assert log is not None
    assert stages_of(log, "t") == [
        "proposed",
        "policy_decision",
        "paused",
        "decision_received",  # bob's, as it arrived (it matched the pause)
        "decision_received",  # refused when the call ran: bob lacks finance
        "paused",  # the new pause, :r1
        "decision_received",  # carol's
        "dispatch_claimed",
        "executed",
    ]
    events = [r.event for r in log.events("t")]
    ext = [e["extensions"]["graphflow"] for e in events]
    assert {x["call_id"] for x in ext} == {REFUND}
    assert ext[2]["pause_id"] == first.pauses[0].id
    assert ext[2]["checkpoint_id"] == first.pauses[0].checkpoint_id
    assert ext[4]["applied"] is False and "lacks the role 'finance'" in ext[4]["refusal"]
    assert ext[5]["pause_id"] == f"{first.pauses[0].id}:r1"
    digest = first.pauses[0].request.action_digest  # type: ignore[union-attr]
    assert ext[7]["action_digest"] == digest and ext[7]["nonce"] == f"{first.pauses[0].id}:r1"
    assert events[8]["result"]["status"] == "allowed_after_approval"
    assert events[8]["approval"]["approver_id"] == "carol"
    assert log.verify().ok


def test_a_denied_and_an_access_denied_call_have_their_events(spy: Spy) -> None:
    g = build(MemoryCheckpointer(), spy)
    g.invoke(ask("email x@evil.com"), thread_id="a", principal="alice")
    g.invoke(None, thread_id="a", decisions={EMAIL: Decision.deny(by="bob", reason="no")})
    g.invoke(ask("refund 7 50"), thread_id="b", principal="mallory")
    log = g.evidence
    assert log is not None
    assert stages_of(log, "a")[-2:] == ["decision_received", "denied"]
    assert stages_of(log, "b") == ["proposed", "access_denied"]
    [denied] = [r.event for r in log.events("b") if r.event_type == "agentic_action_denied"]
    assert denied["principal"]["principal_id"] == "mallory"


def test_interrupts_and_freezes_are_recorded(tmp_path: Path) -> None:
    def review(state: Answer) -> Answer:
        return {"answer": str(interrupt({"question": "ok?"}))}

    b = StateGraph(Answer).add_node("review", review).add_edge(START, "review")
    g = b.add_edge("review", END).compile(checkpointer=SqliteCheckpointer(tmp_path / "i.db"))
    [p] = g.invoke({}, thread_id="t").pauses
    g.freeze("t", by="secops", reason="audit")
    g.unfreeze("t", by="secops", reason="done")
    g.invoke(None, thread_id="t", resume="yes")
    log = g.evidence
    assert log is not None
    assert stages_of(log, "t") == ["interrupt_paused", "frozen", "unfrozen", "interrupt_resumed"]
    trail = g.audit("t")
    assert [e.stage for e in trail] == ["interrupt", "freeze", "unfreeze", "resume"]
    assert trail[0].pause_id == trail[3].pause_id == p.id
    assert trail[1].actor == "secops"


# -- the audit trail -------------------------------------------------------------------------------
def run_child(db: Path, spy: Spy, action: str, **extra: Any) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(HERE / "_auth_flow.py"), str(db), str(spy.path), action,
         json.dumps(extra)],
        capture_output=True, text=True, timeout=60, cwd=HERE.parents[2],
        env={**__import__("os").environ, "PYTHONPATH": str(HERE.parents[2])},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_a_flow_across_processes_audits_from_its_pause_checkpoint(tmp_path: Path, spy: Spy) -> None:
    db = tmp_path / "flow.db"
    assert run_child(db, spy, "start", text="refund 7 500", principal="alice")["status"] == (
        "paused"
    )
    approve = {REFUND: {"verdict": "approve", "by": "carol", "reason": "checked"}}
    assert run_child(db, spy, "resume", decisions=approve)["status"] == "done"
    g = build(SqliteCheckpointer(db), spy)
    [pause] = [p for h in g.get_state_history("t1") for p in h.pauses]
    trail = g.audit("t1")
    assert [e.stage for e in trail] == [
        "proposal", "policy", "pause", "decision", "dispatch", "result"
    ]  # fmt: skip
    assert {e.call_id for e in trail} == {REFUND}
    assert {e.tool for e in trail} == {"issue_refund"}
    by_stage = {e.stage: e for e in trail}
    assert by_stage["pause"].pause_id == pause.id
    assert by_stage["pause"].checkpoint_id == pause.checkpoint_id
    assert by_stage["decision"].actor == "carol" and by_stage["decision"].applied
    assert by_stage["decision"].pause_id == pause.id
    assert by_stage["result"].decision == "allow"
    assert [e.seq for e in trail] == sorted(e.seq for e in trail)
    assert len(spy.runs("issue_refund")) == 1


def test_decisions_that_did_not_apply_appear_with_their_reason(spy: Spy) -> None:
    g = build(MemoryCheckpointer(), spy)
    g.invoke(ask("refund 7 500"), thread_id="t", principal="alice")
    g.invoke(None, thread_id="t", decisions={"call_nope": "approve"})
    trail = g.audit("t")
    [ignored] = [e for e in trail if e.stage == "decision"]
    assert ignored.applied is False and ignored.call_id == "call_nope"
    assert ignored.detail is not None and "no pending tool call 'call_nope'" in ignored.detail


def test_audit_of_an_unknown_thread_is_refused(spy: Spy) -> None:
    from graphflow import ThreadNotFoundError

    with pytest.raises(ThreadNotFoundError):
        build(MemoryCheckpointer(), spy).audit("nope")


# -- fail closed -----------------------------------------------------------------------------------
def away(directory: Path) -> Path:
    """Take the log's directory away (the log cannot be written); returns where it went."""
    gone = directory.with_name(directory.name + ".away")
    shutil.move(directory, gone)
    return gone


def test_an_unwritable_log_blocks_a_high_risk_call_until_it_is_back(
    tmp_path: Path, spy: Spy
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = EvidenceLog(logs / "e.db")
    g = build(SqliteCheckpointer(tmp_path / "s.db"), spy, evidence=log)
    gone = away(logs)
    res = g.invoke(ask("refund 7 50"), thread_id="t", principal="alice")
    [p] = res.pauses
    assert p.request is not None and p.request.policy_decision == "defer"
    assert p.request.reason is not None and p.request.reason.startswith("evidence unavailable: ")
    assert "does not exist" in p.request.reason
    assert spy.runs() == []
    assert g.invoke(None, thread_id="t").status == "paused"  # still away: still blocked
    shutil.move(gone, logs)
    assert g.invoke(None, thread_id="t").status == "done"  # evaluated again: it runs
    assert len(spy.runs("issue_refund")) == 1
    assert stages_of(log, "t")[:2] == ["proposed", "policy_decision"]
    assert stages_of(log, "t")[-2:] == ["dispatch_claimed", "executed"]
    assert log.verify().ok


def test_a_low_risk_call_runs_and_its_gap_is_recorded_when_the_log_is_back(
    tmp_path: Path, spy: Spy
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = EvidenceLog(logs / "e.db")
    g = build(SqliteCheckpointer(tmp_path / "s.db"), spy, evidence=log)
    gone = away(logs)
    assert g.invoke(ask("inbox"), thread_id="t", principal="alice").status == "done"
    assert [r["tool"] for r in spy.runs()] == ["read_inbox"]
    shutil.move(gone, logs)
    assert stages_of(log, "t") == []  # kept in the thread's outbox meanwhile
    trail = g.audit("t")  # written now, never lost
    assert "gap" in stages_of(log, "t") and "executed" in stages_of(log, "t")
    [gap] = [
        r.event for r in log.events("t") if r.event["extensions"]["graphflow"]["stage"] == "gap"
    ]
    assert "executed" in gap["extensions"]["graphflow"]["gap"]["missed"]
    assert [e.stage for e in trail][-1] == "result"
    g.audit("t")  # written once
    assert len(log.events("t")) == len(trail)


def test_secrets_in_tool_arguments_never_reach_the_log_file(tmp_path: Path) -> None:
    secret, token = "key-9f8e7d6c5b4a3f2e1d0c", "Bearer tok.abcdef0123456789"

    @tool(risk="low")
    def call_api(api_key: str, header: str) -> str:
        """Call an API."""
        return "ok"

    from graphflow.agents import (
        Agent,
        AgentNode,
        MessagesState,
        ModelResponse,
        ScriptedModel,
        ToolCall,
    )

    model = ScriptedModel(
        [
            ModelResponse(tool_calls=[ToolCall(id="c1", name="call_api",
                                               args={"api_key": secret, "header": token})]),
            "done",
        ]
    )  # fmt: skip
    b = StateGraph(MessagesState).add_node(AgentNode(Agent("a", model, [call_api])))
    g = (
        b.add_edge(START, "a")
        .add_edge("a", END)
        .compile(checkpointer=SqliteCheckpointer(tmp_path / "s.db"))
    )
    g.invoke(ask("go"), thread_id="t")
    log = g.evidence
    assert log is not None and len(log.events("t")) == 4
    log.close()
    data = b"".join(p.read_bytes() for p in tmp_path.glob("s.evidence.db*"))
    assert secret.encode() not in data and b"tok.abcdef0123456789" not in data
    assert flow.FAKE_APPROVAL  # (the module is imported for its flow)
