"""The ``graphflow.auth`` facade, ToolCallContext, and the policy benchmark (tiny size)."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

import graphflow.auth
from graphflow.agents import tool
from graphflow.auth import Principal, ToolCallContext

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_exported_names_are_pinned_sorted_and_documented() -> None:
    assert graphflow.auth.__all__ == [
        "AccessControl",
        "AccessResult",
        "Decision",
        "Policy",
        "PolicyResult",
        "Principal",
        "Role",
        "Rule",
        "ToolCallContext",
        "action_digest",
        "match_decisions",
        "normalize_fingerprint",
        "tool_call_fingerprint",
    ]
    for name in graphflow.auth.__all__:
        assert getattr(graphflow.auth, name).__doc__, name


def test_tool_call_context() -> None:
    @tool(category="sensitive_data")
    def export(table: str) -> None:
        """Export."""

    ctx = ToolCallContext.of(
        export, {"table": "users"}, call_id="c1", thread_id="t1", node="n", agent="a"
    )
    assert (ctx.tool, ctx.args, ctx.call_id, ctx.thread_id, ctx.node, ctx.agent) == (
        export,
        {"table": "users"},
        "c1",
        "t1",
        "n",
        "a",
    )
    assert (ctx.principal, ctx.principal_id, ctx.risk, ctx.category) == (
        None,
        None,
        "high",
        "sensitive_data",
    )
    assert (ctx.tainted, ctx.taint_sources) == (False, ())
    direct = ToolCallContext(Principal("p"), "t1", "n", "a", export, {}, "c2", "low")
    assert direct.principal_id == "p" and direct.category is None
    with pytest.raises(AttributeError):
        direct.risk = "high"  # type: ignore[misc]


def test_the_policy_benchmark_runs_on_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location(
        "policy_eval", ROOT / "benchmarks" / "policy_eval.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert len(module.build_rules(50)) == 50
    module.main(["--rules", "12", "--requests", "300"])
    out = capsys.readouterr().out
    assert "policy of 12 rules, 300 evaluations" in out and "p50 " in out and " us" in out
    for decision in ("allow", "deny", "escalate"):
        assert decision in out
