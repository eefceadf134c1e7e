"""Safe msgpack serialization of checkpoint values (DESIGN.md promises 8 and 10).

Plain data (None, bool, int, float, str, bytes, list, dict) is packed by msgpack's C code
without per-item Python work. Every other supported value reaches the ``default`` hook and
becomes a msgpack extension whose payload is itself msgpack written by this module:

====  ===========  ==========================================================
code  type         payload
====  ===========  ==========================================================
1     int          beyond 64 bits: signed big-endian two's complement bytes
2     tuple        list of items
3     set          list of items
4     frozenset    list of items
5     datetime     [year, month, day, hour, minute, second, microsecond, fold, tz]
6     date         [year, month, day]
7     time         [hour, minute, second, microsecond, fold, tz]
8     timedelta    [days, seconds, microseconds]
9     UUID         the 16 raw bytes
10    Decimal      ``str(value)`` as ASCII
11    Enum         [registered name, member value]
12    BaseModel    [registered name, field values, extra values or nil, fields set]
13    dataclass    [registered name, field values]
====  ===========  ==========================================================

``tz`` is nil (naive), a ``zoneinfo`` key, or [offset in microseconds, name] for a
``datetime.timezone`` (the name only when it was not the default one). Codes are stored
forever: never reuse or renumber them. msgpack decodes its own timestamp extension (-1) to
``msgpack.Timestamp``; :func:`dumps` never writes it.

Loading never imports, unpickles or evaluates anything: a class is revived only when it was
passed to :func:`register` under the stored name. Registered objects are restored as they
were, without re-running validation or ``__init__`` (validators need not be idempotent):
pydantic models through ``model_construct`` (fields, extras and fields set; private
attributes take their defaults), dataclasses by setting their fields on a new instance.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, TypeVar, overload
from uuid import UUID
from zoneinfo import ZoneInfo

import msgpack
from pydantic import BaseModel

from checkpoints.errors import CorruptCheckpointError, SerializationError

__all__ = ["DecodeError", "dumps", "is_registered", "loads", "register", "registered_name"]

T = TypeVar("T", bound=type)

_BIGINT, _TUPLE, _SET, _FROZENSET, _DATETIME, _DATE, _TIME, _TIMEDELTA = range(1, 9)
_UUID, _DECIMAL, _ENUM, _MODEL, _DATACLASS = range(9, 14)
_POOL_KEEP_BYTES = 1 << 20  # a packer keeps its largest buffer: drop those grown past 1 MiB


class DecodeError(CorruptCheckpointError):
    """Stored bytes cannot be decoded: garbage, truncated, or naming an unregistered type.

    Backends re-raise it as :class:`~checkpoints.errors.CorruptCheckpointError` naming the
    thread and checkpoint.
    """


class _Unstorable(Exception):
    """Raised inside the packer for a value it cannot store; :func:`dumps` adds the path."""

    def __init__(self, value: object, hint: str) -> None:
        super().__init__(hint)
        self.value, self.hint = value, hint


_by_name: dict[str, type] = {}
_by_class: dict[type, tuple[str, int]] = {}
_registry_lock = threading.Lock()
_packers: list[Any] = []  # idle msgpack.Packer objects; list.pop/append are atomic


@overload
def register(cls: T, *, name: str | None = None) -> T: ...
@overload
def register(cls: None = None, *, name: str | None = None) -> Callable[[T], T]: ...
def register(cls: T | None = None, *, name: str | None = None) -> T | Callable[[T], T]:
    """Allow instances of an Enum, pydantic model or dataclass to be stored and revived.

    Usable as ``@register`` or ``@register(name="app.Invoice")``. Give an explicit, stable
    name when the class may move: stored values refer to it by name.

    Args:
        cls: the class to register.
        name: the name stored with its instances; defaults to ``module.qualname``.

    Returns:
        ``cls`` itself (or a decorator when ``cls`` is omitted).

    Raises:
        ValueError: the name belongs to another class, or ``cls`` has another name.
        TypeError: ``cls`` is not an Enum subclass, a pydantic model or a dataclass.
    """
    if cls is None:
        return lambda c: register(c, name=name)
    if not isinstance(cls, type):
        raise TypeError(f"register expects a class, got {cls!r}")
    if issubclass(cls, enum.Enum):
        code = _ENUM
    elif issubclass(cls, BaseModel):
        code = _MODEL
    elif dataclasses.is_dataclass(cls):
        code = _DATACLASS
    else:
        raise TypeError(
            f"cannot register {cls.__qualname__!r}: only Enum subclasses, pydantic models "
            "and dataclasses can be registered"
        )
    name = name or f"{cls.__module__}.{cls.__qualname__}"
    with _registry_lock:
        if _by_name.get(name, cls) is not cls:
            raise ValueError(f"name {name!r} is already registered for {_by_name[name]!r}")
        if _by_class.get(cls, (name,))[0] != name:
            raise ValueError(f"{cls!r} is already registered as {_by_class[cls][0]!r}")
        _by_name[name] = cls
        _by_class[cls] = (name, code)
    return cls


def is_registered(cls: type) -> bool:
    """Return whether ``cls`` was passed to :func:`register`."""
    return cls in _by_class


def registered_name(cls: type) -> str:
    """Return the name stored with instances of ``cls``.

    Raises:
        KeyError: ``cls`` is not registered.
    """
    try:
        return _by_class[cls][0]
    except KeyError:
        raise KeyError(f"{cls!r} is not registered with checkpoints.serde.register") from None


def dumps(value: object, *, key: str | None = None) -> bytes:
    """Serialize ``value`` to bytes that :func:`loads` turns back into an equal value.

    Args:
        value: plain data, the types in the module docstring, registered classes.
        key: the state key or record field holding ``value``, named in errors.

    Returns:
        The msgpack encoding.

    Raises:
        SerializationError: ``value`` contains something that cannot be stored; the message
            names the key, the path inside ``value`` and the offending type.
    """
    try:
        return _pack(value)
    except _Unstorable as exc:
        bad, hint = exc.value, exc.hint
    except UnicodeEncodeError as exc:
        bad, hint = exc.object, "it contains unpaired surrogates, which UTF-8 cannot encode"
    except (ValueError, RecursionError) as exc:  # msgpack's nesting limit, or Python's
        bad, hint = value, f"it is nested too deeply or contains a reference cycle ({exc})"
    type_name = type(bad).__qualname__
    try:
        path = _locate(value, bad, set()) if bad is not value else ""
    except RecursionError:
        path = ""
    where = key + path if key is not None else path.removeprefix(".")
    at = f" at key {where!r}" if key is not None else (f" at {where!r}" if where else "")
    message = f"cannot store value of type {type_name!r}{at}: {hint}"
    raise SerializationError(message, key=key, type_name=type_name) from None


def loads(data: bytes) -> object:
    """Revive a value written by :func:`dumps`.

    Raises:
        DecodeError: ``data`` is not a complete value written by :func:`dumps`, or it names
            a type that is not registered in this process.
    """
    try:
        return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)
    except DecodeError:
        raise
    except Exception as exc:  # msgpack raises many types (ValueError, ExtraData, ...)
        raise DecodeError(f"cannot decode stored value: {type(exc).__name__}: {exc}") from exc


# -- encoding -------------------------------------------------------------------------------


def _pack(value: object) -> bytes:
    try:
        packer = _packers.pop()
    except IndexError:
        packer = msgpack.Packer(default=_default, use_bin_type=True, strict_types=True)
    out: bytes = packer.pack(value)  # on error the packer is dropped, not pooled
    if len(out) <= _POOL_KEEP_BYTES:
        _packers.append(packer)
    return out


def _clock(v: datetime | time) -> list[object]:
    """Return [hour, minute, second, microsecond, fold, tz] of a datetime or time."""
    tz = v.tzinfo
    state: object = None
    if type(tz) is timezone:
        offset, name = tz.utcoffset(None), tz.tzname(None)
        micros = offset // timedelta(microseconds=1)
        state = [micros] if name == timezone(offset).tzname(None) else [micros, name]
    elif type(tz) is ZoneInfo and tz.key is not None:
        state = tz.key
    elif tz is not None:
        hint = "use a datetime.timezone or zoneinfo.ZoneInfo time zone"
        raise _Unstorable(v, f"its tzinfo {type(tz).__qualname__!r} cannot be stored; {hint}")
    return [v.hour, v.minute, v.second, v.microsecond, v.fold, state]


_ENCODERS: dict[type, tuple[int, Callable[[Any], object]]] = {
    tuple: (_TUPLE, list),
    set: (_SET, list),
    frozenset: (_FROZENSET, list),
    datetime: (_DATETIME, lambda v: [v.year, v.month, v.day, *_clock(v)]),
    date: (_DATE, lambda v: [v.year, v.month, v.day]),
    time: (_TIME, _clock),
    timedelta: (_TIMEDELTA, lambda v: [v.days, v.seconds, v.microseconds]),
}


def _registered_state(obj: Any, name: str, code: int) -> list[Any]:
    if code == _ENUM:
        return [name, obj.value]
    if code == _DATACLASS:
        return [name, {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}]
    state = obj.__dict__  # a model's fields are its __dict__ minus cached properties
    fields = {f: state[f] for f in type(obj).model_fields if f in state}
    return [name, fields, obj.__pydantic_extra__, sorted(obj.model_fields_set)]


def _default(obj: Any) -> msgpack.ExtType:
    """Encode a value msgpack does not pack natively (called from msgpack's C code)."""
    cls = type(obj)
    if cls is int:  # only ints outside the 64-bit range get here
        size = (obj.bit_length() + 8) // 8
        return msgpack.ExtType(_BIGINT, obj.to_bytes(size, "big", signed=True))
    if cls is UUID:
        return msgpack.ExtType(_UUID, obj.bytes)
    if cls is Decimal:
        return msgpack.ExtType(_DECIMAL, str(obj).encode("ascii"))
    if cls in _ENCODERS:
        code, encode = _ENCODERS[cls]
        return msgpack.ExtType(code, _pack(encode(obj)))
    if cls in _by_class:
        name, code = _by_class[cls]
        return msgpack.ExtType(code, _pack(_registered_state(obj, name, code)))
    if isinstance(obj, enum.Enum | BaseModel) or dataclasses.is_dataclass(obj):
        raise _Unstorable(obj, f"register it with {__name__}.register or convert it to plain data")
    raise _Unstorable(obj, "convert it to plain data, or to a registered model, dataclass or enum")


def _locate(node: Any, target: object, seen: set[int]) -> str:
    """Return the path from ``node`` to ``target`` (by identity), or "" if not found.

    Runs only to explain an error, so it favours clarity over speed.
    """
    cls, children = type(node), []
    if id(node) in seen:
        return ""
    seen.add(id(node))
    if cls is list or cls is tuple:
        children = [(f"[{i}]", item) for i, item in enumerate(node)]
    elif cls is set or cls is frozenset:
        children = [("[<member>]", item) for item in node]
    elif cls is dict:
        for k, v in node.items():
            segment = f".{k}" if isinstance(k, str) and k.isidentifier() else f"[{k!r}]"
            children += [("[<key>]", k), (segment, v)]
    elif cls in _by_class:
        state = _registered_state(node, *_by_class[cls])
        if _by_class[cls][1] == _ENUM:
            children = [(".value", state[1])]
        else:  # a dataclass's fields, or a model's fields and extras
            values = {**state[1], **(state[2] if len(state) > 2 and state[2] else {})}
            children = [(f".{f}", v) for f, v in values.items()]
    for segment, child in children:
        if child is target:
            return segment
        found = _locate(child, target, seen)
        if found:
            return segment + found
    return ""


# -- decoding -------------------------------------------------------------------------------


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)


