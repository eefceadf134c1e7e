"""Safe msgpack serialization of checkpoint values (DESIGN.md promises 8 and 10).

Plain data (None, bool, int, float, str, bytes, list, dict) is packed and unpacked by
msgpack's C code without per-item Python work. Other supported values reach the ``default``
hook, which turns them into msgpack extension types (code: type, payload):

- Scalars are one extension whose data is raw bytes. 1: int beyond 64 bits (signed
  big-endian two's complement); 2: UUID (16 bytes); 3: Decimal (``str(value)``, ASCII).
- Structured values are a 2-item array ``[tag, payload]``, where the tag is an extension
  with empty data and the payload a list packed inline by msgpack. 10: tuple, 11: set,
  12: frozenset (payload: the items); 13: datetime ``[year, month, day, hour, minute,
  second, microsecond, fold, tz]``; 14: date ``[year, month, day]``; 15: time ``[hour,
  minute, second, microsecond, fold, tz]``; 16: timedelta ``[days, seconds,
  microseconds]``; 20: Enum ``[name, value]``; 21: pydantic model ``[name, fields,
  extras or nil, sorted fields set]``; 22: dataclass ``[name, fields]``. ``tz`` is nil, a
  ``zoneinfo`` key, or ``[offset in microseconds]`` / ``[offset, name]`` for a
  ``datetime.timezone``.

Inline payloads keep all nesting inside msgpack's own bounded, iterative machinery: no
Python recursion, so deep or hostile data cannot overflow the C stack. Codes are stored
forever: never reuse or renumber them.

What :func:`dumps` accepts, :func:`loads` gives back equal and of the same types, with one
exception: ``bytearray`` and ``memoryview`` come back as ``bytes`` (equal; telling them
apart would cost a Python walk of every value). msgpack packs its own ``ExtType`` and
``Timestamp`` without asking the hook; they would come back as another value (a list
shaped like a tag as a tuple, code 1 as an int) or not at all, so :func:`dumps` refuses
them: an extension header the hook did not make shows in the output (see
``_check_extensions``), at the cost of a byte scan of the output.

Loading never imports, unpickles or evaluates anything: a class is revived only when it was
passed to :func:`register` under the stored name, and a ``zoneinfo`` key only when its file
is in ``zoneinfo.TZPATH`` (``ZoneInfo`` would otherwise import the ``tzdata`` package), so
:func:`dumps` refuses zones found elsewhere and :func:`loads` reports an unknown key as a
:class:`DecodeError`. Registered objects are restored as they
were, without re-running validators or ``__init__`` (they need not be idempotent): models
by ``model_construct`` (fields, extras, fields set; private attributes get their defaults),
dataclasses by setting their fields on a new instance (missing fields get their defaults).
"""

from __future__ import annotations

import dataclasses
import enum
import os
import threading
import zlib
import zoneinfo
from collections.abc import Callable, Sequence
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, TypeVar, overload
from uuid import UUID
from zoneinfo import ZoneInfo

import msgpack
from pydantic import BaseModel

from checkpoints.errors import CorruptCheckpointError, SerializationError

__all__ = [
    "DecodeError",
    "checksum",
    "dumps",
    "is_registered",
    "loads",
    "register",
    "registered_name",
]

T = TypeVar("T", bound=type)

_BIGINT, _UUID, _DECIMAL = 1, 2, 3
_TUPLE, _SET, _FROZENSET, _DATETIME, _DATE, _TIME, _TIMEDELTA = range(10, 17)
_ENUM, _MODEL, _DATACLASS = 20, 21, 22
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


class _Pending(threading.local):
    tags = 0  # tags decoded but not yet consumed by _list_hook, in this thread


_by_name: dict[str, type] = {}
_by_class: dict[type, tuple[str, int]] = {}
_registry_lock = threading.Lock()
_packers: list[_Encoder] = []  # idle encoders; list.pop/append are atomic
_row_packer = msgpack.Packer(use_bin_type=True)  # for checksum()
_pending = _Pending()


@overload
def register(cls: T, *, name: str | None = None) -> T: ...
@overload
def register(cls: None = None, *, name: str | None = None) -> Callable[[T], T]: ...
def register(cls: T | None = None, *, name: str | None = None) -> T | Callable[[T], T]:
    """Allow instances of an Enum, pydantic model or dataclass to be stored and revived.

    Usable as ``@register`` or ``@register(name="app.Invoice")``. Stored values refer to
    the class by name: give a stable name when the class may move.

    Args:
        cls: the class to register.
        name: the name stored with its instances; defaults to ``module.qualname``.

    Returns:
        ``cls`` itself (a decorator when ``cls`` is omitted).

    Raises:
        ValueError: the name belongs to another class, or ``cls`` has another name.
        TypeError: ``cls`` is not an Enum subclass, a pydantic model or a dataclass.
    """
    if cls is None:
        return lambda c: register(c, name=name)
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        code = _ENUM
    elif isinstance(cls, type) and issubclass(cls, BaseModel):
        code = _MODEL
    elif isinstance(cls, type) and dataclasses.is_dataclass(cls):
        code = _DATACLASS
    else:
        raise TypeError(f"cannot register {cls!r}: not an Enum, pydantic model or dataclass")
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
        raise KeyError(f"{cls!r} is not registered with {__name__}.register") from None


