"""Authorization of tool calls: decisions bound to call ids and argument fingerprints."""

from graphflow.auth.decisions import Decision, match_decisions, tool_call_fingerprint

__all__ = ["Decision", "match_decisions", "tool_call_fingerprint"]
