"""The registry of classes ``dumps`` may store, and the extension type codes."""

from __future__ import annotations

import dataclasses
import enum
import os
import sys
import threading
import zoneinfo
from collections.abc import Callable
from typing import TypeVar, overload
from zoneinfo import ZoneInfo

import msgpack

from checkpoints.errors import CorruptCheckpointError

T = TypeVar("T", bound=type)

CODE_BIGINT, CODE_UUID, CODE_DECIMAL = 1, 2, 3
CODE_TUPLE, CODE_SET, CODE_FROZENSET, CODE_DATETIME, CODE_DATE, CODE_TIME, CODE_TIMEDELTA = range(
    10, 17
)
CODE_ENUM, CODE_MODEL, CODE_DATACLASS = 20, 21, 22
TAGS = {code: msgpack.ExtType(code, b"") for code in (*range(10, 17), 20, 21, 22)}
POOL_KEEP_BYTES = 1 << 20  # a packer keeps its largest buffer: drop those grown past 1 MiB


class DecodeError(CorruptCheckpointError):
    """Stored bytes cannot be decoded: garbage, truncated, or naming an unregistered type.

    Backends re-raise it as :class:`~checkpoints.errors.CorruptCheckpointError` naming the
    thread and checkpoint.
    """


class Unstorable(Exception):
    """Raised inside the packer for a value it cannot store; :func:`dumps` adds the path."""

    def __init__(self, value: object, hint: str) -> None:
        super().__init__(hint)
        self.value, self.hint = value, hint


by_name: dict[str, type] = {}
by_class: dict[type, tuple[str, int]] = {}
registry_lock = threading.Lock()


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
        code = CODE_ENUM
    elif isinstance(cls, type) and is_model_class(cls):
        code = CODE_MODEL
    elif isinstance(cls, type) and dataclasses.is_dataclass(cls):
        code = CODE_DATACLASS
    else:
        raise TypeError(f"cannot register {cls!r}: not an Enum, pydantic model or dataclass")
    name = name or f"{cls.__module__}.{cls.__qualname__}"
    with registry_lock:
        if by_name.get(name, cls) is not cls:
            raise ValueError(f"name {name!r} is already registered for {by_name[name]!r}")
        if by_class.get(cls, (name,))[0] != name:
            raise ValueError(f"{cls!r} is already registered as {by_class[cls][0]!r}")
        by_name[name] = cls
        by_class[cls] = (name, code)
    return cls


def is_model_class(cls: type) -> bool:
    """Whether ``cls`` is a pydantic model, without importing pydantic.

    A model class exists only once ``pydantic.main`` (where ``BaseModel`` is defined) has
    been imported, so it is looked up there: a process that stores no model never pays for
    pydantic (some 40 ms and 45 modules of a new process, such as ``graphflow threads``).
    """
    base = getattr(sys.modules.get("pydantic.main"), "BaseModel", None)
    return base is not None and issubclass(cls, base)


def is_registered(cls: type) -> bool:
    """Return whether ``cls`` was passed to :func:`register`."""
    return cls in by_class


def registered_name(cls: type) -> str:
    """Return the name stored with instances of ``cls``.

    Raises:
        KeyError: ``cls`` is not registered.
    """
    try:
        return by_class[cls][0]
    except KeyError:
        raise KeyError(f"{cls!r} is not registered with checkpoints.serde.register") from None


zones: dict[str, ZoneInfo] = {}
"""Zones found in ``zoneinfo.TZPATH`` so far, by key (only keys found: a bounded set)."""


def zone_file(key: str) -> str | None:
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
