"""The ``--json`` encoder: every value becomes JSON by the documented rules, never a crash."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import BaseModel

from checkpoints.models import DecisionRecord, ThreadId, ThreadInfo
from graphflow.cli.encode import encode, pause, rfc3339
from graphflow.types import (
    Pause,
    RunResult,
    StateSnapshot,
    TaskInfo,
    ToolConfirmationPause,
    ToolConfirmationRequest,
)

AT = datetime(2025, 1, 31, 12, 0, 0, 5, tzinfo=UTC)


class Color(enum.Enum):
    RED = "red"


class Word(str, enum.Enum):  # noqa: UP042 - str() of such a member is not its text
    HI = "hi"


class Item(BaseModel):
    name: str
    when: datetime


class Opaque:
    def __str__(self) -> str:
        return "opaque!"


class Unprintable(BaseModel):
    value: Any

    def model_dump(self, **kwargs: Any) -> Any:
        raise ValueError("cannot dump")

    def __str__(self) -> str:
        return "unprintable"


def test_rfc3339_is_utc_with_z() -> None:
    assert rfc3339(AT) == "2025-01-31T12:00:00.000005Z"
    assert rfc3339(AT.astimezone(timezone(timedelta(hours=2)))) == "2025-01-31T12:00:00.000005Z"
    assert rfc3339(datetime(2025, 1, 31, 12)) == "2025-01-31T12:00:00.000000Z"  # naive: UTC
    assert rfc3339(AT.timestamp()) == "2025-01-31T12:00:00.000005Z"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None), (True, True), (3, 3), (1.5, 1.5), ("é", "é"),
        (math.nan, "nan"), (math.inf, "inf"),
        ((1, [2, (3,)]), [1, [2, [3]]]),
        ({1: "a", None: "b", "k": AT}, {"1": "a", "None": "b", "k": "2025-01-31T12:00:00.000005Z"}),
        ({"b"}, "{'b'}"), (b"\x00x", "b'\\x00x'"), (Color.RED, "Color.RED"), (Word.HI, "hi"),
        (Opaque(), "opaque!"),
        (Item(name="x", when=AT), {"name": "x", "when": "2025-01-31T12:00:00.000005Z"}),
        (Unprintable(value=1), "unprintable"),
    ],
)  # fmt: skip
def test_values(value: Any, expected: Any) -> None:
    got = encode(value)
    assert got == expected
    json.dumps(got, allow_nan=False)  # JSON indeed


def test_a_value_that_contains_itself() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    assert encode(loop) == [1, "<cycle: list>"]
    shared = [1]
    assert encode([shared, shared]) == [[1], [1]]  # the same value twice is no cycle


def test_a_dataclass_of_the_user_is_its_fields() -> None:
    @dataclasses.dataclass
    class Point:
        x: int
        at: datetime

    assert encode(Point(1, AT)) == {"x": 1, "at": "2025-01-31T12:00:00.000005Z"}


REQUEST = ToolConfirmationRequest("delete_file", "call_1", {"path": "/x"}, "sha256:ab", "agent")


def test_a_pause_has_one_shape() -> None:
    tool = ToolConfirmationPause("p1", "tool_confirmation", "agent", {"request": {}}, "t1", "c1",
                                 AT, request=REQUEST)  # fmt: skip
    plain = Pause("p2", "interrupt", "n", {"q": Item(name="x", when=AT)}, "t1", "c1", AT,
                  answered=True, answer="yes", answered_by="bob", answered_at=AT)  # fmt: skip
    keys = ["thread_id", "pause_id", "kind", "node", "checkpoint_id", "created_at", "value",
            "request", "answered", "answer", "answered_by", "answered_at",
            "answer_reason"]  # fmt: skip
    assert list(pause(tool)) == keys and list(encode(plain)) == keys
    assert pause(tool)["request"] == {f.name: encode(getattr(REQUEST, f.name))
                                      for f in dataclasses.fields(REQUEST)}  # fmt: skip
    assert pause(tool)["pause_id"] == "p1" and pause(tool)["answered_at"] is None
    got = encode(plain)
    assert got["request"] is None and got["value"] == {"q": {"name": "x", "when": rfc3339(AT)}}
    assert (got["answer"], got["answered_by"], got["answered_at"]) == ("yes", "bob", rfc3339(AT))


def test_records() -> None:
    info = ThreadInfo("t1", "paused", AT.timestamp(), 2, "files", AT.timestamp())
    assert encode(info) == {
        "thread_id": "t1", "status": "paused", "updated_at": rfc3339(AT), "pending_pauses": 2,
        "graph_name": "files", "created_at": rfc3339(AT),
    }  # fmt: skip
    d = DecisionRecord(ThreadId("t1"), "call_1", "deny", by="bob", reason="no",  # type: ignore[arg-type]
                       created_at=AT.timestamp(), extra={"s": {1}})  # fmt: skip
    got = encode(d)
    assert got["created_at"] == rfc3339(AT) and got["extra"] == {"s": "{1}"}
    assert [f.name for f in dataclasses.fields(d)] == list(got)
    task = TaskInfo("x", "n", "completed", 1, result={"k": Item(name="y", when=AT)})
    snap = StateSnapshot({"a": {1, 2}}, ("n",), (task,), (), 3, "c", None, AT, {"source": "loop"})
    doc = encode(snap)
    assert doc["created_at"] == rfc3339(AT) and doc["next"] == ["n"]
    assert doc["tasks"][0]["result"] == {"k": {"name": "y", "when": rfc3339(AT)}}
    result = RunResult("done", Item(name="z", when=AT), [], "t1", "c", (d,))
    assert encode(result)["state"] == {"name": "z", "when": rfc3339(AT)}
    assert encode(result)["ignored_decisions"] == [got]
