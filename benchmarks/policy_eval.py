"""How long one policy evaluation takes: p50 and p90 in microseconds.

    python benchmarks/policy_eval.py [--rules 50] [--requests 20000]

Builds a policy of realistic rules (tool matches, category matches, conditions with
``in``, ``<``, ``startswith`` and ``matches``, some that never match) and evaluates a mix
of requests through ``Policy.evaluate(tool=..., ...)``, the way the agent loop calls it.
Not part of the test suite; the target is a p50 of at most 25 microseconds for 50 rules.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from typing import Any

from graphflow.auth import Policy, Principal, Rule

TOOLS = [f"tool_{i}" for i in range(20)]
CATEGORIES = ["financial", "external_communication", "sensitive_data", "production_change"]


def build_rules(count: int) -> list[Rule]:
    """``count`` rules cycling through the shapes a real policy has."""
    rules: list[Rule] = []
    for i in range(count):
        tool = TOOLS[i % len(TOOLS)]
        shape = i % 6
        if shape == 0:
            rule = Rule(
                f"r{i}-limit",
                "escalate",
                match={"tool": tool},
                conditions=[f"args.amount > {1000 + i}"],
                required_role="finance",
                expires_in="15m",
            )
        elif shape == 1:
            rule = Rule(
                f"r{i}-allow-small",
                "allow",
                match={"tool": tool},
                conditions=[f"args.amount <= {1000 + i}", "principal.roles in [analyst, admin]"],
            )
        elif shape == 2:
            rule = Rule(
                f"r{i}-external",
                "requires_human_approval",
                match={"action_type": CATEGORIES[i % len(CATEGORIES)]},
                conditions=["args.to matches @(?!corp\\.com$)[a-z.]+$"],
            )
        elif shape == 3:
            rule = Rule(
                f"r{i}-prod",
                "deny",
                match={"tool": [tool, f"{tool}_v2"], "risk": ["high", "critical"]},
                conditions=["args.env startswith prod", "args.region in [eu-1, eu-2]"],
            )
        elif shape == 4:
            rule = Rule(  # never matches: no request uses this tool
                f"r{i}-legacy",
                "freeze",
                match={"tool": f"legacy_{i}"},
                conditions=["args.anything == true"],
            )
        else:
            rule = Rule(
                f"r{i}-service",
                "defer",
                match={"principal.type": "service_account"},
                conditions=[f"args.amount >= {5000 + i}"],
            )
        rules.append(rule)
    return rules


def build_requests(count: int, seed: int = 7) -> list[dict[str, Any]]:
    """Keyword arguments of ``Policy.evaluate`` for ``count`` varied calls."""
    rng = random.Random(seed)
    principals = [
        Principal("alice@corp.com", roles=("admin",)),
        Principal("bob@corp.com", roles=("analyst",)),
        Principal("batch", type="service_account", roles=("ops",)),
    ]
    out = []
    for _ in range(count):
        out.append(
            {
                "tool": rng.choice(TOOLS),
                "args": {
                    "amount": rng.randint(1, 10_000),
                    "to": rng.choice(["x@corp.com", "y@example.org"]),
                    "env": rng.choice(["prod", "staging"]),
                    "region": rng.choice(["eu-1", "us-1"]),
                },
                "principal": rng.choice(principals),
                "risk": rng.choice(["low", "medium", "high", "critical"]),
                "category": rng.choice([None, *CATEGORIES]),
                "tainted": rng.random() < 0.1,
            }
        )
    return out


def measure(rules: int, requests: int) -> tuple[float, float, dict[str, int]]:
    """Return (p50, p90) in microseconds and how often each decision came out."""
    policy = Policy(build_rules(rules))
    calls = build_requests(requests)
    for call in calls[:200]:  # warm the candidate cache, as a long-running process has
        policy.evaluate(**call)
    timings = []
    decisions: dict[str, int] = {}
    clock = time.perf_counter_ns
    for call in calls:
        start = clock()
        result = policy.evaluate(**call)
        timings.append(clock() - start)
        decisions[result.decision] = decisions.get(result.decision, 0) + 1
    cuts = statistics.quantiles(timings, n=10)
    return cuts[4] / 1000, cuts[8] / 1000, decisions


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, default=50)
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args(argv)
    p50, p90, decisions = measure(args.rules, args.requests)
    print(f"policy of {args.rules} rules, {args.requests} evaluations")
    print(f"p50 {p50:.1f} us  p90 {p90:.1f} us")
    print("decisions: " + ", ".join(f"{k} {v}" for k, v in sorted(decisions.items())))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _results import emit, row

    emit("policy_eval", [
        row(f"policy evaluation p50 ({args.rules} rules)", round(p50, 1), "us", "<= 25"),
        row(f"policy evaluation p90 ({args.rules} rules)", round(p90, 1), "us"),
    ])  # fmt: skip


if __name__ == "__main__":
    main()
