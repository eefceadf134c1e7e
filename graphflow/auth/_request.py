"""The action request a policy evaluates: one plain mapping per proposed call.

Its keys are the paths conditions name: ``tool``, ``action_type`` (the tool's category;
``category`` is the same value), ``risk``, ``args``, ``principal`` (``id``, ``type``,
``roles``, ``scopes``, ``attributes``; None when there is none), ``contains_untrusted_content``,
``taint_sources``, ``agent``, ``thread_id``, and the top-level keys of what the tool's
``describe`` returned (which may not replace any of the others).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from graphflow.auth._conditions import Unavailable
from graphflow.auth.principal import Principal
from graphflow.auth.vocab import DEFAULT_RISK, RISKS

if TYPE_CHECKING:
    from graphflow.agents.tools import Tool

__all__ = ["build_request", "normalize_request"]

Describe = Callable[[dict[str, Any]], Mapping[str, Any]] | Mapping[str, Any] | None


def build_request(
    tool: Tool | str,
    args: Mapping[str, Any] | None,
    *,
    principal: Principal | str | Mapping[str, Any] | None,
    risk: str | None,
    category: str | None,
    tainted: bool,
    taint_sources: Iterable[str],
    describe: Describe,
    agent: str | None,
    thread_id: str | None,
) -> dict[str, Any]:
    """The request for one call; a ``Tool`` supplies risk, category and describe not given.

    Raises:
        Unavailable: the inputs do not make a request (the policy defers).
    """
    if not isinstance(tool, str):
        risk = risk if risk is not None else tool.risk
        category = category if category is not None else tool.category
        describe = describe if describe is not None else tool.describe
        tool = tool.name
    if args is not None and not isinstance(args, Mapping):
        raise Unavailable(f"arguments must be a mapping, not {type(args).__name__}")
    plain_args = dict(args or {})
    try:
        p = Principal.coerce(principal)
    except ValueError as exc:
        raise Unavailable(str(exc)) from None
    request: dict[str, Any] = {
        "tool": tool,
        "action_type": category,
        "category": category,
        "risk": DEFAULT_RISK if risk is None else risk,
        "args": plain_args,
        "principal": None if p is None else p.to_dict(),
        "contains_untrusted_content": bool(tainted),
        "taint_sources": list(taint_sources),
        "agent": agent,
        "thread_id": thread_id,
    }
    if describe is not None:
        facts = describe(dict(plain_args)) if callable(describe) else describe
        _merge_facts(request, facts)
    return check_request(request)


def _merge_facts(request: dict[str, Any], facts: Any) -> None:
    if not isinstance(facts, Mapping):
        raise Unavailable(f"describe returned {type(facts).__name__}, not a mapping")
    for key, value in facts.items():
        if not isinstance(key, str):
            raise Unavailable(f"describe returned a non-string key {key!r}")
        if key in request:
            raise Unavailable(f"describe returned {key!r}, a key the request already has")
        request[key] = value


def normalize_request(request: Mapping[str, Any]) -> dict[str, Any]:
    """A request given as a mapping (``evaluate(request)``, rule examples), with defaults.

    Missing ``risk`` is ``high`` (as for a tool that declares none); ``action_type`` and
    ``category`` fill each other; ``args`` defaults to ``{}``; ``principal`` may be a
    ``Principal`` or an id string and defaults to None.

    Raises:
        Unavailable: the request is not a mapping, or its core keys have the wrong type.
    """
    if not isinstance(request, Mapping):
        raise Unavailable(f"an action request must be a mapping, not {type(request).__name__}")
    out = dict(request)
    out.setdefault("risk", DEFAULT_RISK)
    category = out.get("action_type", out.get("category"))
    out.setdefault("action_type", category)
    out.setdefault("category", category)
    out.setdefault("args", {})
    out.setdefault("contains_untrusted_content", False)
    out.setdefault("taint_sources", [])
    principal = out.get("principal")
    if isinstance(principal, Principal | str):
        out["principal"] = Principal.coerce(principal).to_dict()  # type: ignore[union-attr]
    else:
        out.setdefault("principal", None)
    return check_request(out)


def check_request(request: dict[str, Any]) -> dict[str, Any]:
    """``request`` if its core keys have the types the rule index relies on.

    Raises:
        Unavailable: naming the key.
    """
    tool, risk = request.get("tool"), request["risk"]
    if tool is not None and type(tool) is not str:
        raise Unavailable(f"the request's tool must be a name, not {tool!r}")
    if risk not in RISKS:
        raise Unavailable(f"risk {risk!r} is not one of {', '.join(RISKS)}")
    for key in ("action_type", "category"):
        value = request[key]
        if value is not None and type(value) is not str:
            raise Unavailable(f"the request's {key} must be a name, not {value!r}")
    if request["action_type"] != request["category"]:
        raise Unavailable("the request's action_type and category differ")
    if not isinstance(request["args"], Mapping):
        raise Unavailable("the request's args must be a mapping")
    return request
