"""Policies: ordered rules over an action request; the strictest matching decision wins.

A tool call is a proposal, never an authority: the policy decides what happens to it. Every
rule whose ``match`` and ``conditions`` hold is collected and the strictest decision wins,
in the order ``freeze > deny > reauthorization_required > escalate >
requires_human_approval > defer > allow`` (ties go to the earlier rule). Evaluation fails
closed:

- a rule that raises, a condition whose path is missing, or a value of the wrong type for
  its operator gives ``defer`` with reason ``"authorization unavailable: ..."`` (unless a
  stricter rule matched);
- a high or critical risk call that no rule matches gives ``escalate``; a low or medium
  one is allowed;
- an ``allow`` of a high or critical risk call whose transcript holds untrusted content
  becomes ``escalate``.

There is no evaluation budget or cap, so nothing ever softens a ``deny``. Rules are
compiled when the policy is built (conditions into predicates, regexes compiled, rules
indexed by tool name and category), so a malformed policy fails at load, naming the rule.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from graphflow.auth._literals import load_yaml
from graphflow.auth._request import Describe, build_request, normalize_request
from graphflow.auth.digest import canonical_json
from graphflow.auth.principal import Principal
from graphflow.auth.rules import Rule
from graphflow.auth.vocab import HIGH_RISKS, STRICTNESS, PolicyDecision
from graphflow.errors import InvalidArgumentError

if TYPE_CHECKING:
    from graphflow.agents.tools import Tool
    from graphflow.auth.context import ToolCallContext

__all__ = ["Policy", "PolicyResult", "Rule"]

_DEFER = STRICTNESS["defer"]
_CACHE_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """What a policy decided for one action request.

    Attributes:
        decision: the strictest decision among the matching rules (or the fallback).
        rule_id: the rule that decided; None when no rule matched.
        reason: why, for the model, the approver and the evidence.
        required_role: for ``escalate``, the role the approver must hold.
        expires_in: seconds an approval stays valid, from the deciding rule.
        matched: the ids of every matching rule, in policy order.
        evidence_required: from the deciding rule (True when no rule decided).
        version: the policy's version.
    """

    decision: PolicyDecision
    rule_id: str | None
    reason: str
    required_role: str | None = None
    expires_in: int | float | None = None
    matched: tuple[str, ...] = ()
    evidence_required: bool = True
    version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-able data."""
        return {
            "decision": self.decision,
            "rule_id": self.rule_id,
            "reason": self.reason,
            "required_role": self.required_role,
            "expires_in": self.expires_in,
            "matched": list(self.matched),
            "evidence_required": self.evidence_required,
            "version": self.version,
        }


