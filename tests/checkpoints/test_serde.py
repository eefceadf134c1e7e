"""Tests of ``checkpoints.serde``: exact round trips, clear errors, safe loading.

Hostile blobs are crafted by patching bytes of valid ones, so that msgpack stays imported
only by ``checkpoints.serde`` itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib.abc
import math
import os
import sys
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, field_validator

from checkpoints import serde
from checkpoints.errors import CorruptCheckpointError, SerializationError
from checkpoints.serde import DecodeError, dumps, loads


@serde.register(name="tests.serde.Color")
class Color(enum.Enum):
    RED = "red"
    GREEN = ("g", 1)


@serde.register(name="tests.serde.Level")
class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@serde.register(name="tests.serde.Perm")
class Perm(enum.Flag):
    R = 1
    W = 2


@serde.register(name="tests.serde.Inner")
class Inner(BaseModel):
    at: datetime
    tags: tuple[str, ...] = ()


@serde.register(name="tests.serde.Outer")
class Outer(BaseModel):
    inner: Inner
    anything: Any = None
    ids: frozenset[uuid.UUID] = frozenset()
    amount: Decimal = Decimal("0")
    color: Color = Color.RED


@serde.register(name="tests.serde.Counted")
class Counted(BaseModel):
    """A model whose validator is not idempotent: reviving must not re-run it."""

    n: int

    @field_validator("n")
    @classmethod
    def bump(cls, v: int) -> int:
        return v + 1


@serde.register(name="tests.serde.Aliased")
class Aliased(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    user_name: str = Field(alias="userName")


@serde.register(name="tests.serde.Point")
@dataclasses.dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: int = 0
    history: list[Point] = dataclasses.field(default_factory=list)
    label: str = dataclasses.field(default="", init=False)


@serde.register(name="tests.serde.Tree")
@dataclasses.dataclass
class Tree:
    children: list[Tree]


class Unregistered(BaseModel):
    a: int = 1


@serde.register(name="tests.serde.Holder")
class Holder(BaseModel):
    x: Any


@dataclasses.dataclass
class PlainDC:
    a: int


class PlainEnum(enum.Enum):
    A = 1


class Opaque:
    pass


@serde.register(name="tests.serde.OpaqueEnum")
class OpaqueEnum(enum.Enum):
    X = Opaque()


class OddZone(tzinfo):
    def utcoffset(self, dt: datetime | None) -> timedelta:
        return timedelta(hours=1)

    def dst(self, dt: datetime | None) -> timedelta:
        return timedelta(0)

    def tzname(self, dt: datetime | None) -> str:
        return "ODD"


def canon(x: Any) -> Any:
    """A form of ``x`` that differs whenever a type, order, fold or zone differs."""
    t = type(x)
    if t is float:
        return t, repr(x)
    if t is Decimal:
        return t, str(x)
    if t in (list, tuple):
        return t, tuple(canon(i) for i in x)
    if t in (set, frozenset):
        return t, frozenset(canon(i) for i in x)
    if t is dict:
        return t, tuple((canon(k), canon(v)) for k, v in x.items())
    if t in (datetime, time):
        zone = (type(x.tzinfo), getattr(x.tzinfo, "key", None), x.utcoffset(), x.tzname())
        return t, x.replace(tzinfo=None), x.fold, zone
    if dataclasses.is_dataclass(x) and not isinstance(x, type):  # its fields, nan included
        return t, tuple((f.name, canon(getattr(x, f.name))) for f in dataclasses.fields(x))
    if isinstance(x, BaseModel):
        return t, tuple((k, canon(getattr(x, k))) for k in type(x).model_fields)
    return t, x


V = TypeVar("V")


def again(value: V) -> V:
    """``value`` stored and loaded back, checked to be of the same type."""
    out = loads(dumps(value))
    assert type(out) is type(value)
    return out


def roundtrip(value: Any) -> Any:
    out = loads(dumps(value))
    assert canon(out) == canon(value)
    return out


PARIS = ZoneInfo("Europe/Paris")
PLAIN_VALUES: list[Any] = [
    None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1,
    10**100, -(10**100), 1.5, -0.0, math.inf, -math.inf, "", "héllo ✓ \U0001f600",
    b"", b"\x00\xff", [], {}, (), (1,), ((1, 2), [3, (4,)]), set(), {1, "a", (2, 3)},
    frozenset(), frozenset({frozenset({1})}), [[[]]],
    {"a": 1, "b": [1, 2], "c": {"d": None}},
    {1: "int", None: "none", (1, "t"): "tuple", frozenset({2}): "fs", b"k": "bytes",
     2.5: "float", False: "bool", date(2020, 1, 1): "date"},
]  # fmt: skip
RICH_VALUES: list[Any] = [
    datetime(2024, 2, 29, 23, 59, 59, 999999),
    datetime(2024, 1, 1, tzinfo=UTC),
    datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=-23, minutes=-59, microseconds=-1))),
    datetime(2024, 5, 5, 12, tzinfo=timezone(timedelta(hours=5, minutes=30), "IST")),
    datetime(2024, 10, 27, 2, 30, fold=1, tzinfo=PARIS),
    datetime(2024, 10, 27, 2, 30, fold=0, tzinfo=PARIS),
    datetime.max, datetime.min, date(2020, 2, 29), date.min, date.max,
    time(), time(23, 59, 59, 999999, tzinfo=timezone(timedelta(seconds=-1))),
    time(1, 2, fold=1), timedelta(), timedelta(days=-3, microseconds=7), timedelta.max,
    uuid.UUID(int=0), uuid.uuid4(), Decimal("1.10"), Decimal("-0"), Decimal("1E+30"),
    Decimal("Infinity"), Decimal(2**100), Color.RED, Color.GREEN, Level.HIGH,
    Perm.R | Perm.W, Perm(0),
]  # fmt: skip


@pytest.mark.parametrize("value", PLAIN_VALUES + RICH_VALUES, ids=repr)
def test_round_trip_is_exact(value: Any) -> None:
    roundtrip(value)
    roundtrip({"k": [value, (value,)]})


def test_nan_and_special_decimals() -> None:
    assert math.isnan(again(math.nan))
    assert str(again(Decimal("NaN"))) == "NaN"
    assert str(again(Decimal("-sNaN"))) == "-sNaN"


def test_bytearray_and_memoryview_come_back_as_bytes() -> None:
    assert loads(dumps(bytearray(b"ab"))) == b"ab"
    assert again([bytearray(b"ab"), memoryview(b"cd")]) == [b"ab", b"cd"]
    assert {type(b) for b in again([bytearray(b"ab"), memoryview(b"cd")])} == {bytes}


def test_dict_order_and_key_types_are_kept() -> None:
    value = {"z": 1, 1: 2, "a": 3, (1,): 4}
    assert list(again(value)) == ["z", 1, "a", (1,)]


def test_enum_members_are_the_same_objects() -> None:
    assert again(Color.GREEN) is Color.GREEN
    assert again(Level.LOW) is Level.LOW
    assert type(again({"l": Level.LOW})["l"]) is Level


def test_pydantic_models_nest_and_keep_types() -> None:
    inner = Inner(at=datetime(2020, 1, 1, tzinfo=PARIS), tags=("a", "b"))
    outer = Outer(
        inner=inner,
        anything=Inner(at=datetime(2021, 1, 1)),  # Any-typed: must not become a dict
        ids=frozenset({uuid.UUID(int=5)}),
        amount=Decimal("9.99"),
        color=Color.GREEN,
    )
    out = again(outer)
    assert out == outer
    assert type(out.anything) is Inner
    assert out.model_fields_set == outer.model_fields_set
    assert out.inner.at.tzinfo is PARIS


def test_models_are_revived_without_re_running_validators() -> None:
    c = Counted(n=1)
    assert c.n == 2
    assert again(c) == c


def test_model_extras_aliases_frozen_and_fields_set() -> None:
    a = Aliased(userName="ann", extra_field=(1, 2))  # type: ignore[call-arg]
    out = again(a)
    assert out == a
    assert out.model_extra == {"extra_field": (1, 2)}
    assert out.model_dump(exclude_unset=True) == a.model_dump(exclude_unset=True)
    assert again(Inner(at=datetime(2020, 1, 1))).model_fields_set == {"at"}


def test_dataclasses_frozen_slots_non_init_and_nested() -> None:
    p = Point(1, 2, [Point(3)])
    object.__setattr__(p, "label", "set after init")
    out = again(p)
    assert out == p
    assert out.label == "set after init"
    assert type(out.history[0]) is Point
    tree = Tree([Tree([]), Tree([Tree([])])])
    assert again(tree) == tree


def test_big_nested_value() -> None:
    value = {
        "messages": [{"role": "user", "text": "x" * 1024, "n": i} for i in range(200)],
        "models": [Outer(inner=Inner(at=datetime.now(UTC))) for _ in range(5)],
        "points": (Point(1), Point(2, 3)),
    }
    assert again(value) == value


plain_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats()
    | st.text()
    | st.binary()
    | st.datetimes(timezones=st.none() | st.just(UTC) | st.timezones())
    | st.datetimes().map(lambda d: d.replace(tzinfo=timezone(timedelta(minutes=d.minute))))
    | st.dates()
    | st.times(timezones=st.none() | st.just(UTC))
    | st.timedeltas()
    | st.uuids()
    | st.decimals(allow_nan=False)
)
hashable: st.SearchStrategy[Any] = st.deferred(
    lambda: plain_leaves | st.lists(plain_leaves, max_size=3).map(tuple) | st.frozensets(hashable)
)
keys = st.deferred(lambda: hashable)  # keeps the repr of plain_data short
plain_data = st.recursive(
    plain_leaves,
    lambda c: (
        st.lists(c, max_size=4)
        | st.lists(c, max_size=4).map(tuple)
        | st.dictionaries(st.text() | keys, c, max_size=4)
        | st.sets(keys, max_size=4)
        | st.frozensets(keys, max_size=4)
    ),
    max_leaves=25,
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plain_data)
def test_property_round_trip(value: Any) -> None:
    roundtrip(value)


# -- errors when storing -------------------------------------------------------------------


def test_unregistered_model_names_key_and_type() -> None:
    with pytest.raises(SerializationError) as info:
        dumps(Unregistered(), key="draft")
    assert str(info.value) == (
        "cannot store value of type 'Unregistered' at key 'draft': register it with "
        "checkpoints.serde.register or convert it to plain data"
    )
    assert info.value.key == "draft"
    assert info.value.type_name == "Unregistered"


def test_nested_path_is_in_the_message() -> None:
    with pytest.raises(SerializationError) as info:
        dumps([1, 2, 3, Holder(x=Unregistered())], key="items")
    assert str(info.value) == (
        "cannot store value of type 'Unregistered' at key 'items[3].x': register it with "
        "checkpoints.serde.register or convert it to plain data"
    )
    with pytest.raises(SerializationError, match=r"at 'a\.b\[1\]\[<member>\]'"):
        dumps({"a": {"b": (0, frozenset({Opaque()}))}})
    with pytest.raises(SerializationError, match=r"at key \"k\['not an id'\]\[1\]\""):
        dumps({"not an id": [Color.RED, PlainEnum.A]}, key="k")
    with pytest.raises(SerializationError, match=r"type 'Opaque' at key 'w\.value'"):
        dumps(OpaqueEnum.X, key="w")
    with pytest.raises(SerializationError, match=r"at key 'k\[<key>\]'"):
        dumps({Opaque(): 1}, key="k")


def _generator() -> Iterator[int]:
    yield 1


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        (object(), "object"),
        (lambda: 1, "function"),
        (_generator(), "generator"),
        (len, "builtin_function_or_method"),
        (Opaque(), "Opaque"),
        (Opaque, "type"),
        (PlainDC(1), "PlainDC"),
        (PlainEnum.A, "PlainEnum"),
        (OrderedDict(a=1), "OrderedDict"),
        (type("MyStr", (str,), {})("x"), "MyStr"),
        (datetime(2020, 1, 1, tzinfo=OddZone()), "datetime"),
        ("\ud800", "str"),
    ],
    ids=repr,
)
def test_unsupported_values_raise_serialization_error(value: object, type_name: str) -> None:
    with pytest.raises(SerializationError) as info:
        dumps({"deep": [value]}, key="state")
    assert info.value.type_name == type_name
    assert info.value.key == "state"
    assert f"value of type {type_name!r} at key 'state.deep[0]'" in str(info.value)
    assert dumps({"ok": 1}) == dumps({"ok": 1})  # the packer pool is still healthy


@pytest.mark.parametrize("text", ["2025-01-01T00:00:00Z", "2025-06-01T12:30:00+01:30"])
def test_a_datetime_pydantic_parsed_from_text_is_stored_with_its_offset(text: str) -> None:
    """pydantic parses "...Z" and "+01:30" to its own fixed-offset ``TzInfo``: stored as the
    ``datetime.timezone`` of that offset, which it equals (it was refused)."""
    from pydantic import TypeAdapter

    parsed = TypeAdapter(datetime).validate_python(text)
    assert type(parsed.tzinfo).__name__ == "TzInfo"
    back = loads(dumps(parsed))
    assert back == parsed and type(back.tzinfo) is timezone
    assert back.utcoffset() == parsed.utcoffset() and back.isoformat() == parsed.isoformat()


def test_cycles_and_excessive_nesting_raise_serialization_error() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(SerializationError, match=r"at key 'c'.*contain itself"):
        dumps(cyclic, key="c")
    deep: Any = ()
    for _ in range(100_000):
        deep = (deep,)
    with pytest.raises(SerializationError, match="nested too deeply"):
        dumps(deep)


# -- errors when loading -------------------------------------------------------------------


def rich_blob() -> bytes:
    value = {
        "plain": PLAIN_VALUES,
        "rich": RICH_VALUES,
        "model": Outer(inner=Inner(at=datetime(2020, 1, 1, tzinfo=PARIS)), anything=(1, {2})),
        "dc": Point(1, 2, [Point(3)]),
        "aliased": Aliased(userName="x", more=[1]),  # type: ignore[call-arg]
    }
    return dumps(value)


def test_truncated_blobs_raise_decode_error_at_every_length() -> None:
    blob = rich_blob()
    for n in range(len(blob)):
        with pytest.raises(DecodeError):
            loads(blob[:n])


@pytest.mark.parametrize(
    "data", [b"", b"\xc1", b"\x91", b"\x01\x02", b"\xdd\xff\xff\xff\xff", "text", None, 3]
)
def test_garbage_raises_decode_error(data: Any) -> None:
    with pytest.raises(DecodeError) as info:
        loads(data)
    assert isinstance(info.value, CorruptCheckpointError)


@settings(deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        loads(data)


@settings(deadline=None, max_examples=300)
@given(st.data())
def test_corrupted_blobs_decode_or_raise_decode_error(data: st.DataObject) -> None:
    blob = bytearray(rich_blob())
    for _ in range(data.draw(st.integers(1, 4))):
        blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(DecodeError):
        loads(bytes(blob))


def test_unknown_extension_code_raises_decode_error() -> None:
    u = uuid.UUID(int=7)
    blob = dumps({"u": u})
    assert b"\xd8\x02" + u.bytes in blob  # fixext 16, code 2 (UUID)
    with pytest.raises(DecodeError, match="unknown extension type code 99"):
        loads(blob.replace(b"\xd8\x02", b"\xd8\x63"))


def test_misplaced_or_malformed_tag_raises_decode_error() -> None:
    blob = dumps((1, 2))
    assert blob == b"\x92\xc7\x00\x0a\x92\x01\x02"  # [tuple tag, [1, 2]]
    with pytest.raises(DecodeError, match="out of place"):
        loads(b"\x93\xc7\x00\x0a\x01\x02")  # [tag, 1, 2]
    with pytest.raises(DecodeError, match="out of place"):
        loads(b"\x81\xa1k\xc7\x00\x0a")  # {"k": tag}
    with pytest.raises(DecodeError, match="malformed"):
        loads(b"\x92\xc7\x00\x0a\x01")  # [tag, 1]
    with pytest.raises(DecodeError, match="malformed"):
        loads(dumps(date(2020, 1, 1)).replace(b"\x93", b"\x92", 1)[:-1])


def fixstr(text: str) -> bytes:
    """The msgpack encoding of a short string (under 32 bytes)."""
    assert len(text.encode()) < 32
    return bytes([0xA0 | len(text.encode())]) + text.encode()


def rename(blob: bytes, old: str, new: str) -> bytes:
    assert blob.count(fixstr(old)) == 1
    return blob.replace(fixstr(old), fixstr(new))


def test_unknown_registered_name_raises_decode_error() -> None:
    blob = dumps(Point(1))
    with pytest.raises(DecodeError, match=r"'tests\.serde\.Nope' is not registered"):
        loads(rename(blob, "tests.serde.Point", "tests.serde.Nope"))


def test_a_name_of_another_kind_raises_decode_error() -> None:
    blob = dumps(Holder(x=1))  # a model, renamed to an enum's name
    with pytest.raises(DecodeError, match="no longer the kind"):
        loads(rename(blob, "tests.serde.Holder", "tests.serde.Color"))


class _ImportSpy(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        self.seen.append(fullname)
        return None


@pytest.mark.parametrize("name", ["os.system", "subprocess.Popen", "nosuchmod.evil.Thing"])
@pytest.mark.parametrize("value", [Color.RED, Holder(x=1), Point(1)], ids=repr)
def test_loads_never_imports_by_name(name: str, value: Any) -> None:
    blob = rename(dumps({"v": value}), serde.registered_name(type(value)), name)
    spy, modules = _ImportSpy(), set(sys.modules)
    sys.meta_path.insert(0, spy)
    try:
        with pytest.raises(DecodeError, match="is not registered"):
            loads(blob)
    finally:
        sys.meta_path.remove(spy)
    assert spy.seen == []
    assert set(sys.modules) == modules


def test_missing_dataclass_fields_get_defaults_and_unknown_ones_are_ignored() -> None:
    blob = dumps(Point(5, 6))
    assert b"\xa1y\x06" in blob
    out = loads(blob.replace(b"\xa1y\x06", b"\xa1q\x06"))  # field "y" renamed to "q"
    assert out == Point(5)
    with pytest.raises(DecodeError, match="no value for field 'x'"):
        loads(blob.replace(b"\xa1x\x05", b"\xa1q\x05"))


def test_hostile_deep_nesting_does_not_crash() -> None:
    deep = b"\x92\xc7\x00\x0a\x91" * 200_000 + b"\x92\xc7\x00\x0a\x90"  # ((((...))))
    errors: list[BaseException] = []

    def load() -> None:
        try:
            loads(deep)
        except BaseException as exc:
            errors.append(exc)

    size = threading.stack_size(256 * 1024)
    try:
        thread = threading.Thread(target=load)
        thread.start()
        thread.join()
    finally:
        threading.stack_size(size)
    assert len(errors) == 1 and isinstance(errors[0], DecodeError)
    assert isinstance(loads(b"\x92\xc7\x00\x0a\x91" * 200 + b"\x92\xc7\x00\x0a\x90"), tuple)


_REENTRANT_BLOB = dumps((1, (2,)))


@serde.register(name="tests.serde.Reentrant")
class Reentrant(BaseModel):
    """Calls loads while it is being revived (model_post_init runs in model_construct)."""

    def model_post_init(self, context: Any) -> None:
        object.__setattr__(self, "loaded", loads(_REENTRANT_BLOB))


def test_nested_loads_inside_a_revived_object() -> None:
    out = loads(dumps([Reentrant(), (3,)]))
    assert out[1] == (3,)  # type: ignore[index]
    assert out[0].loaded == (1, (2,))  # type: ignore[index]


# -- registry ------------------------------------------------------------------------------


def test_register_rules() -> None:
    @dataclasses.dataclass
    class A:
        x: int

    @dataclasses.dataclass
    class B:
        x: int

    assert not serde.is_registered(A)
    assert serde.register(A) is A
    assert serde.register(A) is A  # registering again is fine
    assert serde.is_registered(A)
    assert serde.registered_name(A) == f"{A.__module__}.{A.__qualname__}"
    with pytest.raises(ValueError, match="already registered"):
        serde.register(B, name=serde.registered_name(A))
    with pytest.raises(ValueError, match="already registered as"):
        serde.register(A, name="tests.serde.other-name")
    with pytest.raises(TypeError):
        serde.register(Opaque)
    with pytest.raises(TypeError):
        serde.register(Point(1))  # type: ignore[call-overload]
    with pytest.raises(KeyError):
        serde.registered_name(B)
    assert serde.registered_name(Point) == "tests.serde.Point"


_NO_PYDANTIC_SCRIPT = """
import dataclasses, sys
from datetime import datetime, timezone
from checkpoints import serde
from checkpoints.errors import SerializationError
from checkpoints.models import TaskSpec
value = {"at": datetime(2024, 1, 1, tzinfo=timezone.utc), "spec": TaskSpec("t", "n"), "n": (1,)}
print("plain:", serde.loads(serde.dumps(value)) == value, "pydantic" in sys.modules)
@dataclasses.dataclass
class Point:
    x: int
