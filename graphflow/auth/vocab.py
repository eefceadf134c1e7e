"""The authorization vocabulary: principal types, risk levels, categories and decisions.

The words are AAEF's (the Agentic Authority & Evidence Framework event schema), so a record
graphflow writes can become an AAEF evidence event without translation. This module is a
leaf: tools, policies and records import it, and it imports nothing of graphflow but errors.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from graphflow.errors import InvalidArgumentError

PrincipalType = Literal[
    "human_user", "organization", "system", "upstream_agent", "service_account", "unknown"
]
"""On whose behalf an agent acts (AAEF ``principal.principal_type``)."""

Risk = Literal["low", "medium", "high", "critical"]
"""A tool's risk level (AAEF ``requested_action.risk_level`` without ``unknown``: a tool
that declares no risk counts as ``high``)."""

Category = Literal[
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
]
"""The 11 AAEF high-impact action categories (a tool's ``category``, a request's
``action_type``)."""

PolicyDecision = Literal[
    "freeze",
    "deny",
    "reauthorization_required",
    "escalate",
    "requires_human_approval",
    "defer",
    "allow",
]
"""What a policy decides for a call, strictest first:

- ``freeze``: the thread is frozen; nothing runs until it is unfrozen.
- ``deny``: the call does not run; the model is told.
- ``reauthorization_required``: a confirmation pause no earlier approval satisfies.
- ``escalate``: a confirmation pause whose approver must hold ``required_role``.
- ``requires_human_approval``: a confirmation pause.
- ``defer``: a confirmation pause; the policy is evaluated again on every later run.
- ``allow``: the call runs.
"""

PRINCIPAL_TYPES: tuple[PrincipalType, ...] = get_args(PrincipalType)
RISKS: tuple[Risk, ...] = get_args(Risk)
CATEGORIES: tuple[Category, ...] = get_args(Category)
DECISIONS: tuple[PolicyDecision, ...] = get_args(PolicyDecision)
"""The decisions, strictest first."""

STRICTNESS: dict[str, int] = {d: len(DECISIONS) - i for i, d in enumerate(DECISIONS)}
"""A decision's rank: the higher, the stricter (``allow`` is 1, ``freeze`` 7)."""

HIGH_RISKS = frozenset({"high", "critical"})
DEFAULT_RISK: Risk = "high"


def check_word(value: Any, allowed: tuple[str, ...], what: str, where: str) -> Any:
    """Return ``value`` if it is one of ``allowed``.

    Raises:
        InvalidArgumentError: naming ``where`` (the tool, rule or principal), ``what`` and
            the words allowed.
    """
    if isinstance(value, str) and value in allowed:
        return value
    raise InvalidArgumentError(f"{where}: {what} {value!r} is not one of {', '.join(allowed)}")
