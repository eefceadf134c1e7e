"""action_digest: RFC 8785 canonical, independent of key order, sensitive to everything else."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from graphflow.agents import tool
from graphflow.auth import action_digest
from graphflow.errors import InvalidArgumentError

KEYS = st.text(min_size=1, max_size=6)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
ARGS = st.dictionaries(KEYS, VALUES, max_size=5)
BOUND = {"principal_id": "alice", "thread_id": "t1", "policy_version": "sha256:" + "0" * 64}


def digest(args: dict[str, Any], **overrides: Any) -> str:
    return action_digest("issue_refund", args, **(BOUND | overrides))


def same_json(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are the same JSON value (``1`` and ``1.0`` are one number)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def reorder(value: Any) -> Any:
    """The same value with every mapping's keys in reverse order."""
    if isinstance(value, dict):
        return {k: reorder(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reorder(v) for v in value]
    return value


@settings(max_examples=60, deadline=None)
@given(ARGS)
def test_key_order_does_not_change_it(args: dict[str, Any]) -> None:
    assert digest(args) == digest(reorder(args))


@settings(max_examples=60, deadline=None)
@given(ARGS)
def test_a_round_trip_through_json_text_does_not_change_it(args: dict[str, Any]) -> None:
    text = json.dumps(args, indent=3)
    assert digest(json.loads(text)) == digest(args)


@settings(max_examples=60, deadline=None)
@given(ARGS, KEYS, VALUES)
def test_any_change_of_the_arguments_changes_it(args: dict[str, Any], key: str, value: Any) -> None:
    changed = dict(args)
    changed[key] = value
    if not same_json(changed, args):
        assert digest(changed) != digest(args)
    if args:
        removed = dict(args)
        removed.pop(next(iter(removed)))
        assert digest(removed) != digest(args)


@settings(max_examples=60, deadline=None)
@given(ARGS, st.sampled_from(sorted(BOUND)), st.text(max_size=10) | st.none())
def test_any_change_of_principal_thread_or_policy_version_changes_it(
    args: dict[str, Any], field: str, value: str | None
) -> None:
    if value != BOUND[field]:
        assert digest(args, **{field: value}) != digest(args)


@settings(max_examples=60, deadline=None)
@given(ARGS, st.text(min_size=1, max_size=8))
def test_the_tool_name_is_bound(args: dict[str, Any], name: str) -> None:
    if name != "issue_refund":
        assert action_digest(name, args, **BOUND) != digest(args)


def test_format_and_rfc8785() -> None:
    args = {"b": [1, 2.5, "é"], "a": {"y": None, "x": True}}
    value = digest(args)
    assert value.startswith("sha256:") and len(value) == len("sha256:") + 64
    doc: dict[str, Any] = {
        "kind": "graphflow.action_digest/1",
        "tool": "issue_refund",
        "args": args,
        **BOUND,
    }
    assert value == "sha256:" + hashlib.sha256(rfc8785.dumps(doc)).hexdigest()


def test_json_number_semantics() -> None:
    # RFC 8785 writes numbers by value: 1 and 1.0 (and -0.0 and 0) are one JSON number.
    assert digest({"n": 1}) == digest({"n": 1.0})
    assert digest({"n": 0}) == digest({"n": -0.0})
    assert digest({"n": 1}) != digest({"n": True}) != digest({"n": "1"})
    assert digest({"n": 2**53 + 1}) != digest({"n": float(2**53 + 1)})


def test_a_tool_object_is_its_name() -> None:
    @tool(risk="low")
    def issue_refund(amount: float) -> None:
        """Refund."""

    assert action_digest(issue_refund, {"amount": 1.0}, **BOUND) == digest({"amount": 1.0})


def test_values_json_cannot_carry_are_canonicalized_like_fingerprints() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    uid = UUID(int=7)
    rich = {
        "at": moment,
        "day": date(2026, 1, 2),
        "amount": Decimal("10.50"),
        "id": uid,
        "blob": b"\x00\xff",
        "tags": {"b", "a"},
        "pair": (1, 2),
        "big": 2**64,
    }
    plain = {
        "at": moment.isoformat(),
        "day": "2026-01-02",
        "amount": "10.50",
        "id": str(uid),
        "blob": "00ff",
        "tags": ["a", "b"],
        "pair": [1, 2],
        "big": str(2**64),
    }
    assert digest(rich) == digest(plain)
    assert digest({"amount": Decimal("10.50")}) != digest({"amount": Decimal("10.5")})


def test_unsupported_values_and_non_mappings_are_refused_naming_the_tool() -> None:
    with pytest.raises(InvalidArgumentError, match="tool 'issue_refund'"):
        digest({"x": object()})
    with pytest.raises(InvalidArgumentError, match="tool 'issue_refund': arguments must be"):
        digest([1, 2])  # type: ignore[arg-type]
