"""The action digest: what an approval is bound to, recomputed at dispatch.

It covers the tool, its arguments, the principal, the thread and the policy version, as
RFC 8785 (JSON Canonicalization Scheme) text, so key order and whitespace never change it
and any other change does. Values JSON cannot carry are first made plain the way
:func:`~graphflow.decisions.tool_call_fingerprint` does (datetimes and dates as ISO text,
Decimal and UUID as text, bytes as hex, sets sorted, models dumped); integers beyond
JSON's safe range (2**53) become their decimal text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import rfc8785

from graphflow.decisions import _canonical
from graphflow.errors import InvalidArgumentError
from graphflow.jcs import dumps as jcs_dumps

if TYPE_CHECKING:
    from graphflow.agents.tools import Tool

__all__ = ["action_digest", "canonical_json"]

_SAFE_INT = 2**53 - 1
_KIND = "graphflow.action_digest/1"  # domain separation from other digests of the same data


def canonical_json(value: Any) -> bytes:
    """``value`` as RFC 8785 canonical JSON (UTF-8).

    Raises:
        InvalidArgumentError: ``value`` holds something that cannot be made plain data.
    """
    plain = _canonical(value)
    try:
        return jcs_dumps(plain)
    except rfc8785.IntegerDomainError:
        return rfc8785.dumps(_big_ints_as_text(plain))


def _big_ints_as_text(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _big_ints_as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_big_ints_as_text(v) for v in value]
    if type(value) is int and abs(value) > _SAFE_INT:
        return str(value)
    return value


def action_digest(
    tool: Tool | str,
    args: Mapping[str, Any],
    *,
    principal_id: str | None,
    thread_id: str | None,
    policy_version: str | None,
) -> str:
    """The ``"sha256:..."`` digest binding an approval to exactly this call.

    Args:
        tool: the tool (or its name).
        args: the call's arguments, as they will run.
        principal_id: the principal the call runs for (None when there is none).
        thread_id: the thread the call belongs to.
        policy_version: the version of the policy that decided the call.

    Raises:
        InvalidArgumentError: ``args`` is not a mapping or holds a value that cannot be
            made plain data (the message names the tool).
    """
    name = tool if isinstance(tool, str) else tool.name
    if not isinstance(args, Mapping):
        raise InvalidArgumentError(
            f"tool {name!r}: arguments must be a mapping, not {type(args).__name__}"
        )
    doc = {
        "kind": _KIND,
        "tool": name,
        "args": args,
        "principal_id": principal_id,
        "thread_id": thread_id,
        "policy_version": policy_version,
    }
    try:
        text = canonical_json(doc)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"cannot digest the call of tool {name!r}: {exc}") from None
    return "sha256:" + hashlib.sha256(text).hexdigest()
