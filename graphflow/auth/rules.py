"""Policy rules: one rule's match, conditions and decision, compiled when it is built.

A rule proposes its decision for an action request when every ``match`` key selects the
request (a path the request lacks does not) and every condition holds (a path the request
lacks, or a value of the wrong type, makes the policy defer). Its ``examples`` are checked
when it is built, so a rule that contradicts them never loads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from graphflow.auth._conditions import (
    Condition,
    Unavailable,
    make_condition,
    parse_condition,
    parse_path,
)
from graphflow.auth._literals import is_scalar
from graphflow.auth._request import normalize_request
from graphflow.auth.digest import canonical_json
from graphflow.auth.vocab import (
    CATEGORIES,
    DECISIONS,
    RISKS,
    STRICTNESS,
    PolicyDecision,
    check_word,
)
from graphflow.errors import InvalidArgumentError

__all__ = ["Rule"]

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
