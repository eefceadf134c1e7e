"""Decoding: ``loads``, reviving tagged values, time zones from ``zoneinfo.TZPATH``."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import msgpack

from checkpoints.serde.registry import (
    CODE_BIGINT,
    CODE_DATACLASS,
    CODE_DATE,
    CODE_DATETIME,
    CODE_DECIMAL,
    CODE_ENUM,
    CODE_FROZENSET,
    CODE_MODEL,
    CODE_SET,
    CODE_TIME,
    CODE_TIMEDELTA,
    CODE_TUPLE,
    CODE_UUID,
    TAGS,
    DecodeError,
    by_class,
    by_name,
    zone_file,
    zones,
)


class _Pending(threading.local):
    tags = 0  # tags decoded but not yet consumed by _list_hook, in this thread


_pending = _Pending()


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


# -- decoding -------------------------------------------------------------------------------


def _ext_hook(code: int, data: bytes) -> object:
    if code in TAGS and not data:
        _pending.tags += 1
        return TAGS[code]  # _list_hook revives the [tag, payload] pair holding it
    if code == CODE_BIGINT:
        return int.from_bytes(data, "big", signed=True)
    if code == CODE_UUID:
        return UUID(bytes=data)
    if code == CODE_DECIMAL:
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
    cls = by_name.get(name) if isinstance(name, str) else None
    if cls is None:
        raise DecodeError(
            f"stored type {name!r:.200} is not registered: call checkpoints.serde.register on it "
            "before loading"
        )
    if by_class[cls][1] != code:
        raise DecodeError(f"stored type {name!r} is no longer the kind it was stored as")
    return cls


def _revive_clock(kind: type[datetime] | type[time], payload: list[Any]) -> object:
    *parts, fold, tz = payload
    if type(tz) is list and 1 <= len(tz) <= 2:
        tz = timezone(timedelta(microseconds=tz[0]), *tz[1:])
    elif tz is not None:
        tz = _zone(tz)
    return kind(*parts).replace(tzinfo=tz, fold=fold)


def _zone(key: object) -> ZoneInfo:
    """The zone of a stored key; a key not in ``zoneinfo.TZPATH`` is a DecodeError."""
    tz = zones.get(key) if type(key) is str else None
    if tz is None:
        if type(key) is not str or zone_file(key) is None:
            raise DecodeError(
                f"stored time zone {key!r:.100} is not in this system's time zone database "
                "(zoneinfo.TZPATH)"
            )
        tz = zones[key] = ZoneInfo(key)  # reads that file: nothing is imported or run
    return tz


def _revive_model(payload: list[Any]) -> object:
    name, fields, extra, fields_set = payload
    return _lookup(name, CODE_MODEL).model_construct(set(fields_set), **fields, **(extra or {}))


def _revive_dataclass(payload: list[Any]) -> object:
    name, values = payload
    cls = _lookup(name, CODE_DATACLASS)
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
    return _lookup(name, CODE_ENUM)(value)


_REVIVERS: dict[int, Callable[[list[Any]], object]] = {
    CODE_TUPLE: tuple,
    CODE_SET: set,
    CODE_FROZENSET: frozenset,
    CODE_DATETIME: lambda p: _revive_clock(datetime, p),
    CODE_DATE: lambda p: date(*p),
    CODE_TIME: lambda p: _revive_clock(time, p),
    CODE_TIMEDELTA: lambda p: timedelta(*p),
    CODE_ENUM: _revive_enum,
    CODE_MODEL: _revive_model,
    CODE_DATACLASS: _revive_dataclass,
}
_SIZES = {
    CODE_DATETIME: 9,
    CODE_DATE: 3,
    CODE_TIME: 6,
    CODE_TIMEDELTA: 3,
    CODE_ENUM: 2,
    CODE_MODEL: 4,
    CODE_DATACLASS: 2,
}
