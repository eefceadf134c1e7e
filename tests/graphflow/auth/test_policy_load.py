"""Loading policies: the YAML format, refusals that name the rule, examples and the version."""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any

import pytest
import rfc8785

from graphflow.auth import Policy, Rule
from graphflow.errors import InvalidArgumentError

POLICY = """\
policies:
  - id: big-refund
    description: refunds over the limit go to finance
    match:
      tool: issue_refund
      risk: [high, critical]
    conditions:
      - args.amount > 1000
      - args.currency in [USD, EUR]
    decision: escalate
    required_role: finance_manager
    reason: Large refunds need a finance manager
    expires_in: 15m
    evidence_required: true
    examples:
      match:
        - {tool: issue_refund, args: {amount: 5000, currency: USD}}
      not_match:
        - {tool: issue_refund, args: {amount: 5, currency: USD}}
        - {tool: other, args: {amount: 5000, currency: USD}}
  - id: outside-mail
    match: {action_type: external_communication}
    conditions: ["destination.domain not in [corp.com, corp.org]"]
    decision: requires_human_approval
"""

# The same policy with every mapping's keys in another order and another layout.
REORDERED = """\
policies:
  - decision: escalate
    expires_in: 15m
    examples:
      not_match:
        - {args: {currency: USD, amount: 5}, tool: issue_refund}
        - args: {currency: USD, amount: 5000}
          tool: other
      match: [{args: {currency: USD, amount: 5000}, tool: issue_refund}]
    reason: Large refunds need a finance manager
    required_role: finance_manager
    conditions: ["args.amount > 1000", "args.currency in [USD, EUR]"]
    match: {risk: [high, critical], tool: issue_refund}
    id: big-refund
    evidence_required: true
    description: refunds over the limit go to finance
  - {decision: requires_human_approval, id: outside-mail,
     conditions: ["destination.domain not in [corp.com, corp.org]"],
     match: {action_type: external_communication}}
"""


def write(tmp_path: pathlib.Path, text: str, name: str = "policy.yaml") -> pathlib.Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_from_yaml_reads_the_format(tmp_path: pathlib.Path) -> None:
    policy = Policy.from_yaml(write(tmp_path, POLICY))
    assert [r.id for r in policy.rules] == ["big-refund", "outside-mail"]
    rule = policy.rules[0]
    assert (rule.decision, rule.required_role, rule.expires_in, rule.evidence_required) == (
        "escalate",
        "finance_manager",
        900,
        True,
    )
    result = policy.evaluate(tool="issue_refund", args={"amount": 2000, "currency": "EUR"})
    assert (result.decision, result.rule_id, result.required_role) == (
        "escalate",
        "big-refund",
        "finance_manager",
    )
    assert result.reason == "Large refunds need a finance manager"
    mail = policy.evaluate(
        tool="send",
        risk="low",
        category="external_communication",
        describe={"destination": {"domain": "gmail.com"}},
    )
    assert (mail.decision, mail.rule_id) == ("requires_human_approval", "outside-mail")


def test_version_is_sha256_of_the_canonical_rules(tmp_path: pathlib.Path) -> None:
    policy = Policy.from_yaml(write(tmp_path, POLICY))
    data = rfc8785.dumps([r.to_dict() for r in policy.rules])
    assert policy.version == "sha256:" + hashlib.sha256(data).hexdigest()
    assert policy.evaluate(tool="x", risk="low").version == policy.version


def test_version_is_stable_under_key_reordering(tmp_path: pathlib.Path) -> None:
    a = Policy.from_yaml(write(tmp_path, POLICY, "a.yaml"))
    b = Policy.from_yaml(write(tmp_path, REORDERED, "b.yaml"))
    assert a.version == b.version
    assert a.version == Policy.from_dict(a.to_dict() | {"version": None}).version
    # Equivalent spellings of a duration and an omitted default give the same version.
    assert (
        Policy([Rule("r", "deny", expires_in=900)]).version
        == Policy([Rule("r", "deny", expires_in="15m", evidence_required=True)]).version
    )


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("args.amount > 1000", "args.amount > 1001"),
        ("decision: escalate", "decision: deny"),
        ("required_role: finance_manager", "required_role: cfo"),
        ("expires_in: 15m", "expires_in: 16m"),
        ("- id: outside-mail", "- id: outside-mail-2"),
        ("corp.org]", "corp.net]"),
        ("risk: [high, critical]", "risk: [critical, high]"),
    ],
)
def test_version_changes_when_a_rule_changes(tmp_path: pathlib.Path, old: str, new: str) -> None:
    assert old in POLICY
    a = Policy.from_yaml(write(tmp_path, POLICY, "a.yaml"))
    b = Policy.from_yaml(write(tmp_path, POLICY.replace(old, new), "b.yaml"))
    assert a.version != b.version


