"""Authorization of tool calls: decisions bound to call ids and argument fingerprints."""

from graphflow.decisions import Decision, normalize_fingerprint, tool_call_fingerprint
from graphflow.engine.answers import match_decisions

__all__ = ["Decision", "match_decisions", "normalize_fingerprint", "tool_call_fingerprint"]