try:
    serde.dumps(Point(1))
except SerializationError as e:
    print("dataclass:", "register it" in str(e), "pydantic" in sys.modules)
import pydantic
class Late(pydantic.BaseModel):
    x: int = 0
try:
    serde.dumps(Late())
except SerializationError as e:
    print("model:", "register it" in str(e))
serde.register(Late, name="tests.Late")
print("registered:", serde.loads(serde.dumps(Late(x=2))) == Late(x=2))
"""


def test_serde_loads_no_pydantic_and_knows_models_defined_later() -> None:
    """serde looks pydantic models up where pydantic defines them and never imports it
    (~40 ms of every new process that stores no model, ``graphflow threads`` among them);
    a model defined after serde was imported is still refused unregistered, and stored
    once registered. ``TaskSpec`` is registered wherever serde is imported."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _NO_PYDANTIC_SCRIPT], capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == [
        "plain: True False", "dataclass: True False", "model: True", "registered: True",
    ]  # fmt: skip


def test_exported_names() -> None:
    assert serde.__all__ == sorted(serde.__all__)
    assert serde.__all__ == [
        "DecodeError", "checksum", "dumps", "is_registered", "loads", "register",
        "registered_name",
    ]  # fmt: skip
    assert issubclass(DecodeError, CorruptCheckpointError)


