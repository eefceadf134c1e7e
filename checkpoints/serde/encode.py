"""Encoding: ``dumps``, ``checksum``, and finding what cannot be stored."""

from __future__ import annotations

import dataclasses
import enum
import zlib
from collections.abc import Callable, Sequence
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import msgpack

from checkpoints.errors import SerializationError
from checkpoints.serde.registry import (
    CODE_BIGINT,
    CODE_DATACLASS,
    CODE_DATE,
    CODE_DATETIME,
    CODE_DECIMAL,
    CODE_ENUM,
    CODE_FROZENSET,
    CODE_SET,
    CODE_TIME,
    CODE_TIMEDELTA,
    CODE_TUPLE,
    CODE_UUID,
    POOL_KEEP_BYTES,
    TAGS,
    Unstorable,
    by_class,
    is_model_class,
    zone_file,
    zones,
)

_packers: list[_Encoder] = []  # idle encoders; list.pop/append are atomic
_row_packer = msgpack.Packer(use_bin_type=True)  # for checksum()


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
    except Unstorable as exc:
        bad, hint = exc.value, exc.hint
    except UnicodeEncodeError as exc:
        bad, hint = exc.object, "it contains unpaired surrogates, which UTF-8 cannot encode"
    except ValueError as exc:  # msgpack's nesting limit (511 levels), or a 4 GiB item
        bad, hint = value, f"{exc} (is it nested too deeply, or does it contain itself?)"
    except Exception as exc:
        bad, hint, cause = value, f"{type(exc).__name__}: {exc}", exc
    else:
        if len(out) <= POOL_KEEP_BYTES:
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


def checksum_packer() -> Callable[[Sequence[object]], bytes]:
    """What ``checksum`` packs with, for a loop that checks many rows (``zlib.crc32`` of
    its bytes is the checksum); only for the plain values ``checksum`` takes."""
    pack: Callable[[Sequence[object]], bytes] = _row_packer.pack
    return pack


# -- encoding -------------------------------------------------------------------------------


def _clock(v: datetime | time) -> list[object]:
    """Return [hour, minute, second, microsecond, fold, tz] of a datetime or time."""
    tz = v.tzinfo
    state: object = None
    if _is_pydantic_offset(tz):  # (what pydantic makes of "...Z" or "+01:00": a fixed offset)
        assert tz is not None
        offset = tz.utcoffset(None)
        assert offset is not None
        tz = timezone(offset)
    if type(tz) is timezone:
        offset, name = tz.utcoffset(None), tz.tzname(None)
        micros = offset // timedelta(microseconds=1)
        state = [micros] if name == timezone(offset).tzname(None) else [micros, name]
    elif type(tz) is ZoneInfo and tz.key is not None:
        state = tz.key
        if state not in zones and zone_file(state) is None:
            raise Unstorable(
                v,
                f"its time zone {state!r} is not in the system time zone database "
                "(zoneinfo.TZPATH), where loading looks zones up (it imports nothing, such "
                "as the tzdata package): use a zone found there, or a datetime.timezone",
            )
    elif tz is not None:
        hint = "use a datetime.timezone or zoneinfo.ZoneInfo time zone"
        raise Unstorable(v, f"its tzinfo {type(tz).__qualname__!r} cannot be stored; {hint}")
    return [v.hour, v.minute, v.second, v.microsecond, v.fold, state]


def _is_pydantic_offset(tz: object) -> bool:
    """Whether ``tz`` is pydantic's fixed-offset ``TzInfo`` (stored as the
    ``datetime.timezone`` of its offset, which it equals; looked up by name: pydantic is
    not imported here)."""
    cls = type(tz)
    return cls.__name__ == "TzInfo" and cls.__module__.startswith("pydantic_core")


_ENCODERS: dict[type, tuple[int, Callable[[Any], list[Any]]]] = {
    tuple: (CODE_TUPLE, list),
    set: (CODE_SET, list),
    frozenset: (CODE_FROZENSET, list),
    datetime: (CODE_DATETIME, lambda v: [v.year, v.month, v.day, *_clock(v)]),
    date: (CODE_DATE, lambda v: [v.year, v.month, v.day]),
    time: (CODE_TIME, _clock),
    timedelta: (CODE_TIMEDELTA, lambda v: [v.days, v.seconds, v.microseconds]),
}


def _registered_state(obj: Any, name: str, code: int) -> list[Any]:
    if code == CODE_ENUM:
        return [name, obj.value]
    if code == CODE_DATACLASS:
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
            return [TAGS[code], encode(obj)]
        if cls in by_class:
            name, code = by_class[cls]
            return [TAGS[code], _registered_state(obj, name, code)]
        if cls is int:  # only ints outside the 64-bit range get here
            size = (obj.bit_length() + 8) // 8
            return msgpack.ExtType(CODE_BIGINT, obj.to_bytes(size, "big", signed=True))
        if cls is UUID:
            return msgpack.ExtType(CODE_UUID, obj.bytes)
        if cls is Decimal:
            return msgpack.ExtType(CODE_DECIMAL, str(obj).encode("ascii"))
        if isinstance(obj, enum.Enum) or is_model_class(cls) or dataclasses.is_dataclass(obj):
            hint = "register it with checkpoints.serde.register or convert it to plain data"
            raise Unstorable(obj, hint)
        raise Unstorable(
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
    """Raise ``Unstorable`` if ``out`` holds extension values ``default`` did not make.

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
        raise Unstorable(value, f"it could not be read back ({type(exc).__name__}: {exc})") from exc
    stamps = any(t in out for t in _TIMESTAMP_HEADERS)  # (not seen by ext_hook)
    if count[0] == emitted and not stamps:
        return
    bad = _find_extension(value)
    if bad is not None:
        if type(bad) is msgpack.Timestamp:
            raise Unstorable(bad, "a msgpack Timestamp is not storable: use a datetime")
        raise Unstorable(
            bad, "a msgpack extension value is not storable (it would be read back as another "
            "value, or not at all): convert it to plain data",
        )  # fmt: skip
    if count[0] != emitted:
        raise Unstorable(value, "it holds an extension value that would not be read back")


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
        elif cls in by_class:
            state = _registered_state(node, *by_class[cls])
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
    elif cls in by_class:
        state = _registered_state(node, *by_class[cls])
        if by_class[cls][1] == CODE_ENUM:
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
