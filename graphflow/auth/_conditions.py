"""Policy conditions, parsed once into predicate objects (no ``eval``, nothing imported).

A condition is ``PATH OP LITERAL``: a dotted path into the action request, an operator
and a literal. The literal is JSON, else a YAML scalar or flow list read with YAML 1.2
rules (``yes``, ``on`` and ``NO`` stay strings, ``010`` and dates stay text), else the bare
text; for ``matches`` the rest of the line is the regular expression unless it is quoted.

A path whose value is a list satisfies a condition when any item does, for every operator
(so ``principal.roles != intern`` holds for roles ``[intern, staff]``); ``contains`` and
``==``/``!=`` with a list literal test the whole value instead. A name segment through a
list of mappings collects that key from every item (each must have it).

Evaluation raises :class:`Unavailable` when a path is missing or a value has the wrong type
for its operator (booleans are not numbers; ``True`` does not equal ``1``); the policy turns
that into ``defer``, never into ``allow``. ``matches`` uses ``re.search``: anchor with ``^``
and ``$``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from graphflow.auth._literals import parse_literal
from graphflow.errors import InvalidArgumentError

__all__ = [
    "MISSING",
    "OPERATORS",
    "Condition",
    "Unavailable",
    "lookup",
    "parse_condition",
    "parse_path",
]

OPERATORS = (
    "==",
    "!=",
    "in",
    "not in",
    "<",
    "<=",
    ">",
    ">=",
    "startswith",
    "endswith",
    "matches",
    "contains",
)
_SEGMENT = r"[A-Za-z0-9_][A-Za-z0-9_-]*"
_PATH = re.compile(rf"^{_SEGMENT}(?:\.{_SEGMENT})*$")
_CONDITION = re.compile(
    rf"^\s*(?P<path>{_SEGMENT}(?:\.{_SEGMENT})*)"
    r"(?:\s*(?P<sym>==|!=|<=|>=|<|>)\s*"
    r"|\s+(?P<word>not\s+in|in|startswith|endswith|matches|contains)\s+)"
    r"(?P<literal>\S.*?)\s*$",
    re.DOTALL,
)
_NUMBER = (int, float, Decimal)


class Unavailable(Exception):
    """A condition could not be evaluated: a missing path or a value of the wrong type."""


def parse_path(text: str) -> tuple[str, ...]:
    """``"args.amount"`` as ``("args", "amount")``.

    Raises:
        InvalidArgumentError: not dot-separated names (letters, digits, ``_``, ``-``).
    """
    if not isinstance(text, str) or not _PATH.match(text):
        raise InvalidArgumentError(
            f"path {text!r} is not dot-separated names such as 'args.amount'"
        )
    return tuple(text.split("."))


MISSING: Any = object()
"""What :func:`lookup` returns for a path the request lacks."""


def lookup(request: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path``, or :data:`MISSING`.

    Through a list, a digit segment indexes it and a name maps over its items (each must
    have the rest of the path; the values are collected in one list).
    """
    value = request
    for segment in path:
        if type(value) is not dict:  # plain dicts take the fast path; the rest, this one
            return _lookup_any(request, path)
        value = value.get(segment, MISSING)
        if value is MISSING:
            return MISSING
    return value


def _lookup_any(request: Any, path: tuple[str, ...]) -> Any:
    value = request
    for i, segment in enumerate(path):
        if isinstance(value, Mapping):
            value = value.get(segment, MISSING)
            if value is MISSING:
                return MISSING
        elif isinstance(value, list | tuple):
            if segment.isdigit():
                if int(segment) >= len(value):
                    return MISSING
                value = value[int(segment)]
                continue
            out: list[Any] = []
            for item in value:
                got = _lookup_any(item, path[i:])
                if got is MISSING:
                    return MISSING
                out.extend(got) if isinstance(got, list | tuple) else out.append(got)
            return out if out else MISSING
        else:
            return MISSING
    return value


