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
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any

from graphflow.auth._conditions import (
    Condition,
    Unavailable,
    is_scalar,
    load_yaml,
    make_condition,
    parse_condition,
    parse_path,
)
from graphflow.auth._request import Describe, build_request, normalize_request
from graphflow.auth.digest import canonical_json
from graphflow.auth.principal import Principal
from graphflow.auth.vocab import (
    CATEGORIES,
    DECISIONS,
    HIGH_RISKS,
    RISKS,
    STRICTNESS,
    PolicyDecision,
    check_word,
)
from graphflow.errors import InvalidArgumentError

if TYPE_CHECKING:
    from graphflow.agents.tools import Tool
    from graphflow.auth.context import ToolCallContext

__all__ = ["Policy", "PolicyResult", "Rule"]

_RULE_KEYS = frozenset(
    {
        "id",
        "decision",
        "match",
        "conditions",
        "reason",
        "required_role",
        "expires_in",
        "evidence_required",
        "examples",
        "description",
    }
)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DEFER = STRICTNESS["defer"]
_CACHE_LIMIT = 4096


def _seconds(value: Any, where: str) -> int | float | None:
    if value is None:
        return None
    if isinstance(value, int | float) and type(value) is not bool:
        seconds: int | float = value
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNIT[m.group(2)]
    else:
        raise InvalidArgumentError(
            f"{where}: expires_in {value!r} must be seconds or a duration such as '30s', "
            "'15m', '2h' or '1d'"
        )
    if not seconds > 0 or seconds == float("inf"):
        raise InvalidArgumentError(f"{where}: expires_in must be positive, not {value!r}")
    return int(seconds) if float(seconds).is_integer() else seconds


@dataclass(frozen=True, eq=False)
class Rule:
    """One policy rule: when ``match`` and every condition hold, it proposes ``decision``.

    Args:
        id: a name unique in its policy; results and evidence cite it.
        decision: one of ``allow``, ``deny``, ``requires_human_approval``, ``escalate``,
            ``defer``, ``freeze``, ``reauthorization_required``.
        match: request path -> a value or a list of values (any of them); ``tool``,
            ``action_type`` and ``risk`` are checked against the known words. A path the
            request lacks does not match.
        conditions: ``"PATH OP LITERAL"`` strings, all of which must hold; a path the
            request lacks makes the policy defer.
        reason: said to the model and the approver.
        required_role: for ``escalate``, the role the approver must hold.
        expires_in: how long an approval stays valid: seconds, or ``"30s"``, ``"15m"``,
            ``"2h"``, ``"1d"`` (stored as seconds).
        evidence_required: whether the call's evidence must be recorded before it runs.
        examples: ``{"match": [...], "not_match": [...]}`` action requests the rule must
            and must not match; checked here.
        description: free text for the policy's readers.

    Raises:
        InvalidArgumentError: anything malformed, naming the rule (and the condition or
            example).
    """

    id: str
    decision: PolicyDecision
    _: KW_ONLY
    match: Mapping[str, Any] | None = None
    conditions: Sequence[str] = ()
    reason: str | None = None
    required_role: str | None = None
    expires_in: int | float | str | None = None
    evidence_required: bool = True
    examples: Mapping[str, Any] | None = None
    description: str | None = None
    _selectors: dict[str, Condition] = field(init=False, repr=False)
    _tests: tuple[Condition, ...] = field(init=False, repr=False)
    _rank: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise InvalidArgumentError(
                f"a policy rule needs an id (a non-empty string), not {self.id!r}"
            )
        where = f"policy rule {self.id!r}"
        check_word(self.decision, DECISIONS, "decision", where)
        for name in ("reason", "required_role", "description"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InvalidArgumentError(f"{where}: {name} must be a string, not {value!r}")
        if type(self.evidence_required) is not bool:
            raise InvalidArgumentError(f"{where}: evidence_required must be true or false")
        set_ = object.__setattr__
        set_(self, "expires_in", _seconds(self.expires_in, where))
        set_(self, "_selectors", _selectors(self.match or {}, where))
        set_(self, "match", dict(self.match or {}))
        conditions = self.conditions
        if isinstance(conditions, str):
            conditions = [conditions]
        if not isinstance(conditions, Sequence):
            raise InvalidArgumentError(f"{where}: conditions must be a list of strings")
        tests = []
        for text in conditions:
            try:
                tests.append(parse_condition(text))
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"{where}: {exc}") from None
        set_(self, "conditions", tuple(conditions))
        set_(self, "_tests", tuple(tests))
        set_(self, "_rank", STRICTNESS[self.decision])
        set_(self, "examples", _check_examples(self, where))

    def holds(self, request: Mapping[str, Any]) -> bool:
        """Whether the rule matches a normalized request.

        Raises:
            Unavailable: a condition's path is missing or has a value of the wrong type.
        """
        for selector in self._selectors.values():
            if not selector.selects(request):
                return False
        return self.conditions_hold(request)

    def conditions_hold(self, request: Mapping[str, Any]) -> bool:
        """Whether every condition holds (``match`` aside).

        Raises:
            Unavailable: a condition's path is missing or has a value of the wrong type.
        """
        return all(test.holds(request) for test in self._tests)

    def to_dict(self) -> dict[str, Any]:
        """The rule as plain data, every field present (the policy version hashes it)."""
        assert self.match is not None  # normalized in __post_init__
        return {
            "id": self.id,
            "decision": self.decision,
            "match": {
                k: list(v) if isinstance(v, list | tuple) else [v] for k, v in self.match.items()
            },
            "conditions": list(self.conditions),
            "reason": self.reason,
            "required_role": self.required_role,
            "expires_in": self.expires_in,
            "evidence_required": self.evidence_required,
            "examples": self.examples,
            "description": self.description,
        }

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any], position: int = 0) -> Rule:
        """A rule from one entry of a policy document's ``policies`` list.

        Raises:
            InvalidArgumentError: no id, unknown keys, or anything :class:`Rule` refuses.
        """
        if not isinstance(entry, Mapping):
            raise InvalidArgumentError(f"policy entry {position} must be a mapping, not {entry!r}")
        if "id" not in entry:
            raise InvalidArgumentError(f"policy entry {position} has no id")
        where = f"policy rule {entry['id']!r}"
        unknown = sorted(map(str, set(entry) - _RULE_KEYS))
        if unknown:
            raise InvalidArgumentError(
                f"{where}: unknown keys {', '.join(unknown)}; a rule has "
                f"{', '.join(sorted(_RULE_KEYS))}"
            )
        if "decision" not in entry:
            raise InvalidArgumentError(f"{where}: no decision")
        kwargs = {k: v for k, v in entry.items() if k not in ("id", "decision")}
        if kwargs.get("conditions") is None:
            kwargs.pop("conditions", None)
        if kwargs.get("evidence_required") is None:
            kwargs.pop("evidence_required", None)
        return cls(entry["id"], entry["decision"], **kwargs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rule) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(canonical_json(self.to_dict()))


