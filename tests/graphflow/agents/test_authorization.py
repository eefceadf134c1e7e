"""The authorization pipeline wired into ``Agent``: every rule of API.md's "Decisions and
authorization" holds end to end, and a spy on every tool shows it never ran where it must not.

The flow (``_auth_flow``): ``START -> intake -> support (agent) -> END``; the agent has
``issue_refund`` (high, financial), ``send_email`` (high, external communication) and
``read_inbox`` (low, untrusted output, whose text poses as an approval), RBAC and a YAML-style
policy: refunds up to 100 are allowed, larger ones escalate to ``finance``, external email
needs a human.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from checkpoints import Checkpointer, SqliteCheckpointer
from graphflow import ThreadFrozenError, ToolConfirmationPause
from graphflow.agents import confirm
from graphflow.auth import Decision, Policy, Principal, action_digest
from graphflow.errors import NodeError

from . import _auth_flow as flow
from ._auth_flow import EMAIL, INBOX, POLICY, REFUND, Spy, ask, build

HERE = Path(__file__).parent


@pytest.fixture
def spy(tmp_path: Path) -> Spy:
    return Spy(tmp_path / "spy.jsonl")


def the_pause(res: Any) -> ToolConfirmationPause:
    [p] = res.pauses
    assert isinstance(p, ToolConfirmationPause) and p.request is not None
    return p


def tool_results(g: Any, thread: str) -> dict[str, str]:
    snap = g.get_state(thread)
    return {m.tool_call_id: m.content for m in snap.values.messages if m.role == "tool"}


# -- access control --------------------------------------------------------------------------------
def test_a_deny_in_any_role_wins_over_an_allow(store: Checkpointer, spy: Spy) -> None:
    g = build(store, spy)
    res = g.invoke(ask("refund 7 50"), thread_id="t", principal="mallory")  # support + no-refunds
    assert res.status == "done" and spy.runs() == []
    assert "access denied" in tool_results(g, "t")[REFUND]
    assert "no-refunds" in tool_results(g, "t")[REFUND]


def test_an_unknown_principal_is_denied(store: Checkpointer, spy: Spy) -> None:
    g = build(store, spy)
    res = g.invoke(ask("refund 7 50"), thread_id="t", principal="dave")
    assert res.status == "done" and spy.runs() == []
    assert "access denied" in tool_results(g, "t")[REFUND]


def test_roles_of_the_principal_object_count(store: Checkpointer, spy: Spy) -> None:
    g = build(store, spy)
    erin = Principal("erin", roles=("support",))
    assert g.invoke(ask("refund 7 50"), thread_id="t", principal=erin).status == "done"
    assert [r["amount"] for r in spy.runs("issue_refund")] == [50]


# -- policy decisions ------------------------------------------------------------------------------
def test_an_allowed_call_runs_once_without_a_pause(store: Checkpointer, spy: Spy) -> None:
    g = build(store, spy)
    res = g.invoke(ask("refund 7 50"), thread_id="t", principal="alice")
    assert res.status == "done" and res.pauses == []
    assert spy.runs() == [{"tool": "issue_refund", "order": "7", "amount": 50}]


def test_the_pause_carries_everything_an_approver_needs(store: Checkpointer, spy: Spy) -> None:
    policy = Policy.from_dict(POLICY)
    g = build(store, spy, policy=policy)
    req = the_pause(g.invoke(ask("refund 7 500"), thread_id="t", principal="alice")).request
    assert req is not None
    tool = g.spec.nodes["support"].fn.agent.tools_by_name["issue_refund"]  # type: ignore[attr-defined]
    args = {"order": "7", "amount": 500}
    assert (req.tool_name, req.function_call_id, req.args) == ("issue_refund", REFUND, args)
    assert req.principal == "alice"
    assert req.action_digest == action_digest(
        tool, args, principal_id="alice", thread_id="t", policy_version=policy.version
    )
    assert (req.risk, req.category) == ("high", "financial")
    assert (req.policy_decision, req.policy_rule) == ("escalate", "large-refunds")
    assert req.reason == "refunds over 100 need finance"
    assert req.required_role == "finance"
    assert (req.tainted, req.taint_sources) == (False, ())
    assert req.policy_version == policy.version
    assert req.describe == {"amount": 500}
    assert req.expires_at is None
    assert spy.runs() == []


def test_a_policy_deny_tells_the_model_and_runs_nothing(store: Checkpointer, spy: Spy) -> None:
    policy = Policy.from_dict(
        {
            "policies": [
                {
                    "id": "no-mail",
                    "match": {"tool": "send_email"},
                    "decision": "deny",
                    "reason": "mail is off",
                }
            ]
        }
    )
    g = build(store, spy, policy=policy)
    res = g.invoke(ask("email x@co.com"), thread_id="t", principal="alice")
    assert res.status == "done" and spy.runs() == []
    assert "denied by policy" in tool_results(g, "t")[EMAIL]
    assert "mail is off" in tool_results(g, "t")[EMAIL]


def test_a_human_approval_runs_the_external_email_once(store: Checkpointer, spy: Spy) -> None:
    g = build(store, spy)
    p = the_pause(g.invoke(ask("email x@evil.com"), thread_id="t", principal="alice"))
    assert p.request is not None and p.request.policy_decision == "requires_human_approval"
    assert p.request.describe == {"destination": {"domain": "evil.com"}}
    assert spy.runs() == []
    res = g.invoke(None, thread_id="t", decisions={EMAIL: Decision.approve(by="bob")})
    assert res.status == "done"
    assert spy.runs() == [{"tool": "send_email", "to": "x@evil.com"}]
    [rec] = g.list_decisions("t")
    assert (rec.by, rec.applied, rec.verdict) == ("bob", True, "approve")


def test_a_high_risk_call_with_no_principal_escalates(store: Checkpointer, spy: Spy) -> None:
    g = build(store, spy, access=False)  # the policy alone would allow a refund of 50
    req = the_pause(g.invoke(ask("refund 7 50"), thread_id="t")).request
    assert req is not None
    assert (req.policy_decision, req.principal) == ("escalate", None)
    assert spy.runs() == []


def test_the_simple_form_keeps_its_behaviour_without_a_principal(
    store: Checkpointer, spy: Spy
) -> None:
    g = build(store, spy, guarded=False, require_confirmation=["issue_refund"])
    req = the_pause(g.invoke(ask("refund 7 50"), thread_id="t")).request
    assert req is not None and req.policy_decision is None
    assert g.invoke(None, thread_id="t", decisions={REFUND: "approve"}).status == "done"
    assert len(spy.runs("issue_refund")) == 1


# -- escalation and the approver's role ------------------------------------------------------------
def test_an_approver_without_the_escalation_role_is_refused(store: Checkpointer, spy: Spy) -> None:
    g = build(store, spy)
    first = the_pause(g.invoke(ask("refund 7 500"), thread_id="t", principal="alice"))
    res = g.invoke(None, thread_id="t", decisions={REFUND: Decision.approve(by="bob")})
    again = the_pause(res)
    assert spy.runs() == []
    assert again.id == f"{first.id}:r1"  # a new pause, naming why
    assert "'bob' lacks the role 'finance'" in again.value["refused"]
    recs = g.list_decisions("t")
    assert [(r.by, r.applied) for r in recs] == [("bob", False)]  # the refusal folded in
    assert recs[0].note is not None and "lacks the role" in recs[0].note
    trail = [(e.actor, e.applied) for e in g.audit("t") if e.stage == "decision"]
    assert trail == [("bob", False), ("bob", False)]  # the trail says so too
    # bob again (and any rerun) changes nothing; carol holds finance
    g.invoke(None, thread_id="t", decisions={REFUND: Decision.approve(by="bob")})
    assert spy.runs() == []
    res = g.invoke(None, thread_id="t", decisions={REFUND: Decision.approve(by="carol")})
    assert res.status == "done"
    assert spy.runs("issue_refund") == [{"tool": "issue_refund", "order": "7", "amount": 500}]
    assert [(r.by, r.applied) for r in g.list_decisions("t")][-1] == ("carol", True)


def test_the_role_may_come_with_the_approver_principal(store: Checkpointer, spy: Spy) -> None:
    g = build(store, spy)
    g.invoke(ask("refund 7 500"), thread_id="t", principal="alice")
    approver = Principal("frank", roles=("finance",))
    res = g.invoke(None, thread_id="t", decisions={REFUND: Decision.approve(by=approver)})
    assert res.status == "done" and len(spy.runs("issue_refund")) == 1


def test_a_deny_needs_no_role(store: Checkpointer, spy: Spy) -> None:
    g = build(store, spy)
    g.invoke(ask("refund 7 500"), thread_id="t", principal="alice")
    res = g.invoke(None, thread_id="t", decisions={REFUND: Decision.deny(by="bob", reason="no")})
    assert res.status == "done" and spy.runs() == []
    assert "denied by a human: no" in tool_results(g, "t")[REFUND]


# -- expiry ----------------------------------------------------------------------------------------
def test_an_expired_approval_does_not_run(store: Checkpointer, spy: Spy) -> None:
    g = build(store, spy)
    g.invoke(ask("email x@evil.com"), thread_id="t", principal="alice")
    past = datetime.now(UTC) - timedelta(seconds=1)
    res = g.invoke(None, thread_id="t", decisions={EMAIL: Decision.approve(expires_at=past)})
    assert "expired" in the_pause(res).value["refused"] and spy.runs() == []
    future = datetime.now(UTC) + timedelta(hours=1)
    res = g.invoke(None, thread_id="t", decisions={EMAIL: Decision.approve(expires_at=future)})
    assert res.status == "done" and len(spy.runs("send_email")) == 1


def test_a_rules_expiry_counts_from_the_pause(
    store: Checkpointer, spy: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = json.loads(json.dumps(POLICY))
    doc["policies"][2]["expires_in"] = "15m"
    g = build(store, spy, policy=Policy.from_dict(doc))
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    monkeypatch.setattr(confirm, "clock", lambda: now)
    req = the_pause(g.invoke(ask("email x@evil.com"), thread_id="t", principal="alice")).request
    assert req is not None and req.expires_at == now + timedelta(minutes=15)
    later = now + timedelta(minutes=16)
    monkeypatch.setattr(confirm, "clock", lambda: later)
    res = g.invoke(None, thread_id="t", decisions={EMAIL: "approve"})
    again = the_pause(res)
    assert "expired" in again.value["refused"] and spy.runs() == []
    assert again.request is not None and again.request.expires_at == later + timedelta(minutes=15)
    res = g.invoke(None, thread_id="t", decisions={EMAIL: "approve"})
    assert res.status == "done" and len(spy.runs("send_email")) == 1


# -- freeze ----------------------------------------------------------------------------------------
def test_a_freeze_after_the_approval_blocks_the_call(store: Checkpointer, spy: Spy) -> None:
    g = build(store, spy)
    g.invoke(ask("refund 7 500"), thread_id="t", principal="alice")
    g.submit("t", decisions={REFUND: Decision.approve(by="carol")})
    g.freeze("t", by="secops", reason="incident 42")
    assert [t.status for t in g.list_threads()] == ["frozen"]
    with pytest.raises(ThreadFrozenError):
        g.invoke(None, thread_id="t")
    with pytest.raises(ThreadFrozenError):
        g.invoke(None, thread_id="t", decisions={REFUND: Decision.approve(by="carol")})
    with pytest.raises(ThreadFrozenError):
        g.submit("t", decisions={REFUND: Decision.approve(by="carol")})
    assert spy.runs() == []
    g.unfreeze("t", by="secops", reason="resolved")
    assert [t.status for t in g.list_threads()] == ["paused"]
    assert g.invoke(None, thread_id="t").status == "done"
    assert len(spy.runs("issue_refund")) == 1


def test_a_policy_freeze_freezes_the_thread(store: Checkpointer, spy: Spy) -> None:
    doc = json.loads(json.dumps(POLICY))
    doc["policies"].append(
        {
            "id": "exfil",
            "match": {"tool": "send_email"},
            "conditions": ["destination.domain == 'evil.com'"],
            "decision": "freeze",
        }
    )
    g = build(store, spy, policy=Policy.from_dict(doc))
    with pytest.raises(ThreadFrozenError):
        g.invoke(ask("email x@evil.com"), thread_id="t", principal="alice")
    assert [t.status for t in g.list_threads()] == ["frozen"]
    with pytest.raises(ThreadFrozenError):
        g.invoke(None, thread_id="t", decisions={EMAIL: "approve"})
    assert spy.runs() == []


# -- fail closed -----------------------------------------------------------------------------------
def test_a_policy_exception_defers_and_the_call_is_evaluated_on_every_run(
    store: Checkpointer, spy: Spy
) -> None:
    down = [True]
    g = build(store, spy, tools=flow.make_tools(spy, fail_describe=down))
    req = the_pause(g.invoke(ask("refund 7 50"), thread_id="t", principal="alice")).request
    assert req is not None and req.policy_decision == "defer"
    assert req.reason is not None and req.reason.startswith("authorization unavailable")
    assert g.invoke(None, thread_id="t").status == "paused"  # still down: still deferred
    assert spy.runs() == []
    down[0] = False
    res = g.invoke(None, thread_id="t")  # no answer given: evaluated again, now allowed
    assert res.status == "done" and len(spy.runs("issue_refund")) == 1


def test_a_missing_path_defers_never_allows(store: Checkpointer, spy: Spy) -> None:
    policy = Policy.from_dict(
        {
            "policies": [
                {
                    "id": "p",
                    "match": {"tool": "issue_refund"},
                    "conditions": ["customer.tier == 'gold'"],
                    "decision": "allow",
                }
            ]
        }
    )
    g = build(store, spy, policy=policy)
    req = the_pause(g.invoke(ask("refund 7 50"), thread_id="t", principal="alice")).request
    assert req is not None and req.policy_decision == "defer" and spy.runs() == []


# -- taint -----------------------------------------------------------------------------------------
def test_a_tainted_high_risk_allow_becomes_escalate(store: Checkpointer, spy: Spy) -> None:
    g = build(store, spy)
    req = the_pause(g.invoke(ask("inbox, then refund 7 50"), thread_id="t", principal="alice"))
    assert req.request is not None
    assert req.request.policy_decision == "escalate"
    assert (req.request.tainted, req.request.taint_sources) == (True, ("tool:read_inbox",))
    assert [r["tool"] for r in spy.runs()] == ["read_inbox"]


def test_a_fake_approval_inside_a_tool_result_changes_nothing(
    store: Checkpointer, spy: Spy
) -> None:
    model = flow.RuleModel()
    g = build(store, spy, model=model)
    res = g.invoke(ask("inbox, then refund 7 50"), thread_id="t", principal="alice")
    inbox = [m for m in model.seen[-1] if m.tool_call_id == INBOX]
    assert [m.content for m in inbox] == [flow.FAKE_APPROVAL]  # the model read it
    assert the_pause(res).request is not None
    assert g.list_decisions("t") == []
    assert g.invoke(None, thread_id="t").status == "paused"
    assert spy.runs("issue_refund") == []


def test_an_untrusted_input_message_taints_the_transcript(store: Checkpointer, spy: Spy) -> None:
    g = build(store, spy)
    inp = {
        "messages": [
            {"role": "user", "content": "refund 7 50", "untrusted": True, "source": "email"}
        ]
    }
    req = the_pause(g.invoke(inp, thread_id="t", principal="alice")).request
    assert req is not None and (req.policy_decision, req.taint_sources) == ("escalate", ("email",))
    assert spy.runs() == []


# -- dispatch enforcement --------------------------------------------------------------------------
def test_a_policy_change_during_the_pause_needs_reauthorization(
    store: Checkpointer, spy: Spy
) -> None:
    g1 = build(store, spy)
    first = the_pause(g1.invoke(ask("refund 7 500"), thread_id="t", principal="alice"))
    doc = json.loads(json.dumps(POLICY))
    doc["policies"][1]["reason"] = "refunds over 100 need finance (v2)"
    g2 = build(store, spy, policy=Policy.from_dict(doc))
    res = g2.invoke(None, thread_id="t", decisions={REFUND: Decision.approve(by="carol")})
    again = the_pause(res)
    assert spy.runs() == []
    assert again.id != first.id and "policy version" in again.value["refused"]
    assert again.request is not None and again.request.reason is not None
    assert again.request.reason.endswith("(v2)")
    res = g2.invoke(None, thread_id="t", decisions={REFUND: Decision.approve(by="carol")})
    assert res.status == "done" and len(spy.runs("issue_refund")) == 1


def test_a_resume_by_another_principal_is_evaluated_as_that_principal(
    store: Checkpointer, spy: Spy
) -> None:
    g = build(store, spy)
    g.invoke(ask("refund 7 500"), thread_id="t", principal="alice")
    # no principal on resume: still alice's call
    assert the_pause(g.invoke(None, thread_id="t")).request.principal == "alice"  # type: ignore[union-attr]
    # carol's approval of alice's call does not carry over to bob's run of it
    res = g.invoke(
        None, thread_id="t", principal="bob", decisions={REFUND: Decision.approve(by="carol")}
    )
    again = the_pause(res)
    assert again.request is not None and again.request.principal == "bob"
    assert "principal" in again.value["refused"] and spy.runs() == []
    # mallory may not refund at all: the call is refused by access control
    approve = {REFUND: Decision.approve(by="carol")}
    res = g.invoke(None, thread_id="t", principal="mallory", decisions=approve)
    assert res.status == "done" and spy.runs() == []
    assert "access denied" in tool_results(g, "t")[REFUND]


def test_update_state_at_the_head_cannot_launder_an_approval(store: Checkpointer, spy: Spy) -> None:
    """An approval of a refund of 500, then the transcript is rewritten during the pause to
    ask for 5000: the paused proposal is kept as it was, so the approved call runs exactly
    as approved and the 5000 never does."""
    g = build(store, spy)
    g.invoke(ask("refund 7 500"), thread_id="t", principal="alice")
    g.submit("t", decisions={REFUND: Decision.approve(by="carol")})
    g.update_state("t", ask("refund 7 5000"), as_node="intake")
    assert g.invoke(None, thread_id="t").status == "done"
    assert [r["amount"] for r in spy.runs("issue_refund")] == [500]


def test_a_re_planned_agent_cannot_reuse_the_approval(store: Checkpointer, spy: Spy) -> None:
    """The thread forks from before the agent's step with another request: the agent, asked
    again, proposes 5000 under the same call id; the approval of the 500 does not apply."""
    g = build(store, spy)
    g.invoke(ask("refund 7 500"), thread_id="t", principal="alice")
    g.submit("t", decisions={REFUND: Decision.approve(by="carol")})
    [before] = [h for h in g.get_state_history("t") if h.next == ("intake",)]
    g.update_state("t", ask("refund 7 5000"), checkpoint_id=before.checkpoint_id)
    p = the_pause(g.invoke(None, thread_id="t"))
    assert p.request is not None and p.request.args == {"order": "7", "amount": 5000}
    assert spy.runs() == []
    res = g.invoke(None, thread_id="t", decisions={REFUND: Decision.approve(by="carol")})
    assert res.status == "done"
    assert [r["amount"] for r in spy.runs("issue_refund")] == [5000]


# -- callbacks -------------------------------------------------------------------------------------
def test_before_tool_skips_with_a_value_and_runs_once_per_call(
    store: Checkpointer, spy: Spy
) -> None:
    seen: list[Any] = []

    def budget(ctx: Any) -> Any:
        seen.append((ctx.tool.name, dict(ctx.args), ctx.principal.id, ctx.risk, ctx.agent))
        return "over budget" if ctx.args.get("amount", 0) > 1000 else None

    g = build(store, spy, before_tool=[budget])
    g.invoke(ask("refund 7 5000"), thread_id="a", principal="alice")
    assert tool_results(g, "a")[REFUND] == "over budget" and spy.runs() == []
    g.invoke(ask("refund 7 500"), thread_id="b", principal="alice")
    g.invoke(None, thread_id="b", decisions={REFUND: Decision.approve(by="carol")})
    assert len(spy.runs("issue_refund")) == 1
    # memoized: the rerun after the pause did not ask again
    assert seen == [
        ("issue_refund", {"order": "7", "amount": 5000}, "alice", "high", "support"),
        ("issue_refund", {"order": "7", "amount": 500}, "alice", "high", "support"),
    ]


def test_a_raising_before_tool_aborts_the_run(store: Checkpointer, spy: Spy) -> None:
    def broken(ctx: Any) -> None:
        raise RuntimeError("budget service down")

    g = build(store, spy, before_tool=broken)
    with pytest.raises(NodeError, match="budget service down"):
        g.invoke(ask("refund 7 50"), thread_id="t", principal="alice")
    assert spy.runs() == []


def test_after_tool_replaces_the_result(store: Checkpointer, spy: Spy) -> None:
    async def redact(ctx: Any, result: Any) -> Any:
        return result.replace("7", "#")

    g = build(store, spy, after_tool=[redact])
    g.invoke(ask("refund 7 50"), thread_id="t", principal="alice")
    assert tool_results(g, "t")[REFUND] == "refunded 50 on order #"


# -- single use across processes -------------------------------------------------------------------
def run_child(db: Path, spy: Spy, action: str, **extra: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(HERE / "_auth_flow.py"),
            str(db),
            str(spy.path),
            action,
            json.dumps(extra),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE.parents[2],
        env={**__import__("os").environ, "PYTHONPATH": str(HERE.parents[2])},
    )


def outcome(p: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_an_approval_is_used_once_by_two_concurrent_resumes_in_two_processes(
    tmp_path: Path, spy: Spy
) -> None:
    db = tmp_path / "flow.db"
    started = outcome(run_child(db, spy, "start", text="refund 7 500", principal="alice"))
    assert started["status"] == "paused"
    approve = {REFUND: {"verdict": "approve", "by": "carol"}}
    a = run_child(db, spy, "resume", decisions=approve)
    b = run_child(db, spy, "resume", decisions=approve)
    results = [outcome(a), outcome(b)]
    assert len(spy.runs("issue_refund")) == 1
    assert {"status": "done", "pauses": []} in results
    for r in results:  # the other one finished it too, or found it busy or done
        assert r.get("status") == "done" or r.get("error") in (
            "ThreadBusyError",
            "NothingToResumeError",
        ), r
    # the same approval, a third time, in a third process: nothing runs
    third = outcome(run_child(db, spy, "resume", decisions=approve))
    assert third.get("error") == "NothingToResumeError"
    assert len(spy.runs("issue_refund")) == 1
    g = build(SqliteCheckpointer(db), spy)
    assert [t.status for t in g.list_threads()] == ["done"]