def _same(a: Any, b: Any) -> bool:
    """Equality where booleans equal only booleans (``True`` is not ``1``)."""
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    return bool(a == b)


def _number(v: Any) -> bool:
    return isinstance(v, _NUMBER) and type(v) is not bool


@dataclass(frozen=True, slots=True)
class Condition:
    """One compiled test of the action request.

    Attributes:
        source: the condition as written.
        path: the dotted path, split.
        op: the operator.
        literal: the parsed literal.
        whole: the test applies to the path's value as a whole; otherwise a list value
            satisfies it when any item does.
    """

    source: str
    path: tuple[str, ...]
    op: str
    literal: Any
    whole: bool
    test: Callable[[Any], bool] = field(repr=False, compare=False)
    get: Callable[[Any], Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "get", _getter(self.path))

    def holds(self, request: Mapping[str, Any]) -> bool:
        """Whether the request satisfies it.

        Raises:
            Unavailable: the path is missing or a value has the wrong type (the message
                names the condition).
        """
        value = self.get(request)
        if value is MISSING:
            raise Unavailable(f"condition {self.source!r}: path {'.'.join(self.path)!r} is missing")
        try:
            if self.whole or not isinstance(value, list | tuple):
                return self.test(value)
            return any(self.test(v) for v in value)
        except Unavailable as exc:
            raise Unavailable(f"condition {self.source!r}: {exc}") from None

    def selects(self, request: Mapping[str, Any]) -> bool:
        """Like :meth:`holds`, but a missing path does not match (rule ``match`` keys).

        Raises:
            Unavailable: a value has the wrong type for the operator.
        """
        value = self.get(request)
        if value is MISSING:
            return False
        if self.whole or not isinstance(value, list | tuple):
            return self.test(value)
        return any(self.test(v) for v in value)


def _getter(path: tuple[str, ...]) -> Callable[[Any], Any]:
    """:func:`lookup` for one path, unrolled for the usual one or two segments."""
    if len(path) == 1:
        (first,) = path

        def get_one(request: Any) -> Any:
            if type(request) is dict:
                return request.get(first, MISSING)
            return _lookup_any(request, path)

        return get_one
    if len(path) == 2:
        first, second = path

        def get_two(request: Any) -> Any:
            if type(request) is dict:
                value = request.get(first, MISSING)
                if type(value) is dict:
                    return value.get(second, MISSING)
            return _lookup_any(request, path)

        return get_two
    return lambda request: lookup(request, path)


def member_test(values: list[Any]) -> Callable[[Any], bool]:
    """A test of membership in ``values`` (strings by a set lookup)."""
    strings = frozenset(v for v in values if type(v) is str)
    others = tuple(v for v in values if type(v) is not str)
    if not others:
        return lambda v: type(v) is str and v in strings
    return lambda v: (v in strings) if type(v) is str else any(_same(v, o) for o in others)


def _ordered(op: str, literal: Any, where: str) -> Callable[[Any], bool]:
    if _number(literal):
        kind, ok = "a number", _number
    elif isinstance(literal, str):
        kind, ok = "a string", (lambda v: isinstance(v, str))
    else:
        raise InvalidArgumentError(f"{where}: {op} needs a number or a string, not {literal!r}")
    compare: Callable[[Any, Any], bool] = {
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
    }[op]

    def test(v: Any) -> bool:
        if not ok(v):
            raise Unavailable(f"{op} {literal!r} needs {kind}, got {type(v).__name__} {v!r}")
        return compare(v, literal)

    return test


def _text_test(op: str, literal: Any, where: str) -> Callable[[Any], bool]:
    items = literal if isinstance(literal, list) else [literal]
    if not items or not all(isinstance(i, str) for i in items):
        raise InvalidArgumentError(f"{where}: {op} needs a string or a list of strings")
    affixes = tuple(items)

    def test(v: Any) -> bool:
        if not isinstance(v, str):
            raise Unavailable(f"{op} needs a string, got {type(v).__name__} {v!r}")
        return v.startswith(affixes) if op == "startswith" else v.endswith(affixes)

    return test