def dumps(value: object, *, key: str | None = None) -> bytes:
    """Serialize ``value`` to bytes that :func:`loads` turns back into an equal value.

    Args:
        value: plain data, the types listed in the module docstring, registered classes.
        key: the state key or record field holding ``value``, named in errors.

    Returns:
        The msgpack encoding.

    Raises:
        SerializationError: ``value`` contains something that cannot be stored; the message
            names the key, the path inside ``value`` and the offending type.
    """
    try:
        enc = _packers.pop()
    except IndexError:
        enc = _Encoder()
    enc.emitted = 0
    cause: Exception | None = None
    try:
        out: bytes = enc.packer.pack(value)
        # Bytes that may start msgpack's own extension values (see _EXT_HEADERS).
        if len(out) < _SHORT:
            marks = len(out) - len(out.translate(None, _EXT_HEADER_BYTES))
        else:
            marks = sum(out.count(m) for m in _EXT_HEADERS if m in out)
        if marks != enc.emitted:
            _check_extensions(value, out, enc.emitted)
    except _Unstorable as exc:
        bad, hint = exc.value, exc.hint
    except UnicodeEncodeError as exc:
        bad, hint = exc.object, "it contains unpaired surrogates, which UTF-8 cannot encode"
    except ValueError as exc:  # msgpack's nesting limit (511 levels), or a 4 GiB item
        bad, hint = value, f"{exc} (is it nested too deeply, or does it contain itself?)"
    except Exception as exc:
        bad, hint, cause = value, f"{type(exc).__name__}: {exc}", exc
    else:
        if len(out) <= _POOL_KEEP_BYTES:
            _packers.append(enc)  # on error it is dropped: its state is unknown
        return out
    type_name = type(bad).__qualname__
    try:
        path = _locate(value, bad, set()) if bad is not value else ""
    except RecursionError:
        path = ""
    where = key + path if key is not None else path.removeprefix(".")
    at = f" at key {where!r}" if key is not None else (f" at {where!r}" if where else "")
    message = f"cannot store value of type {type_name!r}{at}: {hint}"
    raise SerializationError(message, key=key, type_name=type_name) from cause


def checksum(values: Sequence[object]) -> int:
    """CRC-32 of a stored row's column values (None, int, float, str, bytes), types and order
    included: a value of another type (the text ``"5"`` for the integer 5, NULL for an empty
    string), or two values swapped, give another checksum.

    Raises:
        TypeError: a value is not one of those types.
    """
    # One packer for all threads: packing plain values calls no Python code, so no other
    # thread runs inside pack() (the GIL is held throughout).
    return zlib.crc32(_row_packer.pack(values))


def loads(data: bytes) -> object:
    """Revive a value written by :func:`dumps`.

    Raises:
        DecodeError: ``data`` is not a complete value written by :func:`dumps`, or it names
            a type that is not registered in this process.
    """
    before = _pending.tags
    try:
        value = msgpack.unpackb(
            data, ext_hook=_ext_hook, list_hook=_list_hook, raw=False, strict_map_key=False
        )
    except Exception as exc:  # msgpack raises many types (ValueError, ExtraData, ...)
        _pending.tags = before
        if isinstance(exc, DecodeError):
            raise
        raise DecodeError(f"cannot decode stored value: {type(exc).__name__}: {exc}") from exc
    if _pending.tags != before:
        _pending.tags = before
        raise DecodeError("cannot decode stored value: a type tag is out of place")
    return value


# -- encoding -------------------------------------------------------------------------------


_TAGS = {code: msgpack.ExtType(code, b"") for code in (*range(10, 17), 20, 21, 22)}


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
        if state not in _zones and _zone_file(state) is None:
            raise _Unstorable(
                v,
                f"its time zone {state!r} is not in the system time zone database "
                "(zoneinfo.TZPATH), where loading looks zones up (it imports nothing, such "
                "as the tzdata package): use a zone found there, or a datetime.timezone",
            )
    elif tz is not None:
        hint = "use a datetime.timezone or zoneinfo.ZoneInfo time zone"
        raise _Unstorable(v, f"its tzinfo {type(tz).__qualname__!r} cannot be stored; {hint}")
    return [v.hour, v.minute, v.second, v.microsecond, v.fold, state]