def test_threads_share_the_serializer() -> None:
    values = [{"i": i, "t": (i, str(i)), "p": Point(i), "big": "x" * (i * 100)} for i in range(64)]
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda v: loads(dumps(v)), values * 20))
    assert outs == values * 20


# -- values that would not read back as stored ----------------------------------------------


@pytest.mark.parametrize(
    ("value", "type_name", "where"),
    [
        (msgpack.ExtType(42, b"x"), "ExtType", "state"),  # unreadable: unknown code 42
        (msgpack.ExtType(1, b"\x05"), "ExtType", "state"),  # would read back as the int 5
        (msgpack.ExtType(2, bytes(16)), "ExtType", "state"),  # ... as a UUID
        ([msgpack.ExtType(10, b""), [1, 2]], "ExtType", "state[0]"),  # ... as the tuple (1, 2)
        (msgpack.Timestamp(1, 2), "Timestamp", "state"),
        ({"deep": [(1, msgpack.Timestamp(0))]}, "Timestamp", "state.deep[0][1]"),
        (Holder(x={"k": msgpack.ExtType(5, b"")}), "ExtType", "state.x.k"),
        ([Point(1), 2.5, 10**30, uuid.UUID(int=7), msgpack.ExtType(3, b"1")], "ExtType",
         "state[4]"),
    ],
    ids=repr,
)  # fmt: skip
def test_msgpack_extension_values_are_refused_when_written(
    value: Any, type_name: str, where: str
) -> None:
    """msgpack packs its own ExtType and Timestamp without asking: they would come back as
    another value, or make every later read fail. They are refused at write, named."""
    with pytest.raises(SerializationError) as info:
        dumps(value, key="state")
    assert info.value.type_name == type_name and info.value.key == "state"
    assert f"value of type {type_name!r} at key {where!r}" in str(info.value)
    assert dumps({"ok": (1,)}) == dumps({"ok": (1,)})  # the packer pool is still healthy