def _regex_test(literal: Any, where: str) -> Callable[[Any], bool]:
    if not isinstance(literal, str):
        raise InvalidArgumentError(f"{where}: matches needs a regular expression string")
    try:
        pattern = re.compile(literal)
    except re.error as exc:
        raise InvalidArgumentError(f"{where}: invalid regular expression: {exc}") from None

    def test(v: Any) -> bool:
        if not isinstance(v, str):
            raise Unavailable(f"matches needs a string, got {type(v).__name__} {v!r}")
        return pattern.search(v) is not None

    return test


def _contains_test(literal: Any, where: str) -> Callable[[Any], bool]:
    if isinstance(literal, list):
        raise InvalidArgumentError(f"{where}: contains takes one value, not a list")

    def test(v: Any) -> bool:
        if isinstance(v, list | tuple):
            return any(_same(item, literal) for item in v)
        if isinstance(v, str) and isinstance(literal, str):
            return literal in v
        if isinstance(v, Mapping) and isinstance(literal, str):
            return literal in v
        raise Unavailable(
            f"contains {literal!r} needs a list, a string or a mapping, got "
            f"{type(v).__name__} {v!r}"
        )

    return test


def make_condition(source: str, path: tuple[str, ...], op: str, literal: Any) -> Condition:
    """Compile one test; ``source`` names it in errors.

    Raises:
        InvalidArgumentError: the literal does not suit the operator, or a bad regex.
    """
    where = f"condition {source!r}"
    whole = False
    if op in ("==", "!=") and isinstance(literal, list):
        whole = True  # a list literal compares with the whole value
    if op == "==":
        test: Callable[[Any], bool] = lambda v: _same(v, literal)  # noqa: E731
    elif op == "!=":
        test = lambda v: not _same(v, literal)  # noqa: E731
    elif op in ("in", "not in"):
        if not isinstance(literal, list):
            raise InvalidArgumentError(f"{where}: {op} needs a list such as [a, b]")
        member = member_test(literal)
        test = member if op == "in" else (lambda v: not member(v))
    elif op in ("<", "<=", ">", ">="):
        test = _ordered(op, literal, where)
    elif op in ("startswith", "endswith"):
        test = _text_test(op, literal, where)
    elif op == "matches":
        test = _regex_test(literal, where)
    elif op == "contains":
        test, whole = _contains_test(literal, where), True
    else:
        raise InvalidArgumentError(
            f"{where}: unknown operator {op!r}; use one of {', '.join(OPERATORS)}"
        )
    return Condition(source, path, op, literal, whole, test)


def parse_condition(text: Any) -> Condition:
    """Parse ``PATH OP LITERAL`` into a :class:`Condition`.

    Raises:
        InvalidArgumentError: not of that form, an unknown operator, a literal that is not
            a scalar or a list of scalars, or one that does not suit the operator.
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(
            f"condition {text!r} must be a string 'PATH OP LITERAL', such as 'args.amount > 1000'"
        )
    m = _CONDITION.match(text)
    if m is None:
        raise InvalidArgumentError(
            f"condition {text!r} is not 'PATH OP LITERAL' with OP one of "
            f"{', '.join(OPERATORS)} (for example 'args.amount > 1000')"
        )
    op = m.group("sym") or " ".join(m.group("word").split())
    raw = m.group("literal")
    if m.group("sym") and raw[0] in "<>=!":  # ('args.amount >>> 1': a typo, not a literal)
        raise InvalidArgumentError(
            f"condition {text!r}: the literal {raw!r} starts with an operator's character; "
            f"write one operator of {', '.join(OPERATORS)}, and quote a literal that is text"
        )
    literal = _regex_literal(raw) if op == "matches" else parse_literal(raw, text)
    return make_condition(text, tuple(m.group("path").split(".")), op, literal)


def _regex_literal(raw: str) -> str:
    if raw[0] in "'\"":
        value = parse_literal(raw, raw)
        if isinstance(value, str):
            return value
    return raw