class Policy:
    """Ordered rules deciding what happens to proposed tool calls.

    Args:
        rules: the rules; ids must be distinct.
        version: an explicit version; by default ``"sha256:"`` and the hex digest of the
            RFC 8785 canonical JSON of the rules as data (``[rule.to_dict(), ...]``), so
            it changes whenever a rule does and never with key order or layout.

    Raises:
        InvalidArgumentError: a rule is not a :class:`Rule`, or two share an id.
    """

    def __init__(self, rules: Iterable[Rule], version: str | None = None):
        self.rules: tuple[Rule, ...] = tuple(rules)
        seen: set[str] = set()
        for rule in self.rules:
            if not isinstance(rule, Rule):
                raise InvalidArgumentError(f"policy rules must be Rule objects, not {rule!r}")
            if rule.id in seen:
                raise InvalidArgumentError(f"policy rule {rule.id!r} is defined twice")
            seen.add(rule.id)
        if version is not None and (not isinstance(version, str) or not version):
            raise InvalidArgumentError(f"a policy version must be a non-empty string: {version!r}")
        if version is None:
            try:
                data = canonical_json([r.to_dict() for r in self.rules])
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(
                    f"cannot compute the policy version: {exc}; write the rules' values "
                    "(examples included) as plain data or pass version="
                ) from None
            version = "sha256:" + hashlib.sha256(data).hexdigest()
        self.version: str = version
        # Rules are indexed by the tool names they match, else by the categories, else
        # they are tried for every call; the key a rule is found by needs no test again.
        self._by_tool: dict[str, list[int]] = {}
        self._by_category: dict[str | None, list[int]] = {}
        self._always: list[int] = []
        self._plans: list[_Plan] = [self._index(i, rule) for i, rule in enumerate(self.rules)]
        self._candidates: dict[tuple[str | None, str | None], tuple[_Plan, ...]] = {}

    def _index(self, i: int, rule: Rule) -> _Plan:
        selectors = dict(rule._selectors)
        if "tool" in selectors:
            del selectors["tool"]
            for name in _as_list(rule.match["tool"]):  # type: ignore[index]
                self._by_tool.setdefault(name, []).append(i)
        elif "action_type" in selectors or "category" in selectors:
            key = "action_type" if "action_type" in selectors else "category"
            del selectors[key]
            for name in _as_list(rule.match[key]):  # type: ignore[index]
                self._by_category.setdefault(name, []).append(i)
        else:
            self._always.append(i)
        return (
            rule,
            tuple(s.selects for s in selectors.values()),
            tuple(t.holds for t in rule._tests),
        )

    def _rules_for(self, tool: str | None, category: str | None) -> tuple[_Plan, ...]:
        key = (tool, category)
        found = self._candidates.get(key)
        if found is None:
            indexes = set(self._always)
            indexes.update(self._by_tool.get(tool, ()) if tool is not None else ())
            indexes.update(self._by_category.get(category, ()))
            found = tuple(self._plans[i] for i in sorted(indexes))
            if len(self._candidates) >= _CACHE_LIMIT:
                self._candidates.clear()
            self._candidates[key] = found
        return found

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str = "policy") -> Policy:
        """A policy from a document ``{"policies": [rule, ...], "version": optional}``.

        Raises:
            InvalidArgumentError: the document or a rule is malformed, naming the rule.
        """
        if not isinstance(doc, Mapping) or "policies" not in doc:
            raise InvalidArgumentError(f"{source}: expected a mapping with a 'policies' list")
        unknown = sorted(map(str, set(doc) - {"policies", "version", "description"}))
        if unknown:
            raise InvalidArgumentError(
                f"{source}: unknown top-level keys {', '.join(unknown)}; expected policies, "
                "version, description"
            )
        entries = doc["policies"]
        if not isinstance(entries, list):
            raise InvalidArgumentError(f"{source}: 'policies' must be a list of rules")
        rules = [Rule.from_dict(entry, i) for i, entry in enumerate(entries)]
        version = doc.get("version")
        if version is not None and not isinstance(version, str):
            version = str(version)
        return cls(rules, version=version)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> Policy:
        """Read a policy file (YAML 1.2 scalars; duplicate keys refused).

        Raises:
            InvalidArgumentError: the file cannot be read, is not YAML, or is malformed;
                names the file and the rule.
        """
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise InvalidArgumentError(f"cannot read policy file {str(path)!r}: {reason}") from exc
        source = f"policy file {str(path)!r}"
        doc = load_yaml(text, source)
        try:
            return cls.from_dict(doc, source=source)
        except InvalidArgumentError as exc:
            message = str(exc)
            prefix = "" if message.startswith(source) else f"{source}: "
            raise InvalidArgumentError(prefix + message) from None

    def to_dict(self) -> dict[str, Any]:
        """The policy as a document :meth:`from_dict` reads back."""
        return {"version": self.version, "policies": [r.to_dict() for r in self.rules]}

    def evaluate(
        self,
        request: Mapping[str, Any] | None = None,
        /,
        *,
        tool: Tool | str | None = None,
        args: Mapping[str, Any] | None = None,
        principal: Principal | str | None = None,
        risk: str | None = None,
        category: str | None = None,
        tainted: bool = False,
        taint_sources: Iterable[str] = (),
        describe: Describe = None,
        agent: str | None = None,
        thread_id: str | None = None,
    ) -> PolicyResult:
        """Decide one call, given as an action request or by its parts.

        With parts, a ``Tool`` supplies the risk, category and ``describe`` not given;
        ``describe`` may be the facts (a mapping) or a function of the arguments. This
        never raises for a bad request: it defers ("authorization unavailable: ...").

        Raises:
            InvalidArgumentError: both a request and parts were given, or neither.
        """
        if (request is None) == (tool is None):
            raise InvalidArgumentError(
                "evaluate takes an action request or tool=... with its parts, not both"
            )
        try:
            if request is not None:
                req = normalize_request(request)
            else:
                assert tool is not None
                req = build_request(
                    tool,
                    args,
                    principal=principal,
                    risk=risk,
                    category=category,
                    tainted=tainted,
                    taint_sources=taint_sources,
                    describe=describe,
                    agent=agent,
                    thread_id=thread_id,
                )
        except Exception as exc:
            return self._unavailable(None, f"the action request: {exc}", ())
        return self._decide(req)

    def evaluate_call(self, ctx: ToolCallContext) -> PolicyResult:
        """Decide the call a :class:`~graphflow.auth.ToolCallContext` describes."""
        return self.evaluate(
            tool=ctx.tool,
            args=ctx.args,
            principal=ctx.principal,
            risk=ctx.risk,
            category=ctx.category,
            tainted=ctx.tainted,
            taint_sources=ctx.taint_sources,
            agent=ctx.agent,
            thread_id=ctx.thread_id,
        )

    def _decide(self, req: dict[str, Any]) -> PolicyResult:
        best: Rule | None = None
        matched: list[str] = []
        failed: Rule | None = None
        problem = ""
        for rule, selectors, tests in self._rules_for(req["tool"], req["action_type"]):
            try:
                holds = True
                for selects in selectors:
                    if not selects(req):
                        holds = False
                        break
                if holds:
                    for test in tests:
                        if not test(req):
                            holds = False
                            break
            except Exception as exc:  # whatever a rule raises fails closed: it counts as defer
                if failed is None:
                    failed, problem = rule, f"rule {rule.id!r}: {exc}"
                continue
            if holds:
                matched.append(rule.id)
                if best is None or rule._rank > best._rank:
                    best = rule
        if failed is not None and (best is None or best._rank < _DEFER):
            return self._unavailable(failed.id, problem, tuple(matched))
        risk = req["risk"]
        if best is None:
            if risk in HIGH_RISKS:
                return PolicyResult(
                    "escalate",
                    None,
                    f"no policy rule matches this {risk} risk call of tool {req['tool']!r}",
                    version=self.version,
                )
            return PolicyResult(
                "allow",
                None,
                f"no policy rule matches; a {risk} risk call is allowed",
                version=self.version,
            )
        reason = best.reason or f"policy rule {best.id!r}: {best.decision}"
        decision = best.decision
        if decision == "allow" and risk in HIGH_RISKS and req["contains_untrusted_content"]:
            sources = ", ".join(map(str, req.get("taint_sources") or ())) or "unknown sources"
            decision = "escalate"
            reason = (
                f"{reason}; escalated: the transcript holds untrusted content ({sources}) "
                f"and this is a {risk} risk call"
            )
        return PolicyResult(
            decision,
            best.id,
            reason,
            best.required_role,
            best.expires_in,  # type: ignore[arg-type]  # seconds after __post_init__
            tuple(matched),
            best.evidence_required,
            self.version,
        )

    def _unavailable(
        self, rule_id: str | None, problem: str, matched: tuple[str, ...]
    ) -> PolicyResult:
        return PolicyResult(
            "defer",
            rule_id,
            f"authorization unavailable: {problem}",
            matched=matched,
            version=self.version,
        )

    def __repr__(self) -> str:
        return f"Policy({len(self.rules)} rules, version={self.version!r})"


# A rule as evaluation runs it: the rule, its match tests left after indexing, and its
# conditions, as bound methods.
_Plan = tuple[Rule, tuple[Callable[[Any], bool], ...], tuple[Callable[[Any], bool], ...]]


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]