def test_marker_bytes_in_plain_data_are_not_mistaken_for_extension_values() -> None:
    """Bytes that look like extension headers inside strings, bytes and numbers are data."""
    markers = bytes([0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xFF, 0x0C])
    values = [
        markers, "ǅ Ǉ Ԁ ב ؀ ǿ", 200, 212, 0xC7C8C9D4D5D6D7D8, 1.0000000000000002,
        [(markers, 213), {"k": (b"\xd6\xff", b"\xd7\xff", b"\xc7\x0c\xff")}],
        uuid.UUID(bytes=markers + markers[:6]), Decimal("1." + "7" * 210), 2**64 + 0xD6FF,
    ]  # fmt: skip
    for value in values:
        roundtrip(value)


def test_a_zone_outside_the_system_database_is_refused_when_written() -> None:
    """loads finds zone keys only in zoneinfo.TZPATH (importing nothing): a ZoneInfo whose
    key is not there would be unreadable, so dumps refuses it."""
    with open(os.path.join(_tzpath_root(), "Europe", "Paris"), "rb") as f:
        mars = ZoneInfo.from_file(f, key="Mars/Olympus_Mons")
    with pytest.raises(SerializationError, match=r"'Mars/Olympus_Mons'.*TZPATH") as info:
        dumps({"at": datetime(2024, 1, 1, tzinfo=mars)}, key="when")
    assert info.value.key == "when" and info.value.type_name == "datetime"
    assert again(datetime(2024, 1, 1, tzinfo=PARIS)).tzinfo is PARIS