_ENCODERS: dict[type, tuple[int, Callable[[Any], list[Any]]]] = {
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
    state = obj.__dict__  # a model's field values (and any cached properties)
    fields = {f: state[f] for f in type(obj).model_fields if f in state}
    return [name, fields, obj.__pydantic_extra__, sorted(obj.model_fields_set)]


class _Encoder:
    """A packer whose ``default`` counts the extension values it emits in one ``dumps``."""

    __slots__ = ("emitted", "packer")

    def __init__(self) -> None:
        self.emitted = 0
        self.packer = msgpack.Packer(default=self.default, use_bin_type=True, strict_types=True)

    def default(self, obj: Any) -> object:
        """Encode a value msgpack does not pack natively (called from msgpack's C code).

        Every value returned holds exactly one extension (a tag or a scalar): ``dumps``
        compares their number with the extension headers in its output.
        """
        self.emitted += 1
        cls = type(obj)
        if cls in _ENCODERS:
            code, encode = _ENCODERS[cls]
            return [_TAGS[code], encode(obj)]
        if cls in _by_class:
            name, code = _by_class[cls]
            return [_TAGS[code], _registered_state(obj, name, code)]
        if cls is int:  # only ints outside the 64-bit range get here
            size = (obj.bit_length() + 8) // 8
            return msgpack.ExtType(_BIGINT, obj.to_bytes(size, "big", signed=True))
        if cls is UUID:
            return msgpack.ExtType(_UUID, obj.bytes)
        if cls is Decimal:
            return msgpack.ExtType(_DECIMAL, str(obj).encode("ascii"))
        if isinstance(obj, enum.Enum | BaseModel) or dataclasses.is_dataclass(obj):
            hint = f"register it with {__name__}.register or convert it to plain data"
            raise _Unstorable(obj, hint)
        raise _Unstorable(
            obj, "convert it to plain data, or to a registered model, dataclass or enum"
        )


# The first byte of each msgpack extension header (fixext 1-16, ext 8/16/32). msgpack packs
# its own ExtType and Timestamp natively, never asking ``default``: those would come back as
# another value (or not at all), so ``dumps`` refuses them. Each extension ``default`` made
# starts with one of these bytes; when the output holds exactly that many, there is no other.
_EXT_HEADERS = (b"\xc7", b"\xc8", b"\xc9", b"\xd4", b"\xd5", b"\xd6", b"\xd7", b"\xd8")
_EXT_HEADER_BYTES = b"".join(_EXT_HEADERS)
_TIMESTAMP_HEADERS = (b"\xd6\xff", b"\xd7\xff", b"\xc7\x0c\xff")  # msgpack's code -1
_SHORT = 512  # below this, one translate() counts faster than eight scans


def _check_extensions(value: object, out: bytes, emitted: int) -> None:
    """Raise ``_Unstorable`` if ``out`` holds extension values ``default`` did not make.

    Runs when marker bytes outnumber the extensions made: they are usually data (in strings,
    numbers, bytes), so the output is parsed (in C, counting extensions) to tell.
    """
    count = [0]

    def ext(code: int, data: bytes) -> None:
        count[0] += 1

    try:
        try:
            msgpack.unpackb(out, ext_hook=ext, raw=True, strict_map_key=False)
        except TypeError:  # a key holding a map or list (a registered object): count again
            count[0] = 0
            msgpack.unpackb(
                out, ext_hook=ext, raw=True, use_list=False, object_pairs_hook=tuple,
                strict_map_key=False,
            )  # fmt: skip
    except Exception as exc:
        raise _Unstorable(
            value, f"it could not be read back ({type(exc).__name__}: {exc})"
        ) from exc
    stamps = any(t in out for t in _TIMESTAMP_HEADERS)  # (not seen by ext_hook)
    if count[0] == emitted and not stamps:
        return
    bad = _find_extension(value)
    if bad is not None:
        if type(bad) is msgpack.Timestamp:
            raise _Unstorable(bad, "a msgpack Timestamp is not storable: use a datetime")
        raise _Unstorable(
            bad, "a msgpack extension value is not storable (it would be read back as another "
            "value, or not at all): convert it to plain data",
        )  # fmt: skip
    if count[0] != emitted:
        raise _Unstorable(value, "it holds an extension value that would not be read back")


def _find_extension(value: object) -> Any:
    """The first msgpack ExtType or Timestamp inside ``value`` (None if there is none)."""
    stack: list[Any] = [value]
    seen: dict[int, object] = {}  # (holds what it saw: ids of the states built are not reused)
    while stack:
        node = stack.pop()
        cls = type(node)
        if cls is msgpack.ExtType or cls is msgpack.Timestamp:
            return node
        if id(node) in seen:
            continue
        seen[id(node)] = node
        if cls is list or cls is tuple or cls is set or cls is frozenset:
            stack.extend(reversed(list(node)))
        elif cls is dict:
            for k, v in reversed(list(node.items())):
                stack += (v, k)
        elif cls in _by_class:
            state = _registered_state(node, *_by_class[cls])
            stack.extend(reversed(state[1:]))
    return None


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


def _ext_hook(code: int, data: bytes) -> object:
    if code in _TAGS and not data:
        _pending.tags += 1
        return _TAGS[code]  # _list_hook revives the [tag, payload] pair holding it
    if code == _BIGINT:
        return int.from_bytes(data, "big", signed=True)
    if code == _UUID:
        return UUID(bytes=data)
    if code == _DECIMAL:
        return Decimal(data.decode("ascii"))
    raise DecodeError(f"unknown extension type code {code} ({len(data)} bytes)")


def _list_hook(items: list[Any]) -> object:
    if len(items) != 2 or type(items[0]) is not msgpack.ExtType:
        return items
    _pending.tags -= 1
    code, payload = items[0].code, items[1]
    if type(payload) is not list or _SIZES.get(code, len(payload)) != len(payload):
        raise DecodeError(f"the payload of type tag {code} is malformed: {payload!r:.80}")
    return _REVIVERS[code](payload)


def _lookup(name: object, code: int) -> Any:
    cls = _by_name.get(name) if isinstance(name, str) else None
    if cls is None:
        raise DecodeError(
            f"stored type {name!r:.200} is not registered: call {__name__}.register on it "
            "before loading"
        )
    if _by_class[cls][1] != code:
        raise DecodeError(f"stored type {name!r} is no longer the kind it was stored as")
    return cls


def _revive_clock(kind: type[datetime] | type[time], payload: list[Any]) -> object:
    *parts, fold, tz = payload
    if type(tz) is list and 1 <= len(tz) <= 2:
        tz = timezone(timedelta(microseconds=tz[0]), *tz[1:])
    elif tz is not None:
        tz = _zone(tz)
    return kind(*parts).replace(tzinfo=tz, fold=fold)


_zones: dict[str, ZoneInfo] = {}
"""Zones found in ``zoneinfo.TZPATH`` so far, by key (only keys found: a bounded set)."""


def _zone_file(key: str) -> str | None:
    """The file of zone ``key`` in ``zoneinfo.TZPATH``, as ``ZoneInfo(key)`` would find it
    there, or None. ``ZoneInfo`` itself falls back to the ``tzdata`` package, importing it
    (and importlib.resources): loading must not import, so keys are looked up here first."""
    if not key or "\0" in key or os.path.isabs(key) or os.path.normpath(key) != key:
        return None
    if key.startswith(".."):
        return None
    for root in zoneinfo.TZPATH:
        candidate = os.path.join(root, key)
        if os.path.isfile(candidate):
            return candidate
    return None


def _zone(key: object) -> ZoneInfo:
    """The zone of a stored key; a key not in ``zoneinfo.TZPATH`` is a DecodeError."""
    tz = _zones.get(key) if type(key) is str else None
    if tz is None:
        if type(key) is not str or _zone_file(key) is None:
            raise DecodeError(
                f"stored time zone {key!r:.100} is not in this system's time zone database "
                "(zoneinfo.TZPATH)"
            )
        tz = _zones[key] = ZoneInfo(key)  # reads that file: nothing is imported or run
    return tz


def _revive_model(payload: list[Any]) -> object:
    name, fields, extra, fields_set = payload
    return _lookup(name, _MODEL).model_construct(set(fields_set), **fields, **(extra or {}))


def _revive_dataclass(payload: list[Any]) -> object:
    name, values = payload
    cls = _lookup(name, _DATACLASS)
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


def _revive_enum(payload: list[Any]) -> object:
    name, value = payload
    return _lookup(name, _ENUM)(value)


_REVIVERS: dict[int, Callable[[list[Any]], object]] = {
    _TUPLE: tuple,
    _SET: set,
    _FROZENSET: frozenset,
    _DATETIME: lambda p: _revive_clock(datetime, p),
    _DATE: lambda p: date(*p),
    _TIME: lambda p: _revive_clock(time, p),
    _TIMEDELTA: lambda p: timedelta(*p),
    _ENUM: _revive_enum,
    _MODEL: _revive_model,
    _DATACLASS: _revive_dataclass,
}
_SIZES = {_DATETIME: 9, _DATE: 3, _TIME: 6, _TIMEDELTA: 3, _ENUM: 2, _MODEL: 4, _DATACLASS: 2}
