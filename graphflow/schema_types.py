"""Reading type annotations for state schemas: reducers, item types, fast paths, messages.

Helpers of ``graphflow.state``, apart so that the schema stays readable.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import inspect
import re
import typing
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    PlainValidator,
    ValidationError,
    WrapValidator,
)

from checkpoints import serde
from graphflow.errors import GraphValidationError, InvalidUpdateError


def check_reducer(schema: type[Any], key: str, reducer: Any) -> None:
    """Refuse, when the schema is read, a reducer that cannot be called as
    ``reducer(current, update)``: the error would otherwise come at the first write."""
    try:
        sig = inspect.signature(reducer)
    except (TypeError, ValueError):  # some builtins have no signature: they are trusted
        return
    try:
        sig.bind(None, None)
    except TypeError:
        raise GraphValidationError(
            f"reducer {getattr(reducer, '__qualname__', reducer)!r} of state key {key!r} "
            f"({schema.__name__}) takes {sig}; a reducer is called as reducer(current, update) "
            "with two arguments"
        ) from None


def list_item(tp: Any) -> Any:
    """``T`` of ``list[T]`` (None for another type or a bare ``list``)."""
    if get_origin(tp) is list:
        args = get_args(tp)
        return args[0] if args else None
    return None


def update_type(reducer: Any) -> Any:
    """The annotation of a reducer's update (second) parameter, or None."""
    try:
        params = list(inspect.signature(reducer).parameters.values())
        hints = get_type_hints(reducer)
    except Exception:  # no signature, or hints that do not resolve: not validated
        return None
    if len(params) < 2:
        return None
    return hints.get(params[1].name)


_MODES = {
    "after": AfterValidator,
    "before": BeforeValidator,
    "wrap": WrapValidator,
    "plain": PlainValidator,
}


def field_validators(schema: type[Any], key: str) -> list[Any]:
    """The ``@field_validator`` functions of a model's field ``key`` (``"*"`` ones included),
    as ``Annotated`` metadata in their definition order, which applies them as the model
    does. A validator meets a write by itself: its ``info.data`` is ``None``."""
    decorators = getattr(schema, "__pydantic_decorators__", None)
    if decorators is None:
        return []
    out = []
    for dec in decorators.field_validators.values():
        if key in dec.info.fields or "*" in dec.info.fields:
            out.append(_MODES[dec.info.mode](dec.func))
    return out


def has_validators(schema: type[Any], key: str) -> bool:
    """Whether a model's field ``key`` has validator functions: ``@field_validator``s, or
    ``AfterValidator``/``BeforeValidator``/``WrapValidator``/``PlainValidator`` metadata."""
    fld = schema.model_fields.get(key) if hasattr(schema, "model_fields") else None
    metadata = fld.metadata if fld is not None else []
    kinds = tuple(_MODES.values())
    return bool(field_validators(schema, key)) or any(isinstance(m, kinds) for m in metadata)


@dataclasses.dataclass(frozen=True)
class ModelRules:
    """What a pydantic state schema says beyond each key's type: ``validated``, the keys
    with validator functions (a model instance holds them validated); ``required``, the
    fields without a default; ``aliases``, alias -> field name (a write may use either, as
    the constructor takes the alias); ``validate_default``, the keys (without a reducer)
    whose defaults are validated."""

    validated: frozenset[str] = frozenset()
    required: tuple[str, ...] = ()
    aliases: dict[str, str] = dataclasses.field(default_factory=dict)
    validate_default: frozenset[str] = frozenset()

    @classmethod
    def of(cls, schema: type[Any], channels: Any) -> ModelRules:
        fields = schema.model_fields
        every = bool(schema.model_config.get("validate_default"))
        aliases = {
            alias: name
            for name, f in fields.items()
            for alias in (f.alias, f.validation_alias)
            if isinstance(alias, str) and alias != name and alias not in channels
        }
        defaults = frozenset(
            k
            for k, f in fields.items()
            if k in channels
            and channels[k].reducer is None
            and (f.validate_default or (f.validate_default is None and every))
        )
        return cls(
            frozenset(k for k in channels if has_validators(schema, k)),
            tuple(k for k, f in fields.items() if f.is_required()),
            aliases,
            defaults,
        )


def incomplete(schema: type[Any], missing: list[str], node: str) -> InvalidUpdateError:
    """The error of a new thread's first state that lacks the ``missing`` required fields
    of the model ``schema``, naming ``node`` (``StateSchema.check_complete``)."""
    names = f"required state key(s) {', '.join(map(repr, missing))} of {schema.__name__}"
    if node == "input":
        what = f"the input of a new thread lacks {names} (no default); give them in the input"
    elif node == "update_state":
        what = f"update_state of a new thread lacks {names} (no default); give them"
    else:
        what = (
            f"subgraph node {node!r} starts without {names} (no default): its parent's "
            "state has no such key; give it in the parent or map it (add_node(input=...))"
        )
    return InvalidUpdateError(what, node=node, key=missing[0])


def has_typevar(tp: Any) -> bool:
    if isinstance(tp, TypeVar):
        return True
    return any(has_typevar(a) for a in get_args(tp) if not isinstance(a, str | int | float))


def fast_type(tp: Any) -> type | None:
    """A type whose exact instances pass validation unchanged (checking ``type(v) is tp``
    is much cheaper than validating): plain scalars, and models that are not revalidated."""
    if tp in (int, str, float, bool, bytes):
        return typing.cast(type, tp)
    if (
        isinstance(tp, type)
        and issubclass(tp, BaseModel)
        and tp.model_config.get("revalidate_instances", "never") == "never"
    ):
        return tp
    return None


def type_name(tp: Any) -> str:
    """A readable name of a type: ``list[Item]``, not ``list[my.module.Item]``."""
    if isinstance(tp, type) and not get_args(tp):
        return tp.__qualname__
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_])", "", repr(tp))


def short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def details(error: ValidationError, limit: int = 3) -> str:
    """Pydantic's messages, one per problem (the first few), with where in the value."""
    parts = []
    errors = error.errors(include_url=False)
    for err in errors[:limit]:
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        loc = loc.lstrip(".")
        loc = loc if len(loc) <= 40 else loc[:37] + "..."
        parts.append(f"{err['msg']} (at {loc})" if loc else err["msg"])
    if len(errors) > limit:
        parts.append(f"and {len(errors) - limit} more")
    return "; ".join(parts)


def register_types(annotations: Any) -> None:
    """Register the pydantic models, dataclasses and enums named in the schema (at any
    depth) so that their values can be stored."""
    seen: set[Any] = set()
    stack = list(annotations)
    while stack:
        tp = stack.pop()
        if tp in seen:
            continue
        try:
            seen.add(tp)
        except TypeError:
            continue
        if isinstance(tp, type):
            if issubclass(tp, BaseModel) and tp is not BaseModel:
                if not serde.is_registered(tp):
                    serde.register(tp)
                with contextlib.suppress(Exception):
                    stack.extend(get_type_hints(tp).values())
            elif issubclass(tp, enum.Enum) and not serde.is_registered(tp):
                serde.register(tp)
            elif dataclasses.is_dataclass(tp):
                # (another class of its name, made by the same factory before: left to
                # SerializationError, which says to register it, if its values are stored)
                if not serde.is_registered(tp):
                    with contextlib.suppress(ValueError):
                        serde.register(tp)
                with contextlib.suppress(Exception):
                    stack.extend(get_type_hints(tp).values())
        stack.extend(a for a in get_args(tp) if not isinstance(a, str | int | float))
