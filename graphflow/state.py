"""State schemas: channels, reducers and defaults read from a pydantic model or TypedDict."""

from __future__ import annotations

import contextlib
import operator
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_args, get_origin, get_type_hints

from pydantic import BaseModel, TypeAdapter

from checkpoints import serde
from graphflow.errors import InvalidUpdateError
from graphflow.reducers import APPEND_ONLY

Reducer = Callable[[Any, Any], Any]

_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class Channel:
    """One state key: its reducer (None: last write wins) and how to make its default."""

    name: str
    annotation: Any
    reducer: Reducer | None
    default: Callable[[], Any] | None
    append_only: bool


class StateSchema:
    """The channels of a state type and conversions between values and state objects."""

    def __init__(self, schema: type[Any]):
        self.schema = schema
        self.is_model = isinstance(schema, type) and issubclass(schema, BaseModel)
        if not self.is_model and not typing.is_typeddict(schema):
            raise TypeError(
                f"state schema must be a pydantic BaseModel or a TypedDict, not {schema!r}"
            )
        hints = get_type_hints(schema, include_extras=True)
        self.channels: dict[str, Channel] = {}
        for name, ann in hints.items():
            if name.startswith("_") and self.is_model:
                continue
            reducer: Reducer | None = None
            base = ann
            if get_origin(ann) is typing.Annotated:
                base, *meta = get_args(ann)
                for m in meta:
                    if callable(m) and not isinstance(m, type):
                        reducer = m
            self.channels[name] = Channel(
                name=name,
                annotation=base,
                reducer=reducer,
                default=self._default_factory(name, base, reducer),
                append_only=reducer in APPEND_ONLY or reducer is operator.add,
            )
        self.keys = frozenset(self.channels)
        self._adapters: dict[str, TypeAdapter[Any]] = {}
        _register_types(hints.values())

    def _default_factory(self, name: str, base: Any, reducer: Reducer | None) -> Any:
        if self.is_model:
            fld = self.schema.model_fields.get(name)
            if fld is not None and not fld.is_required():
                return lambda: fld.get_default(call_default_factory=True)
        if reducer is not None:
            origin = get_origin(base) or base
            if isinstance(origin, type):
                try:
                    origin()
                except Exception:
                    return None
                return origin
        return None

    def initial(self) -> dict[str, Any]:
        """Values of a new thread: the defaults of keys that have one."""
        out: dict[str, Any] = {}
        for ch in self.channels.values():
            if ch.default is not None and (self.is_model or ch.reducer is not None):
                out[ch.name] = ch.default()
        return out

    def view(self, values: Mapping[str, Any]) -> Any:
        """The state object a node sees (a model instance or a dict), without validation."""
        if self.is_model:
            return self.schema.model_construct(**{k: v for k, v in values.items()})
        return dict(values)

    def input_update(self, value: Any) -> dict[str, Any]:
        """Turn a run's input into an update, validating each given key against the schema."""
        if isinstance(value, BaseModel):
            data = {k: getattr(value, k) for k in value.model_fields_set}
        elif isinstance(value, Mapping):
            data = dict(value)
        else:
            raise InvalidUpdateError(
                f"input must be a mapping or a {self.schema.__name__} instance, not "
                f"{type(value).__name__}",
                node="input",
            )
        self.check_keys(data, "input")
        if self.is_model:
            for k, v in list(data.items()):
                ch = self.channels[k]
                if ch.reducer is None:
                    data[k] = self._adapter(k).validate_python(v)
        return data

    def _adapter(self, key: str) -> TypeAdapter[Any]:
        ad = self._adapters.get(key)
        if ad is None:
            ad = self._adapters[key] = TypeAdapter(self.channels[key].annotation)
        return ad

    def check_keys(self, update: Mapping[str, Any], node: str) -> None:
        """Raise ``InvalidUpdateError`` naming the node and key for keys not in the schema."""
        for k in update:
            if k not in self.channels:
                raise InvalidUpdateError(
                    f"node {node!r} wrote unknown state key {k!r}; "
                    f"{self.schema.__name__} has {sorted(self.channels)}",
                    node=node,
                    key=k,
                )


def _register_types(annotations: Any) -> None:
    """Register pydantic models and enums named in the schema so their values can be stored."""
    import enum

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
        stack.extend(a for a in get_args(tp) if not isinstance(a, str | int | float))


MISSING = _MISSING
