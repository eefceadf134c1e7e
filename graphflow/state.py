"""State schemas: channels, reducers and defaults read from a pydantic model or TypedDict.

A pydantic schema is enforced: every write (a node's update, the input, ``update_state``) is
validated and coerced as pydantic would, key by key, and values loaded from a store are
checked against it (``check_loaded``). A TypedDict schema is not validated (as in LangGraph).
A field's ``@field_validator``s run on writes to a key without a reducer, not on loads: a
stored value of a key with validator functions is loaded as stored (it was validated when
it was written; its checksum tells damage).

What a write to a key with a reducer is validated as:

- ``append`` on ``list[T]``: a list (or tuple) update item by item as ``T``, any other
  update as one ``T``;
- ``operator.add`` and ``merge``: the update as the key's own type;
- another reducer (``add_messages``, your own): as the annotation of the reducer's second
  parameter when it has a concrete one; otherwise the update reaches the reducer as written.
"""

from __future__ import annotations

import dataclasses
import operator
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args, get_origin, get_type_hints

from pydantic import BaseModel, PydanticUserError, TypeAdapter, ValidationError

from checkpoints.errors import CorruptCheckpointError
from graphflow.errors import GraphValidationError, InvalidUpdateError
from graphflow.reducers import APPEND_ONLY, append, merge
from graphflow.schema_types import (
    ModelRules,
    check_reducer,
    details,
    fast_type,
    field_validators,
    has_typevar,
    has_validators,
    incomplete,
    list_item,
    register_types,
    short,
    type_name,
    update_type,
)

Reducer = Callable[[Any, Any], Any]

_MISSING: Any = object()

HIDDEN_PREFIX = "__gf:"
"""Channels the engine keeps for itself (never part of the user's state)."""