def test_rule_order_changes_the_version_and_an_explicit_version_is_kept() -> None:
    r1, r2 = Rule("a", "deny"), Rule("b", "allow")
    assert Policy([r1, r2]).version != Policy([r2, r1]).version
    assert Policy([r1], version="2024-06-01").version == "2024-06-01"
    doc = {"version": "v3", "policies": [{"id": "a", "decision": "deny"}]}
    assert Policy.from_dict(doc).version == "v3"


def test_yaml_1_2_scalars_no_norway_problem() -> None:
    policy = Policy.from_dict(
        {"policies": [{"id": "r", "decision": "deny", "conditions": ["args.country == NO"]}]}
    )
    assert policy.rules[0]._tests[0].literal == "NO"
    assert policy.evaluate(tool="t", args={"country": "NO"}).decision == "deny"


def test_a_contradicting_match_example_refuses_the_policy_naming_rule_and_example(
    tmp_path: pathlib.Path,
) -> None:
    text = POLICY.replace(
        "{tool: issue_refund, args: {amount: 5000,", "{tool: issue_refund, args: {amount: 500,"
    )
    with pytest.raises(InvalidArgumentError) as err:
        Policy.from_yaml(write(tmp_path, text))
    message = str(err.value)
    assert "policy rule 'big-refund'" in message
    assert "example match[0]" in message and "'amount': 500" in message
    assert "does not match" in message and "policy.yaml" in message


def test_a_contradicting_not_match_example_refuses_the_rule() -> None:
    with pytest.raises(InvalidArgumentError, match=r"rule 'r': example not_match\[1\].*matches"):
        Rule(
            "r",
            "deny",
            match={"tool": "t"},
            examples={"not_match": [{"tool": "u"}, {"tool": "t"}]},
        )


def test_an_example_that_cannot_be_evaluated_refuses_the_rule() -> None:
    with pytest.raises(InvalidArgumentError, match=r"rule 'r': example match\[0\].*missing"):
        Rule("r", "deny", conditions=["args.amount > 1"], examples={"match": [{"tool": "t"}]})
    with pytest.raises(InvalidArgumentError, match="rule 'r': examples must be a mapping"):
        Rule("r", "deny", examples={"matches": []})