def _selectors(match: Any, where: str) -> dict[str, Condition]:
    if not isinstance(match, Mapping):
        raise InvalidArgumentError(f"{where}: match must be a mapping of path to values")
    out = {}
    for key, value in match.items():
        values = list(value) if isinstance(value, list | tuple) else [value]
        try:
            path = parse_path(key)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{where}: match {exc}") from None
        if not values or not all(is_scalar(v) for v in values):
            raise InvalidArgumentError(
                f"{where}: match {key!r} must be a value or a non-empty list of values"
            )
        for v in values:
            if key == "risk":
                check_word(v, RISKS, "match risk", where)
            elif key in ("action_type", "category") and v is not None:
                check_word(v, CATEGORIES, f"match {key}", where)
            elif key == "tool" and not isinstance(v, str):
                raise InvalidArgumentError(f"{where}: match tool {v!r} must be a tool name")
        out[key] = make_condition(f"{key} in {values!r}", path, "in", values)
    return out


def _check_examples(rule: Rule, where: str) -> dict[str, list[Any]] | None:
    examples = rule.examples
    if examples is None:
        return None
    if not isinstance(examples, Mapping) or set(examples) - {"match", "not_match"}:
        raise InvalidArgumentError(
            f"{where}: examples must be a mapping with 'match' and/or 'not_match' lists"
        )
    out: dict[str, list[Any]] = {}
    for kind, expected in (("match", True), ("not_match", False)):
        items = examples.get(kind) or []
        if not isinstance(items, list):
            raise InvalidArgumentError(f"{where}: examples.{kind} must be a list of requests")
        for i, example in enumerate(items):
            try:
                got = rule.holds(normalize_request(example))
            except Unavailable as exc:
                raise InvalidArgumentError(
                    f"{where}: example {kind}[{i}] {example!r} cannot be evaluated: {exc}"
                ) from None
            if got is not expected:
                says = "does not match" if expected else "matches"
                raise InvalidArgumentError(
                    f"{where}: example {kind}[{i}] {example!r} {says} the rule; fix the "
                    "rule or the example"
                )
        out[kind] = list(items)
    return out


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
