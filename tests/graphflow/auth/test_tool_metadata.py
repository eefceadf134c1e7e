"""Tool risk metadata: risk, category, untrusted_output and describe, checked when decorating."""

from __future__ import annotations

from typing import Any

import pytest

from graphflow.agents import Tool, tool
from graphflow.auth.vocab import CATEGORIES, RISKS
from graphflow.errors import InvalidArgumentError


def plain(path: str) -> str:
    """Do something."""
    return path


def test_the_eleven_aaef_categories_and_four_risks() -> None:
    assert CATEGORIES == (
        "external_communication",
        "sensitive_data",
        "financial",
        "access_rights",
        "production_change",
        "code_execution",
        "legal",
        "customer_impacting",
        "security_response",
        "persistent_memory",
        "delegation",
    )
    assert RISKS == ("low", "medium", "high", "critical")


def test_defaults_a_tool_without_risk_counts_as_high() -> None:
    t = tool(plain)
    assert t.risk is None and t.effective_risk == "high"
    assert (t.category, t.idempotent, t.untrusted_output, t.describe, t.high_impact) == (
        None,
        False,
        False,
        None,
        False,
    )


def test_metadata_is_kept() -> None:
    def describe(args: dict[str, Any]) -> dict[str, Any]:
        return {"destination": {"domain": args["path"].split("@")[-1]}}

    t = tool(
        risk="critical",
        category="financial",
        idempotent=True,
        untrusted_output=True,
        describe=describe,
    )(plain)
    assert (t.risk, t.effective_risk, t.category, t.idempotent, t.untrusted_output) == (
        "critical",
        "critical",
        "financial",
        True,
        True,
    )
    assert t.describe_action({"path": "a@corp.com"}) == {"destination": {"domain": "corp.com"}}
    assert tool(plain).describe_action({"path": "x"}) == {}
    for risk in RISKS:
        assert Tool(plain, risk=risk).effective_risk == risk


def test_high_impact_means_high_risk_when_no_risk_is_given() -> None:
    t = tool(high_impact=True)(plain)
    assert t.high_impact and t.risk is None and t.effective_risk == "high"
    assert tool(high_impact=True, risk="critical")(plain).effective_risk == "critical"
    with pytest.raises(InvalidArgumentError, match=r"tool 'plain'.*high_impact.*'low'"):
        tool(high_impact=True, risk="low")(plain)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"risk": "severe"}, r"tool 'plain': risk 'severe' is not one of low, medium"),
        ({"risk": "HIGH"}, r"risk 'HIGH'"),
        ({"category": "finance"}, r"tool 'plain': category 'finance' is not one of"),
        ({"category": "HIA-FIN"}, r"category 'HIA-FIN'"),
        ({"untrusted_output": "yes"}, r"untrusted_output must be True or False"),
        ({"idempotent": 1}, r"idempotent must be True or False"),
        ({"describe": {"domain": "x"}}, r"describe must be a function"),
    ],
)
def test_bad_metadata_is_refused_when_decorating(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        tool(**kwargs)(plain)
    with pytest.raises(InvalidArgumentError, match=message):
        Tool(plain, **kwargs)


def test_describe_must_return_a_mapping() -> None:
    t = tool(describe=lambda args: ["not", "a", "dict"])(plain)  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="describe of tool 'plain'"):
        t.describe_action({"path": "x"})
