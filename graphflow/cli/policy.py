"""``graphflow policy check``: evaluate a policy file against one call, without running it.

It prints ``{"decision", "rule_id", "reason", "version", "required_role", "expires_in",
"matched"}`` as one JSON document on stdout (its only output: ``--json`` is accepted for
uniformity). Bad input is one line on stderr: exit 2 for usage (arguments that are not a
JSON object, ``--roles`` without ``--principal``, a bad principal), 1 for a policy that
cannot be read or loaded.
"""

from __future__ import annotations

import click

from graphflow.cli.common import CliError, Usage, db_option, json_object, json_option, print_json

# The words of graphflow.auth.vocab (a test keeps them equal), spelled out so that the
# command line's help imports nothing of graphflow.auth.
PRINCIPAL_TYPES = (
    "human_user", "organization", "system", "upstream_agent", "service_account", "unknown"
)  # fmt: skip
RISKS = ("low", "medium", "high", "critical")
CATEGORIES = (
    "external_communication", "sensitive_data", "financial", "access_rights",
    "production_change", "code_execution", "legal", "customer_impacting",
    "security_response", "persistent_memory", "delegation",
)  # fmt: skip


@click.group("policy")
def policy() -> None:
    """Work with authorization policies."""


@policy.command("check")
@click.option("--policy", "policy_path", metavar="FILE", required=True, help="the policy YAML")
@click.option("--tool", required=True, help="the tool name")
@click.option("--args", "args_json", metavar="JSON", required=True,
              help="the call's arguments, a JSON object")  # fmt: skip
@click.option("--principal", metavar="ID", help="the principal's id")
@click.option("--principal-type", type=click.Choice(PRINCIPAL_TYPES), default="human_user",
              show_default=True, help="the principal's type")  # fmt: skip
@click.option("--roles", metavar="R,...", help="the principal's roles, comma-separated")
@click.option("--risk", type=click.Choice(RISKS), default="high", show_default=True,
              help="the tool's risk")  # fmt: skip
@click.option("--category", type=click.Choice(CATEGORIES), help="the tool's category")
@click.option("--tainted", is_flag=True, help="the transcript is tainted")
@click.option("--facts", "facts_json", metavar="JSON",
              help="what the tool's describe would add, a JSON object")  # fmt: skip
@json_option
@db_option
def check(
    policy_path: str,
    tool: str,
    args_json: str,
    principal: str | None,
    principal_type: str,
    roles: str | None,
    risk: str,
    category: str | None,
    tainted: bool,
    facts_json: str | None,
    as_json: bool,
    db: str | None,
) -> None:
    """Evaluate a policy against one tool call.

    Nothing runs; the decision is printed as JSON."""
    call_args = json_object(args_json, "--args")
    facts = json_object(facts_json, "--facts") if facts_json is not None else None
    if roles is not None and principal is None:
        raise Usage("--roles needs --principal")
    from graphflow.auth.policy import Policy
    from graphflow.auth.principal import Principal
    from graphflow.errors import InvalidArgumentError

    names = tuple(r.strip() for r in (roles or "").split(",") if r.strip())
    try:
        who = Principal(principal, principal_type, names) if principal is not None else None  # type: ignore[arg-type]
    except InvalidArgumentError as e:
        raise Usage(str(e)) from None
    try:
        loaded = Policy.from_yaml(policy_path)
    except InvalidArgumentError as e:
        raise CliError(str(e)) from None
    result = loaded.evaluate(
        tool=tool,
        args=call_args,
        principal=who,
        risk=risk,
        category=category,
        tainted=tainted,
        describe=facts,
    )
    print_json(
        {
            "decision": result.decision,
            "rule_id": result.rule_id,
            "reason": result.reason,
            "version": result.version,
            "required_role": result.required_role,
            "expires_in": result.expires_in,
            "matched": list(result.matched),
        }
    )