@dataclass(frozen=True, slots=True)
class _Check:
    """How writes to one key are validated: ``validate(value) -> value`` (raises
    ``ValidationError``), ``fast``: a type whose exact instances need no validation, and
    ``expected``: what the key takes, for error messages."""

    validate: Callable[[Any], Any] | None
    fast: type | None
    expected: str


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
            what = "a dataclass" if dataclasses.is_dataclass(schema) else repr(schema)
            raise GraphValidationError(
                f"state schema must be a pydantic BaseModel or a TypedDict, not {what}; "
                "declare the state as one of those"
            )
        hints = get_type_hints(schema, include_extras=True)
        self.channels: dict[str, Channel] = {}
        for name, ann in hints.items():
            if name.startswith("_") and self.is_model:
                continue
            if name.startswith(HIDDEN_PREFIX):
                raise GraphValidationError(
                    f"state key {name!r} of {schema.__name__}: keys starting with "
                    f"{HIDDEN_PREFIX!r} are reserved for the engine; rename it"
                )
            reducer: Reducer | None = None
            base = ann
            if get_origin(ann) is typing.Annotated:
                base, *meta = get_args(ann)
                for m in meta:
                    if callable(m) and not isinstance(m, type):
                        reducer = m
                        check_reducer(schema, name, m)
            self.channels[name] = Channel(
                name=name,
                annotation=base,
                reducer=reducer,
                default=self._default_factory(name, base, reducer),
                append_only=reducer in APPEND_ONLY or reducer is operator.add,
            )
        self.keys = frozenset(self.channels)
        rules = ModelRules.of(schema, self.channels) if self.is_model else ModelRules()
        self._own_validators = rules.validated  # (model_update: validated already)
        self._required, self._aliases = rules.required, rules.aliases
        self._validate_default = rules.validate_default
        self._writes: dict[str, _Check] = {}
        self._loads: dict[str, _Check] = {}
        register_types(hints.values())

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
        """Values of a new thread: the defaults of keys that have one (validated as a write
        where the model says ``validate_default``)."""
        out: dict[str, Any] = {}
        for ch in self.channels.values():
            if ch.default is not None and (self.is_model or ch.reducer is not None):
                out[ch.name] = ch.default()
        if self._validate_default:
            return self.checked_update(out, "input", only=self._validate_default)
        return out

    def check_complete(self, values: Mapping[str, Any], node: str = "input") -> None:
        """Raise ``InvalidUpdateError`` when a new thread's first state lacks a required
        field of a pydantic schema (one without a default), as the model itself would.
        ``node``: what made that state (``input``, ``update_state``, or the path of a
        subgraph node, whose parent's state it is)."""
        missing = [k for k in self._required if k not in values] if self._required else []
        if missing:
            raise incomplete(self.schema, missing, node)

    def view(self, values: Mapping[str, Any]) -> Any:
        """The state object a node sees (a model instance or a dict), without validation."""
        if self.is_model:
            return self.schema.model_construct(**{k: v for k, v in values.items()})
        return dict(values)

    def input_update(self, value: Any) -> dict[str, Any]:
        """Turn a run's input into an update, validating each given key against the schema."""
        if isinstance(value, BaseModel):
            data = self.model_update(value)
        elif isinstance(value, Mapping):
            data = dict(value)
        else:
            raise InvalidUpdateError(
                f"input must be a mapping or a {self.schema.__name__} instance, not "
                f"{type(value).__name__}",
                node="input",
            )
        return self.checked_update(data, "input", from_model=isinstance(value, BaseModel))

    def model_update(self, value: BaseModel) -> dict[str, Any]:
        """The update a model instance stands for (a node's result or an input).

        Every field that was set (given to the constructor or assigned) and every field
        whose value differs from its default: so a value made by a ``default_factory``
        (a generated id) is written, while an untouched default does not overwrite the
        state. A field equal to its default and never set is not written.
        """
        set_fields = value.model_fields_set
        held = value.__dict__
        out: dict[str, Any] = {}
        for name, fld in type(value).model_fields.items():
            if name not in held:  # (an instance of model_construct() without the field)
                continue
            v = held[name]
            if name in set_fields or fld.is_required():
                out[name] = v
                continue
            try:
                same = bool(v == fld.get_default(call_default_factory=True))
            except Exception:  # a value that cannot be compared counts as changed
                same = False
            if not same:
                out[name] = v
        return out

    def checked_update(
        self,
        update: Mapping[str, Any],
        node: str,
        *,
        from_model: bool = False,
        only: frozenset[str] | None = None,
    ) -> dict[str, Any]:
        """``update`` with its keys checked (``check_keys``) and, for a pydantic schema, each
        value validated and coerced for its key (``InvalidUpdateError`` naming ``node``).
        ``from_model``: the update of a model instance (``model_update``), whose values
        of keys with validators were validated when it was made (not run twice); ``only``:
        the keys to validate (the others are taken as they are)."""
        if not self.is_model:
            self.check_keys(update, node)
            return update if type(update) is dict else dict(update)
        checks = self._writes
        if from_model or only is not None:  # (apart: the loop below is every write's)
            skip = self._own_validators if from_model else frozenset()
            kept = {
                k: v for k, v in update.items() if k in skip or (only is not None and k not in only)
            }
            rest = {k: v for k, v in update.items() if k not in kept}
            return {**kept, **self.checked_update(rest, node)} if rest else kept
        out: dict[str, Any] = {}
        for k, v in update.items():
            check = checks.get(k)
            if check is None:
                k = self._aliases.get(k, k)
                check = checks.get(k) or self._write_check(k, node)
            out[k] = v if type(v) is check.fast else self._validated(check, k, v, node)
        return out

    def checked_writes(self, writes: Iterable[tuple[str, Any]], node: str) -> list[tuple[str, Any]]:
        """``checked_update`` for a list of writes, which may repeat a key."""
        pairs = list(writes)
        if not self.is_model:
            self.check_keys(dict(pairs), node)
            return pairs
        checks = self._writes
        out: list[tuple[str, Any]] = []
        for k, v in pairs:
            check = checks.get(k)
            if check is None:
                k = self._aliases.get(k, k)
                check = checks.get(k) or self._write_check(k, node)
            out.append((k, v if type(v) is check.fast else self._validated(check, k, v, node)))
        return out

    @staticmethod
    def _validated(check: _Check, key: str, value: Any, node: str) -> Any:
        if check.validate is None:
            return value
        try:
            return check.validate(value)
        except ValidationError as e:
            problem = details(e)
        except Exception as e:  # a field validator that raised something else
            problem = f"its validator raised {type(e).__name__}: {e}"
        who = {"input": "the input", "update_state": "update_state"}.get(node, f"node {node!r}")
        raise InvalidUpdateError(
            f"{who} wrote {type(value).__name__} {short(value)} to state key {key!r}, "
            f"which takes {check.expected}: {problem}",
            node=node,
            key=key,
        )

    def check_loaded(
        self, values: Mapping[str, Any], thread_id: str, checkpoint_id: str | None = None
    ) -> None:
        """Raise ``CorruptCheckpointError`` naming the thread and key when a value loaded
        from a store does not fit a pydantic schema (a damaged record, or a state another
        graph wrote); a TypedDict schema's values are not checked (writes are not either).

        A stored value fits when validating it gives it back unchanged: every value this
        engine stores is the result of such a validation. Keys the schema does not have (a
        key removed from the schema, the engine's own) are not checked.
        """
        if not self.is_model:
            return
        for key, value in values.items():
            if key not in self.channels:
                continue
            check = self._loads.get(key) or self._load_check(key)
            if check.validate is None or type(value) is check.fast:
                continue
            try:
                ok = check.validate(value) == value
                problem = "" if ok else "; validating it changes it"
            except ValidationError as e:
                ok, problem = False, f": {details(e)}"
            except Exception as e:  # a value that cannot be compared or validated
                ok, problem = False, f": {type(e).__name__}: {e}"
            if not ok:
                raise CorruptCheckpointError(
                    f"thread {thread_id!r}: the stored value of state key {key!r} "
                    f"({type(value).__name__} {short(value)}) does not fit "
                    f"{self.schema.__name__}, which takes {check.expected}{problem}; the "
                    "record is damaged or was written by a graph with another state schema",
                    thread_id=thread_id,
                    checkpoint_id=checkpoint_id,
                )

    # -- validators, built on first use (building one costs far more than using it) --------
    def _adapter(
        self, key: str, tp: Any, whole_field: bool, validators: Sequence[Any] = ()
    ) -> TypeAdapter[Any]:
        """A validator of ``tp`` under the schema's config, with the field's constraints
        (``Field(gt=0)``, ``Annotated`` metadata) when ``tp`` is the field's own type, then
        ``validators`` (the field's ``@field_validator`` functions)."""
        fld = self.schema.model_fields.get(key)
        meta = [*(fld.metadata if whole_field and fld is not None else ()), *validators]
        if meta:
            tp = typing.Annotated[tp, *meta]
        try:
            return TypeAdapter(tp, config=self.schema.model_config)
        except PydanticUserError:  # a type with its own config (a model) keeps it
            return TypeAdapter(tp)

    def _write_check(self, key: str, node: str) -> _Check:
        ch = self.channels.get(key)
        if ch is None:
            raise self._unknown(key, node)
        tp, whole = ch.annotation, True
        if ch.reducer is append:
            item = list_item(tp)
            if item is None:
                check = _Check(None, None, "")
            else:
                one = self._adapter(key, item, False).validate_python
                many = self._adapter(key, list[item], False).validate_python  # type: ignore[valid-type]

                def items(v: Any) -> Any:
                    return many(v) if isinstance(v, list | tuple) else one(v)

                name = type_name(item)
                check = _Check(items, fast_type(item), f"{name} or a list of {name} (appended)")
            self._writes[key] = check
            return check
        if ch.reducer is not None and ch.reducer is not operator.add and ch.reducer is not merge:
            tp, whole = update_type(ch.reducer), False
        own = field_validators(self.schema, key) if ch.reducer is None else []
        check = self._plain_check(key, tp, whole, own)
        self._writes[key] = check
        return check

    def _load_check(self, key: str) -> _Check:
        """How a stored value of ``key`` is checked: validating it must give it back. Not
        for a key with validator functions (``@field_validator``, ``AfterValidator``...),
        which may change a valid value again or give one of another type; the store's
        checksums still tell damage."""
        if has_validators(self.schema, key):
            check = _Check(None, None, "")
        else:
            check = self._plain_check(key, self.channels[key].annotation, True)
        self._loads[key] = check
        return check

    def _plain_check(
        self, key: str, tp: Any, whole: bool, validators: Sequence[Any] = ()
    ) -> _Check:
        if tp is None or tp is Any or has_typevar(tp):
            if not validators:
                return _Check(None, None, "")
            tp = Any
        try:
            adapter = self._adapter(key, tp, whole, validators)
        except Exception:  # a type pydantic cannot validate (then it is not validated)
            return _Check(None, None, "")
        fld = self.schema.model_fields.get(key)
        constrained = bool(validators) or (whole and fld is not None and bool(fld.metadata))
        return _Check(
            adapter.validate_python, None if constrained else fast_type(tp), type_name(tp)
        )

    def check_keys(self, update: Mapping[str, Any], node: str) -> None:
        """Raise ``InvalidUpdateError`` naming the node and key for keys not in the schema."""
        for k in update:
            if k not in self.channels:
                raise self._unknown(k, node)

    def _unknown(self, key: str, node: str) -> InvalidUpdateError:
        return InvalidUpdateError(
            f"node {node!r} wrote unknown state key {key!r}; "
            f"{self.schema.__name__} has {sorted(self.channels)}",
            node=node,
            key=key,
        )


MISSING = _MISSING
