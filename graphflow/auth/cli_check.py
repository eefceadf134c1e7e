"""``graphflow policy check``: evaluate a policy file against one call, without running it.

It prints ``{"decision", "rule_id", "reason", "version", ...}`` as one JSON document on
stdout. Bad input is one line on stderr: exit 2 for usage (arguments that are not a JSON
object, ``--roles`` without ``--principal``), 1 for a policy that cannot be read or loaded.
The command line parser lives in ``graphflow.cli``; this module holds what it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from graphflow.auth.policy import Policy
from graphflow.auth.principal import Principal
from graphflow.auth.vocab import CATEGORIES, PRINCIPAL_TYPES, RISKS
from graphflow.errors import InvalidArgumentError

__all__ = ["add_policy_parser", "run_policy_check"]

USAGE, ERROR = 2, 1


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (exit 2), never the usage block."""

    def error(self, message: str) -> Any:
        print(f"{self.prog}: error: {' '.join(message.split())}", file=sys.stderr)
        sys.exit(USAGE)


def add_policy_parser(sub: Any) -> None:
    """Add ``policy check`` to the ``graphflow`` subcommands ``sub``."""
    policy = sub.add_parser("policy", help="work with authorization policies")
    commands = policy.add_subparsers(
        dest="policy_command", required=True, parser_class=_OneLineParser
    )
    check = commands.add_parser("check", help="evaluate a policy against one tool call")
    check.add_argument("--policy", required=True, help="the policy YAML file")
    check.add_argument("--tool", required=True, help="the tool name")
    check.add_argument("--args", required=True, help="the call's arguments, a JSON object")
    check.add_argument("--principal", help="the principal's id")
    check.add_argument("--principal-type", default="human_user", choices=PRINCIPAL_TYPES)
    check.add_argument("--roles", help="the principal's roles, comma-separated")
    check.add_argument("--risk", default="high", choices=RISKS, help="default: %(default)s")
    check.add_argument("--category", choices=CATEGORIES)
    check.add_argument("--tainted", action="store_true", help="the transcript is tainted")
    check.add_argument("--facts", help="what the tool's describe would add, a JSON object")


def _json_object(text: str, option: str) -> dict[str, Any] | str:
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"{option} is not JSON: {exc}"
    if not isinstance(value, dict):
        return f"{option} must be a JSON object, not {type(value).__name__}"
    return value


def run_policy_check(args: argparse.Namespace) -> int:
    """Run ``graphflow policy check`` for parsed ``args``; return the exit code."""
    call_args = _json_object(args.args, "--args")
    if isinstance(call_args, str):
        return _fail(call_args, USAGE)
    facts = None
    if args.facts is not None:
        parsed = _json_object(args.facts, "--facts")
        if isinstance(parsed, str):
            return _fail(parsed, USAGE)
        facts = parsed
    if args.roles is not None and args.principal is None:
        return _fail("--roles needs --principal", USAGE)
    roles = tuple(r.strip() for r in (args.roles or "").split(",") if r.strip())
    try:
        principal = (
            Principal(args.principal, args.principal_type, roles)
            if args.principal is not None
            else None
        )
    except InvalidArgumentError as exc:
        return _fail(str(exc), USAGE)
    try:
        policy = Policy.from_yaml(args.policy)
    except InvalidArgumentError as exc:
        return _fail(str(exc), ERROR)
    result = policy.evaluate(
        tool=args.tool,
        args=call_args,
        principal=principal,
        risk=args.risk,
        category=args.category,
        tainted=args.tainted,
        describe=facts,
    )
    out = {
        "decision": result.decision,
        "rule_id": result.rule_id,
        "reason": result.reason,
        "version": result.version,
        "required_role": result.required_role,
        "expires_in": result.expires_in,
        "matched": list(result.matched),
    }
    print(json.dumps(out, ensure_ascii=False))
    return 0


def _fail(message: str, code: int) -> int:
    print(f"graphflow: error: {' '.join(message.split())}", file=sys.stderr)
    return code
