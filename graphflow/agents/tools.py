"""Tools an agent can call: a Python function with a schema built from its signature.

``@tool`` (or ``Tool(fn)``) reads the function's parameters, type hints, defaults and
docstring once, at decoration time, and builds a pydantic model of its arguments. That model
gives the JSON schema sent to the model and validates the arguments the model proposes
before the function runs, so a bad call becomes a :class:`ToolArgumentError` the agent can
report back to the model instead of an exception deep inside the function.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any, overload

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from graphflow.agents.messages import RAW_ARGUMENTS_KEY
from graphflow.auth.vocab import (
    CATEGORIES,
    DEFAULT_RISK,
    HIGH_RISKS,
    RISKS,
    Category,
    Risk,
    check_word,
)
from graphflow.errors import GraphflowError, InvalidArgumentError

__all__ = ["Tool", "ToolArgumentError", "tool"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI-compatible APIs accept


class ToolArgumentError(GraphflowError):
    """The arguments proposed for a tool do not fit its signature.

    Attributes:
        tool: the tool's name.
        errors: one readable line per problem, such as ``"path: Field required"``.
    """

    def __init__(self, tool: str, errors: list[str]):
        super().__init__(f"invalid arguments for tool {tool!r}: {'; '.join(errors)}")
        self.tool = tool
        self.errors = errors


class Tool:
    """A function the model may call, with its name, description and argument schema.

    Args:
        fn: the function (sync or async). Its parameters become the tool's arguments;
            ``*args`` and ``**kwargs`` are not allowed.
        name: the tool name; defaults to ``fn.__name__``.
        description: defaults to the first paragraph of ``fn``'s docstring.
        idempotent: running it twice is harmless, so a call whose outcome is unknown after
            a crash may be retried instead of being surfaced to a human.
        high_impact: it fails closed: it does not run if its evidence cannot be recorded.
            It also means ``risk="high"`` when no risk is given, and cannot be combined
            with a low or medium risk.
        risk: ``low``, ``medium``, ``high`` or ``critical``; None (the default) is kept as
            given and counts as ``high`` (see :attr:`effective_risk`).
        category: one of the 11 AAEF high-impact action categories (``financial``,
            ``external_communication``, ...), or None. Policies match it as
            ``action_type``.
        untrusted_output: its results may carry untrusted content (mail, web pages): they
            taint the agent's transcript for the rest of the thread.
        describe: ``fn(args) -> dict`` of normalized facts about a call (such as
            ``destination``, ``domain``, ``data_classification``, ``amount``); policies
            read its top-level keys as request paths and approvers see it.

    Raises:
        InvalidArgumentError: the name is not 1-64 letters, digits, ``_`` or ``-``; a risk
            or category outside the words above; a flag that is not a bool; a
            ``describe`` that is not callable.
        TypeError: the signature cannot be described (variadic parameters, or a type hint
            pydantic cannot validate).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        description: str | None = None,
        idempotent: bool = False,
        high_impact: bool = False,
        *,
        risk: Risk | None = None,
        category: Category | None = None,
        untrusted_output: bool = False,
        describe: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ):
        self.fn = fn
        self.name = name if name is not None else getattr(fn, "__name__", type(fn).__name__)
        if not _NAME.match(self.name):
            raise InvalidArgumentError(
                f"tool name {self.name!r} is invalid: use 1-64 letters, digits, '_' or '-' "
                "(pass name=...)"
            )
        self.description = description if description is not None else _summary(fn)
        where = f"tool {self.name!r}"
        for flag, value in (
            ("idempotent", idempotent),
            ("high_impact", high_impact),
            ("untrusted_output", untrusted_output),
        ):
            if type(value) is not bool:
                raise InvalidArgumentError(f"{where}: {flag} must be True or False, not {value!r}")
        if risk is not None:
            check_word(risk, RISKS, "risk", where)
            if high_impact and risk not in HIGH_RISKS:
                raise InvalidArgumentError(
                    f"{where}: high_impact=True means at least high risk, not risk={risk!r}; "
                    "drop one of them"
                )
        if category is not None:
            check_word(category, CATEGORIES, "category", where)
        if describe is not None and not callable(describe):
            raise InvalidArgumentError(
                f"{where}: describe must be a function of the arguments, not {describe!r}"
            )
        self.idempotent = idempotent
        self.high_impact = high_impact
        self.risk: Risk | None = risk
        self.category: Category | None = category
        self.untrusted_output = untrusted_output
        self.describe = describe
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            type(fn).__call__  # an object with an async __call__
        )
        self._params, self._model = _args_model(fn, self.name)
        try:
            schema = self._model.model_json_schema()
        except Exception as exc:
            raise TypeError(f"cannot describe the arguments of tool {self.name!r}: {exc}") from exc
        schema = _strip_titles(schema)
        schema.setdefault("properties", {})
        schema.setdefault("required", [])
        schema.pop("additionalProperties", None)
        self.parameters: dict[str, Any] = schema

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    @property
    def effective_risk(self) -> Risk:
        """The risk policies use: ``risk`` when given, else ``high``."""
        return self.risk if self.risk is not None else DEFAULT_RISK

    def describe_action(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The facts ``describe`` gives for a call with ``args`` (``{}`` without one).

        Raises:
            TypeError: ``describe`` returned something other than a mapping with string
                keys (names the tool).
            Exception: whatever ``describe`` raises, unchanged.
        """
        if self.describe is None:
            return {}
        facts = self.describe(dict(args))
        if not isinstance(facts, Mapping) or not all(isinstance(k, str) for k in facts):
            raise TypeError(
                f"describe of tool {self.name!r} must return a dict with string keys, not "
                f"{type(facts).__name__}"
            )
        return dict(facts)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly, without validation (handy in tests)."""
        return self.fn(*args, **kwargs)

    def schema(self) -> dict[str, Any]:
        """Return the tool in the OpenAI chat-completions ``tools`` format."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validate ``args`` and return them as a JSON-able dict (defaults filled in).

        Raises:
            ToolArgumentError: ``args`` does not fit the signature; names the tool and each
                problem.
        """
        return self._parse(args).model_dump(mode="json", by_alias=True)

    async def arun(self, args: Mapping[str, Any]) -> Any:
        """Validate ``args`` and call the function; sync functions run in a worker thread.

        Returns:
            What the function returned.

        Raises:
            ToolArgumentError: ``args`` does not fit the signature (the function is not
                called).
            Exception: whatever the function raises, unchanged.
        """
        parsed = self._parse(args)
        positional: list[Any] = []
        keyword: dict[str, Any] = {}
        for field, param in self._params:
            value = getattr(parsed, field)
            if param.kind is inspect.Parameter.POSITIONAL_ONLY:
                positional.append(value)
            else:
                keyword[param.name] = value
        if self.is_async:
            return await self.fn(*positional, **keyword)
        return await anyio.to_thread.run_sync(functools.partial(self.fn, *positional, **keyword))

    def _parse(self, args: Mapping[str, Any]) -> BaseModel:
        if isinstance(args, Mapping) and RAW_ARGUMENTS_KEY in args:
            raw = str(args[RAW_ARGUMENTS_KEY])
            raise ToolArgumentError(
                self.name, [f"arguments must be a JSON object, got {raw[:200]!r}"]
            )
        try:
            return self._model.model_validate(args)
        except ValidationError as exc:
            raise ToolArgumentError(self.name, _describe(exc)) from None


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    high_impact: bool = False,
    risk: Risk | None = None,
    category: Category | None = None,
    untrusted_output: bool = False,
    describe: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    high_impact: bool = False,
    risk: Risk | None = None,
    category: Category | None = None,
    untrusted_output: bool = False,
    describe: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` of a function; usable as ``@tool`` or ``@tool(name=...)``.

    Args:
        fn: the function, when used bare.
        name: the tool name; defaults to the function's name.
        description: defaults to the first paragraph of the docstring.
        idempotent: see :class:`Tool`.
        high_impact: see :class:`Tool`.
        risk: see :class:`Tool`.
        category: see :class:`Tool`.
        untrusted_output: see :class:`Tool`.
        describe: see :class:`Tool`.

    Returns:
        The tool, or a decorator making one when ``fn`` is omitted.

    Raises:
        InvalidArgumentError: as :class:`Tool`, when decorating.
    """

    def make(f: Callable[..., Any]) -> Tool:
        return Tool(
            f,
            name=name,
            description=description,
            idempotent=idempotent,
            high_impact=high_impact,
            risk=risk,
            category=category,
            untrusted_output=untrusted_output,
            describe=describe,
        )

    return make(fn) if fn is not None else make


def _summary(fn: Callable[..., Any]) -> str:
    """Return the first paragraph of the docstring, on one line ("" if none)."""
    doc = inspect.getdoc(fn) or ""
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


def _arg_docs(fn: Callable[..., Any]) -> dict[str, str]:
    """Return the parameter descriptions of a Google-style ``Args:`` docstring section."""
    out: dict[str, str] = {}
    lines = (inspect.getdoc(fn) or "").splitlines()
    inside, current, indent = False, "", 0
    for line in lines:
        stripped = line.strip()
        if not inside:
            inside = stripped in ("Args:", "Arguments:", "Parameters:")
            continue
        if not stripped:
            continue
        depth = len(line) - len(line.lstrip())
        if depth == 0:  # the next section (Returns:, Raises:, ...)
            break
        match = re.match(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", stripped)
        if match and (not current or depth <= indent):
            current, indent = match.group(1), depth
            out[current] = match.group(2)
        elif current:
            out[current] = f"{out[current]} {stripped}".strip()
    return out


def _args_model(
    fn: Callable[..., Any], name: str
) -> tuple[list[tuple[str, inspect.Parameter]], type[BaseModel]]:
    """Build the pydantic model of ``fn``'s arguments.

    Fields are named ``p0, p1, ...`` with the parameter names as aliases, so parameters
    such as ``json``, ``copy`` or ``_private`` cannot clash with pydantic's own names.
    """
    try:  # eval_str resolves string annotations (from __future__ import annotations)
        signature = inspect.signature(fn, eval_str=True)
    except NameError as exc:
        raise TypeError(
            f"cannot read the signature of tool {name!r}: {exc}; define the types its "
            "annotations name at module level"
        ) from exc
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot read the signature of tool {name!r}: {exc}") from exc
    docs = _arg_docs(fn)
    params: list[tuple[str, inspect.Parameter]] = []
    fields: dict[str, Any] = {}
    for i, param in enumerate(signature.parameters.values()):
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise TypeError(
                f"tool {name!r} cannot take *{param.name} or **{param.name}: name each "
                "argument so it can be described to the model"
            )
        field = f"p{i}"
        default = ... if param.default is inspect.Parameter.empty else param.default
        # Pass description only when documented: None would hide one from Annotated[..., Field]
        described = docs.get(param.name)
        info = (
            Field(default, alias=param.name, description=described)
            if described
            else Field(default, alias=param.name)
        )
        annotation = Any if param.annotation is inspect.Parameter.empty else param.annotation
        fields[field] = (annotation, info)
        params.append((field, param))
    config = ConfigDict(extra="forbid")  # tell the model about arguments it made up
    try:
        model = create_model(f"{name}_arguments", __config__=config, **fields)
    except Exception as exc:
        first = str(exc).splitlines()[0]
        raise TypeError(f"cannot describe the arguments of tool {name!r}: {first}") from exc
    return params, model


_VALUES = frozenset({"default", "const", "enum", "examples"})  # data, not schemas


def _strip_titles(schema: Any, *, names: bool = False) -> Any:
    """Drop the ``title`` keys pydantic generates (keeping properties named ``title``)."""
    if isinstance(schema, dict):
        return {
            k: v
            if k in _VALUES and not names
            else _strip_titles(v, names=not names and k in ("properties", "$defs"))
            for k, v in schema.items()
            if names or not (k == "title" and isinstance(v, str))
        }
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def _describe(exc: ValidationError) -> list[str]:
    """One line per validation error: ``location: message``."""
    out = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        out.append(f"{where}: {err['msg']}")
    return out
