"""``graphflow.jcs.dumps`` gives exactly ``rfc8785.dumps``'s bytes, fast path or not."""

from __future__ import annotations

from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from graphflow import jcs

# Text of every plane (controls, escapes, U+E000..U+FFFF, beyond the BMP) but lone surrogates.
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
KEY_CHARS = st.sampled_from(["a", "b", "\x00", "\n", '"', "\\", "\u00e9", "\ue000", "\uffff",
                             "\U0001f600", "\U00010000", "\u2028"])  # fmt: skip
KEYS = st.one_of(TEXT, st.text(KEY_CHARS, max_size=4))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    st.integers(),  # beyond the safe range too: both raise
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(KEYS, inner, max_size=5)),
    max_leaves=30,
)


def outcome(fn: Any, value: Any) -> Any:
    try:
        return fn(value)
    except rfc8785.CanonicalizationError as e:
        return type(e)


@settings(max_examples=400, deadline=None)
@given(JSON)
def test_same_bytes_as_rfc8785(value: Any) -> None:
    assert outcome(jcs.dumps, value) == outcome(rfc8785.dumps, value)


@pytest.mark.parametrize(
    "value",
    [
        {"\U0001f600": 1, "\ue000": 2},  # UTF-16 order differs from code point order here
        {"a": 1.0, "b": [1e21, 5e-7, -0.0]},  # floats: ECMAScript's text
        {"ctl": '\x00\x01\x1f\x7f\b\t\n\f\r"\\/\u2028'},
        [2**53 - 1, -(2**53) + 1, True, False, None],
    ],
)
def test_edge_values(value: Any) -> None:
    assert jcs.dumps(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("value", [2**53, {"x": "\ud800"}, {1: "a"}, {"x": object()}])
def test_what_rfc8785_refuses_is_refused_alike(value: Any) -> None:
    with pytest.raises(rfc8785.CanonicalizationError):
        rfc8785.dumps(value)
    with pytest.raises(rfc8785.CanonicalizationError):
        jcs.dumps(value)


def test_the_fast_path_serves_plain_values() -> None:
    assert jcs._plain({"a": [1, "x", None, True, {"b": ""}]})
    assert not jcs._plain({"a": 1.5})
    assert not jcs._plain({"\U0001f600": 1})
    assert not jcs._plain((1, 2))
