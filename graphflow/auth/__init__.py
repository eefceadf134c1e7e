"""Authorization of tool calls: a tool call is a proposal, never an authority.

The pieces of the pipeline, each pure and testable alone: :class:`Principal` (who a run
acts for), :class:`AccessControl` and :class:`Role` (RBAC), :class:`Policy` and
:class:`Rule` (decisions over an action request), :func:`action_digest` (what an approval
is bound to) and :class:`ToolCallContext` (what callbacks see). Decisions are bound to call
ids and argument fingerprints; what each stage decided is recorded as an evidence event
(``graphflow.evidence``, written by ``graphflow.agents.trail``).
"""

from graphflow.auth.context import ToolCallContext
from graphflow.auth.digest import action_digest
from graphflow.auth.policy import Policy, PolicyResult, Rule
from graphflow.auth.principal import Principal
from graphflow.auth.rbac import AccessControl, AccessResult, Role
from graphflow.decisions import Decision, normalize_fingerprint, tool_call_fingerprint
from graphflow.engine.answers import match_decisions

__all__ = [
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