def _items(data: bytes, size: int = -1) -> list[Any]:
    """Decode an extension payload that must be a list (of ``size`` items unless -1)."""
    items = _unpack(data)
    if type(items) is not list or size not in (-1, len(items)):
        raise DecodeError(f"expected a list of {size} items, got {items!r:.80}")
    return items


def _lookup(name: object, code: int) -> Any:
    cls = _by_name.get(name) if isinstance(name, str) else None
    if cls is None:
        raise DecodeError(
            f"stored type {name!r:.200} is not registered: call checkpoints.serde.register "
            "on it before loading"
        )
    if _by_class[cls][1] != code:
        raise DecodeError(f"stored type {name!r} is not of the kind it was stored as")
    return cls


def _revive_clock(data: bytes, kind: type[datetime] | type[time], size: int) -> object:
    *parts, fold, tz = _items(data, size)
    if isinstance(tz, list) and 1 <= len(tz) <= 2:
        tz = timezone(timedelta(microseconds=tz[0]), *tz[1:])
    elif tz is not None:
        tz = ZoneInfo(tz)  # reads a tzdata file: no code is imported or run
    return kind(*parts).replace(tzinfo=tz, fold=fold)


def _revive_registered(data: bytes, code: int) -> object:
    if code == _ENUM:
        name, value = _items(data, 2)
        return _lookup(name, code)(value)
    if code == _MODEL:
        name, fields, extra, fields_set = _items(data, 4)
        return _lookup(name, code).model_construct(set(fields_set), **fields, **(extra or {}))
    name, values = _items(data, 2)
    cls = _lookup(name, code)
    obj = cls.__new__(cls)  # restore the stored state without re-running __init__
    for field in dataclasses.fields(cls):
        if field.name in values:
            value = values[field.name]
        elif field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            raise DecodeError(f"stored {name!r} has no value for field {field.name!r}")
        object.__setattr__(obj, field.name, value)  # also works for frozen dataclasses
    return obj


_DECODERS: dict[int, Callable[[bytes], object]] = {
    _BIGINT: lambda data: int.from_bytes(data, "big", signed=True),
    _TUPLE: lambda data: tuple(_items(data)),
    _SET: lambda data: set(_items(data)),
    _FROZENSET: lambda data: frozenset(_items(data)),
    _DATETIME: lambda data: _revive_clock(data, datetime, 9),
    _DATE: lambda data: date(*_items(data, 3)),
    _TIME: lambda data: _revive_clock(data, time, 6),
    _TIMEDELTA: lambda data: timedelta(*_items(data, 3)),
    _UUID: lambda data: UUID(bytes=data),
    _DECIMAL: lambda data: Decimal(data.decode("ascii")),
    _ENUM: lambda data: _revive_registered(data, _ENUM),
    _MODEL: lambda data: _revive_registered(data, _MODEL),
    _DATACLASS: lambda data: _revive_registered(data, _DATACLASS),
}


def _ext_hook(code: int, data: bytes) -> object:
    if code not in _DECODERS:
        raise DecodeError(f"unknown extension type code {code}")
    return _DECODERS[code](data)