def test_examples_that_agree_load() -> None:
    rule = Rule(
        "r",
        "deny",
        match={"tool": "issue_refund"},
        conditions=["args.amount >= 1000", "principal.roles contains intern"],
        examples={
            "match": [
                {
                    "tool": "issue_refund",
                    "args": {"amount": 1000},
                    "principal": {"id": "i", "roles": ["intern"]},
                }
            ],
            "not_match": [{"tool": "issue_refund", "args": {"amount": 999}, "principal": "nobody"}],
        },
    )
    assert rule.examples is not None and len(rule.examples["match"]) == 1


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"id": "r1", "decision": "deny", "conditions": ["args.x ~= 1"]},
            r"'r1'.*'args\.x ~= 1'.*OP one of",
        ),
        (
            {"id": "r2", "decision": "deny", "conditions": ["args.x in [1, 2"]},
            r"'r2'.*literal '\[1, 2' is not valid",
        ),
        (
            {"id": "r3", "decision": "deny", "conditions": ["args.x matches ([a-z"]},
            r"'r3'.*invalid regular expression",
        ),
        ({"id": "r4", "decision": "maybe"}, r"'r4': decision 'maybe' is not one of freeze, deny"),
        ({"decision": "deny"}, r"policy entry 1 has no id"),
        ({"id": "", "decision": "deny"}, r"needs an id"),
        ({"id": "r5"}, r"'r5': no decision"),
        ({"id": "r6", "decision": "deny", "conditon": ["a == 1"]}, r"'r6': unknown keys conditon"),
        ({"id": "r7", "decision": "deny", "conditions": ["args.x in 5"]}, r"'r7'.*in needs a list"),
        (
            {"id": "r8", "decision": "deny", "conditions": ["args.x < [1]"]},
            r"'r8'.*needs a number or a string",
        ),
        (
            {"id": "r9", "decision": "deny", "conditions": ["args.x startswith 5"]},
            r"'r9'.*startswith needs a string",
        ),
        (
            {"id": "r10", "decision": "deny", "conditions": ["args.x == {a: 1}"]},
            r"'r10'.*scalar or a list",
        ),
        (
            {"id": "r11", "decision": "deny", "conditions": [{"args.x": 1}]},
            r"'r11'.*must be a string",
        ),
        (
            {"id": "r12", "decision": "deny", "match": {"risk": "severe"}},
            r"'r12': match risk 'severe'",
        ),
        (
            {"id": "r13", "decision": "deny", "match": {"action_type": "money"}},
            r"'r13': match action_type 'money'",
        ),
        ({"id": "r14", "decision": "deny", "match": {"tool": 5}}, r"'r14': match tool 5"),
        ({"id": "r15", "decision": "deny", "match": {"args..x": 1}}, r"'r15': match path"),
        ({"id": "r16", "decision": "deny", "match": {"tool": []}}, r"'r16': match 'tool' must be"),
        ({"id": "r17", "decision": "deny", "match": ["tool"]}, r"'r17': match must be a mapping"),
        ({"id": "r18", "decision": "deny", "expires_in": "soon"}, r"'r18': expires_in 'soon'"),
        ({"id": "r19", "decision": "deny", "expires_in": 0}, r"'r19': expires_in must be positive"),
        (
            {"id": "r20", "decision": "deny", "evidence_required": "yes"},
            r"'r20': evidence_required",
        ),
        ({"id": "r21", "decision": "deny", "reason": 5}, r"'r21': reason must be a string"),
        (
            {"id": "r22", "decision": "deny", "conditions": ["args.x contains [1]"]},
            r"'r22'.*contains takes one value",
        ),
        ({"id": "r23", "decision": "deny", "conditions": ["args.x"]}, r"'r23'.*PATH OP LITERAL"),
    ],
)
def test_malformed_rules_are_refused_naming_the_rule(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        Policy.from_dict({"policies": [{"id": "fine", "decision": "allow"}, entry]})


def test_duplicate_ids_are_refused() -> None:
    doc = {"policies": [{"id": "a", "decision": "deny"}, {"id": "a", "decision": "allow"}]}
    with pytest.raises(InvalidArgumentError, match="policy rule 'a' is defined twice"):
        Policy.from_dict(doc)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("policies: [", r"invalid YAML at line"),
        ("rules: []", r"expected a mapping with a 'policies' list"),
        ("- id: a", r"expected a mapping with a 'policies' list"),
        ("policies: {id: a}", r"'policies' must be a list"),
        ("policies: []\nextra: 1", r"unknown top-level keys extra"),
        (
            "policies:\n  - id: a\n    decision: deny\n    decision: allow\n",
            r"duplicate key 'decision'",
        ),
        (
            "policies:\n  - id: a\n    decision: deny\n    conditions: ['args.x matches (']\n",
            r"rule 'a'.*regular expression",
        ),
    ],
)
def test_malformed_files_are_refused_naming_the_file(
    tmp_path: pathlib.Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InvalidArgumentError, match=message) as err:
        Policy.from_yaml(path)
    assert f"policy file {str(path)!r}" in str(err.value)


def test_a_missing_file_is_a_typed_error_naming_it(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(InvalidArgumentError, match=r"cannot read policy file .*absent\.yaml"):
        Policy.from_yaml(path)


def test_loading_runs_no_code(tmp_path: pathlib.Path) -> None:
    text = "policies: !!python/object/apply:os.system ['echo hacked']\n"
    with pytest.raises(InvalidArgumentError, match="invalid YAML"):
        Policy.from_yaml(write(tmp_path, text))


def test_rules_compare_by_value() -> None:
    assert Rule("a", "deny", match={"tool": "t"}) == Rule("a", "deny", match={"tool": ["t"]})
    assert Rule("a", "deny") != Rule("a", "allow")
    assert hash(Rule("a", "deny", expires_in="1h")) == hash(Rule("a", "deny", expires_in=3600))