def _tzpath_root() -> str:
    import zoneinfo

    return next(p for p in zoneinfo.TZPATH if os.path.isfile(os.path.join(p, "Europe", "Paris")))


_NO_IMPORT_SCRIPT = """
import sys
from datetime import datetime
from zoneinfo import ZoneInfo
from checkpoints import serde
blob = serde.dumps(datetime(2024, 1, 1, tzinfo=ZoneInfo("Europe/Paris")))
unknown = blob.replace(b"Europe/Paris", b"Europe/Parix")
before = set(sys.modules)
try:
    serde.loads(unknown)
except serde.DecodeError as e:
    print("error:", e)
else:
    print("error: none")
print("imported:", sorted(set(sys.modules) - before))
ZoneInfo.clear_cache()
before = set(sys.modules)
print("known:", serde.loads(blob).tzinfo)
print("imported:", sorted(set(sys.modules) - before))
"""


def test_loading_an_unknown_zone_key_imports_nothing() -> None:
    """An unknown key is a DecodeError naming it; no module is imported to look for it
    (zoneinfo's fallback would import the tzdata package through importlib.resources)."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _NO_IMPORT_SCRIPT], capture_output=True, text=True, check=True
    )
    lines = done.stdout.splitlines()
    assert lines[0].startswith("error: ") and "'Europe/Parix'" in lines[0], lines
    assert lines[1] == "imported: []", lines
    assert lines[2] == "known: Europe/Paris" and lines[3] == "imported: []", lines


def _values_with_extensions() -> st.SearchStrategy[Any]:
    ext = st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=20))
    stamp = st.builds(msgpack.Timestamp, st.integers(0, 2**33), st.integers(0, 999_999_999))
    registered = st.builds(Point, st.integers(), st.integers()) | st.builds(
        Holder, x=st.none() | st.integers() | ext
    )
    leaves = plain_leaves | ext | stamp | registered | st.sampled_from(RICH_VALUES)
    return st.recursive(
        leaves,
        lambda c: (
            st.lists(c, max_size=4)
            | st.lists(c, max_size=4).map(tuple)
            | st.dictionaries(st.text() | keys, c, max_size=4)
            | st.builds(Holder, x=c)
        ),
        max_leaves=20,
    )


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=300)
@given(_values_with_extensions())
def test_property_what_dumps_accepts_loads_back_identically(value: Any) -> None:
    """For any value dumps accepts, loads gives back an equal value of the same types
    (bytes-like values other than bytes, which come back as bytes, are not generated)."""
    try:
        blob = dumps(value)
    except SerializationError as e:
        assert e.type_name in ("ExtType", "Timestamp"), e
        return
    assert canon(loads(blob)) == canon(value)


def test_checksum_tells_types_order_and_null_apart() -> None:
    row = ("t1", "", 5, 1.5, None, b"\x00")
    assert serde.checksum(row) == serde.checksum(list(row))
    for other in [
        ("t1", "", "5", 1.5, None, b"\x00"), ("t1", "", 5, 1.5, "", b"\x00"),
        ("", "t1", 5, 1.5, None, b"\x00"), ("t1", "", 5, 1.5, None, "\x00"),
        ("t1", "", 5.0, 1.5, None, b"\x00"), ("t1", "", 5, 1.5, None, b"\x01"),
        ("t1", "", 5, 1.5, None),
    ]:  # fmt: skip
        assert serde.checksum(other) != serde.checksum(row), other
    assert 0 <= serde.checksum(row) < 2**32
