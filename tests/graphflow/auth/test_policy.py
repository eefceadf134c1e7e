"""Policy evaluation: the strictest decision wins, and every failure is fail-closed."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from graphflow.agents import tool
from graphflow.auth import Policy, PolicyResult, Principal, Rule, ToolCallContext
from graphflow.auth.vocab import DECISIONS
from graphflow.errors import InvalidArgumentError

ORDER = [
    "freeze",
    "deny",
    "reauthorization_required",
    "escalate",
    "requires_human_approval",
    "defer",
    "allow",
]


def test_the_strictness_order_is_the_documented_one() -> None:
    assert list(DECISIONS) == ORDER


@pytest.mark.parametrize(("stricter", "looser"), list(itertools.combinations(ORDER, 2)))
def test_the_stricter_of_two_matching_rules_wins_in_either_order(
    stricter: str, looser: str
) -> None:
    for first, second in ((stricter, looser), (looser, stricter)):
        policy = Policy(
            [
                Rule(f"r-{first}", first, match={"tool": "t"}),  # type: ignore[arg-type]
                Rule(f"r-{second}", second, match={"tool": "t"}),  # type: ignore[arg-type]
            ]
        )
        result = policy.evaluate(tool="t", args={}, risk="low")
        expected = "escalate" if stricter == "escalate" else stricter
        assert (result.decision, result.rule_id) == (expected, f"r-{stricter}")
        assert result.matched == (f"r-{first}", f"r-{second}")


def test_every_decision_when_it_is_the_only_match() -> None:
    for decision in ORDER:
        policy = Policy([Rule("only", decision, match={"tool": "t"})])  # type: ignore[arg-type]
        assert policy.evaluate(tool="t", risk="low").decision == decision


def test_all_seven_at_once_gives_freeze_and_ties_go_to_the_earlier_rule() -> None:
    rules = [Rule(f"r{i}", d, match={"tool": "t"}) for i, d in enumerate(reversed(ORDER))]  # type: ignore[arg-type]
    assert Policy(rules).evaluate(tool="t", risk="low").rule_id == "r6"
    tie = Policy([Rule("a", "deny"), Rule("b", "deny")])
    assert tie.evaluate(tool="t").rule_id == "a"


def test_result_fields_come_from_the_deciding_rule() -> None:
    policy = Policy(
        [
            Rule(
                "big-refund",
                "escalate",
                match={"tool": "issue_refund"},
                conditions=["args.amount > 1000"],
                reason="large refunds need a finance manager",
                required_role="finance_manager",
                expires_in="15m",
                evidence_required=False,
            )
        ],
        version="v7",
    )
    result = policy.evaluate(tool="issue_refund", args={"amount": 5000}, risk="high")
    assert result == PolicyResult(
        decision="escalate",
        rule_id="big-refund",
        reason="large refunds need a finance manager",
        required_role="finance_manager",
        expires_in=900,
        matched=("big-refund",),
        evidence_required=False,
        version="v7",
    )
    assert result.to_dict()["expires_in"] == 900


def test_unmatched_high_and_critical_escalate_low_and_medium_are_allowed() -> None:
    policy = Policy([Rule("other", "deny", match={"tool": "other"})])
    for risk, decision in (
        ("low", "allow"),
        ("medium", "allow"),
        ("high", "escalate"),
        ("critical", "escalate"),
    ):
        result = policy.evaluate(tool="t", args={}, risk=risk)
        assert (result.decision, result.rule_id) == (decision, None)
    assert policy.evaluate(tool="t").decision == "escalate"  # no risk counts as high
    assert Policy([]).evaluate({"tool": "t"}).decision == "escalate"
    assert Policy([]).evaluate({"tool": "t", "risk": "low"}).decision == "allow"


def test_a_missing_path_in_a_condition_defers_never_allows() -> None:
    policy = Policy([Rule("r", "allow", match={"tool": "t"}, conditions=["args.amount < 10"])])
    for risk in ("low", "high"):
        result = policy.evaluate(tool="t", args={}, risk=risk)
        assert result.decision == "defer"
        assert result.reason.startswith("authorization unavailable: ")
        assert "'r'" in result.reason and "args.amount < 10" in result.reason
        assert "missing" in result.reason and result.rule_id == "r"


def test_a_type_error_defers() -> None:
    policy = Policy([Rule("r", "allow", conditions=["args.amount < 10"])])
    result = policy.evaluate(tool="t", args={"amount": "5"}, risk="low")
    assert result.decision == "defer" and "needs a number" in result.reason
    bools = Policy([Rule("r", "allow", conditions=["args.amount < 10"])])
    assert bools.evaluate(tool="t", args={"amount": True}, risk="low").decision == "defer"


class Exploding:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("boom")

    __hash__ = object.__hash__


def test_an_exception_inside_a_rule_defers_never_allows() -> None:
    policy = Policy([Rule("r", "allow", conditions=["args.x == 1"])])
    result = policy.evaluate(tool="t", args={"x": Exploding()}, risk="low")
    assert result.decision == "defer"
    assert result.reason == "authorization unavailable: rule 'r': boom"


def test_an_error_does_not_soften_a_stricter_match_but_beats_allow() -> None:
    rules = [
        Rule("broken", "allow", conditions=["args.missing == 1"]),
        Rule("deny-all", "deny", match={"tool": "t"}),
    ]
    assert Policy(rules).evaluate(tool="t", risk="low").decision == "deny"
    rules = [
        Rule("ok", "allow", match={"tool": "t"}),
        Rule("broken", "deny", conditions=["args.missing == 1"]),
    ]
    result = Policy(rules).evaluate(tool="t", risk="low")
    assert (result.decision, result.rule_id, result.matched) == ("defer", "broken", ("ok",))


def test_a_describe_that_raises_or_misbehaves_defers() -> None:
    def raising(args: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("no destination")

    policy = Policy([Rule("r", "allow")])
    result = policy.evaluate(tool="t", risk="low", describe=raising)
    assert result.decision == "defer" and "no destination" in result.reason
    clash = policy.evaluate(tool="t", risk="low", describe={"risk": "low"})
    assert clash.decision == "defer" and "'risk'" in clash.reason
    odd = policy.evaluate(tool="t", risk="low", describe=lambda a: [1])  # type: ignore[arg-type,return-value]
    assert odd.decision == "defer"


def test_bad_requests_defer() -> None:
    policy = Policy([Rule("r", "allow")])
    assert policy.evaluate(tool="t", risk="severe").decision == "defer"
    assert policy.evaluate({"tool": ["a", "b"]}).decision == "defer"
    assert policy.evaluate({"tool": "t", "args": [1]}).decision == "defer"
    assert policy.evaluate(tool="t", args=[1]).decision == "defer"  # type: ignore[arg-type]
    assert policy.evaluate(tool="t", principal=5).decision == "defer"  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="not both"):
        policy.evaluate({"tool": "t"}, tool="t")
    with pytest.raises(InvalidArgumentError, match="not both"):
        policy.evaluate()


def test_a_tainted_allow_of_a_high_call_escalates() -> None:
    policy = Policy([Rule("ok", "allow", match={"tool": "t"})])
    for risk in ("high", "critical"):
        result = policy.evaluate(tool="t", risk=risk, tainted=True, taint_sources=("read_inbox",))
        assert (result.decision, result.rule_id) == ("escalate", "ok")
        assert "untrusted content (read_inbox)" in result.reason
    for risk in ("low", "medium"):
        assert policy.evaluate(tool="t", risk=risk, tainted=True).decision == "allow"
    assert policy.evaluate(tool="t", risk="high").decision == "allow"


def test_taint_never_softens_a_deny_or_any_other_decision() -> None:
    for decision in ORDER[:-1]:
        policy = Policy([Rule("r", decision, match={"tool": "t"})])  # type: ignore[arg-type]
        for risk in ("low", "high", "critical"):
            assert policy.evaluate(tool="t", risk=risk, tainted=True).decision == decision


def test_a_deny_is_never_softened_by_many_rules_or_large_inputs() -> None:
    rules = [Rule(f"a{i}", "allow", conditions=[f"args.n != {i}"]) for i in range(300)]
    rules.append(Rule("stop", "deny", conditions=["args.items contains needle"]))
    items = [f"item{i}" for i in range(20_000)] + ["needle"]
    result = Policy(rules).evaluate(tool="t", args={"n": -1, "items": items}, risk="low")
    assert (result.decision, result.rule_id) == ("deny", "stop")
    assert len(result.matched) == 301


def test_the_request_vocabulary() -> None:
    def describe(args: dict[str, Any]) -> dict[str, Any]:
        return {"destination": {"domain": "evil.com"}, "data_classification": "secret"}

    conditions = [
        "tool == send_mail",
        "action_type == external_communication",
        "category == external_communication",
        "risk == medium",
        "args.to endswith @evil.com",
        "principal.id == bob",
        "principal.roles contains analyst",
        "principal.type == service_account",
        "principal.attributes.dept == sales",
        "contains_untrusted_content == true",
        "taint_sources contains web",
        "agent == support",
        "thread_id startswith t-",
        "destination.domain == evil.com",
        "data_classification in [secret, confidential]",
    ]
    policy = Policy([Rule(f"c{i}", "deny", conditions=[c]) for i, c in enumerate(conditions)])
    result = policy.evaluate(
        tool="send_mail",
        args={"to": "x@evil.com"},
        principal=Principal(
            "bob", type="service_account", roles=("analyst",), attributes={"dept": "sales"}
        ),
        risk="medium",
        category="external_communication",
        tainted=True,
        taint_sources=["web"],
        describe=describe,
        agent="support",
        thread_id="t-1",
    )
    assert result.matched == tuple(f"c{i}" for i in range(len(conditions)))


def test_a_tool_object_supplies_risk_category_and_describe() -> None:
    @tool(
        risk="low",
        category="external_communication",
        describe=lambda args: {"domain": args["to"].split("@")[1]},
    )
    def send_mail(to: str) -> None:
        """Send."""

    policy = Policy(
        [
            Rule(
                "outside",
                "requires_human_approval",
                match={"action_type": "external_communication"},
                conditions=["domain != corp.com"],
            )
        ]
    )
    assert policy.evaluate(tool=send_mail, args={"to": "a@x.org"}).decision == (
        "requires_human_approval"
    )
    assert policy.evaluate(tool=send_mail, args={"to": "a@corp.com"}).decision == "allow"
    assert policy.evaluate(tool=send_mail, args={"to": "a@x.org"}, risk="high").decision == (
        "requires_human_approval"
    )


def test_a_missing_principal_makes_principal_conditions_defer() -> None:
    policy = Policy([Rule("r", "allow", conditions=["principal.roles contains admin"])])
    assert policy.evaluate(tool="t", risk="low").decision == "defer"
    admin = Principal("a", roles=("admin",))
    assert policy.evaluate(tool="t", risk="high", principal=admin).decision == "allow"
    assert policy.evaluate(tool="t", risk="high", principal="a").decision == "escalate"


def test_match_keys_select_and_a_missing_match_path_does_not_match() -> None:
    policy = Policy(
        [
            Rule("by-risk", "deny", match={"risk": ["high", "critical"], "tool": ["a", "b"]}),
            Rule("by-domain", "freeze", match={"destination.domain": "evil.com"}),
            Rule("by-role", "escalate", match={"principal.roles": "intern"}),
        ]
    )
    assert policy.evaluate(tool="a", risk="critical").rule_id == "by-risk"
    assert policy.evaluate(tool="b", risk="medium").decision == "allow"
    assert policy.evaluate(tool="c", risk="low").decision == "allow"  # no destination
    frozen = policy.evaluate(tool="c", risk="low", describe={"destination": {"domain": "evil.com"}})
    assert frozen.decision == "freeze"
    intern = Principal("i", roles=("staff", "intern"))
    assert policy.evaluate(tool="c", risk="low", principal=intern).rule_id == "by-role"


def test_indexing_by_tool_and_category_keeps_rule_order_and_generic_rules() -> None:
    policy = Policy(
        [
            Rule("generic", "requires_human_approval", conditions=["args.n > 5"]),
            Rule("tool", "requires_human_approval", match={"tool": "t"}),
            Rule("cat", "requires_human_approval", match={"action_type": "financial"}),
            Rule("cat-null", "defer", match={"action_type": None}),
        ]
    )
    result = policy.evaluate(tool="t", args={"n": 9}, category="financial", risk="low")
    assert result.matched == ("generic", "tool", "cat") and result.rule_id == "generic"
    other = policy.evaluate(tool="u", args={"n": 1}, risk="low")
    assert other.matched == ("cat-null",)
    for _ in range(3):  # the cached candidates give the same answers
        assert policy.evaluate(tool="t", args={"n": 1}, risk="low").matched == ("tool", "cat-null")


def test_evaluate_call_takes_a_tool_call_context() -> None:
    @tool(risk="critical", category="financial")
    def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
        """Refund."""
        return {}

    ctx = ToolCallContext.of(
        issue_refund,
        {"order_id": "o1", "amount": 10.0},
        call_id="call_1",
        thread_id="t1",
        node="support",
        agent="support",
        principal="alice",
        tainted=True,
        taint_sources=("read_inbox",),
    )
    assert (ctx.risk, ctx.category, ctx.principal, ctx.principal_id) == (
        "critical",
        "financial",
        Principal("alice"),
        "alice",
    )
    policy = Policy(
        [
            Rule(
                "refunds",
                "allow",
                match={"action_type": "financial"},
                conditions=["thread_id == t1", "agent == support"],
            )
        ]
    )
    result = policy.evaluate_call(ctx)
    assert (result.decision, result.rule_id) == ("escalate", "refunds")
    with pytest.raises(AttributeError):
        ctx.tainted = False  # type: ignore[misc]
