"""Pieces shared by the property tests (test_property_resume, test_subgraph)."""

from __future__ import annotations

import contextlib
import operator
import threading
import warnings
import zlib
from collections import Counter
from typing import Annotated, Any, TypedDict

from pydantic import BaseModel

from graphflow.reducers import append


def prepare_failure_report() -> None:
    """Let hypothesis report a failing example.

    On a failure its pytest plugin imports its patch writer, which imports libcst, which warns
    (DeprecationWarning from mypy_extensions); with the project's filterwarnings=error that
    turns the failure into an INTERNALERROR. Importing it first, warnings silenced, avoids
    that (only on failure: the import is slow).
    """
    with warnings.catch_warnings(), contextlib.suppress(ImportError):
        warnings.simplefilter("ignore")
        import hypothesis.extra._patching  # noqa: F401


class DictState(TypedDict):
    log: Annotated[list[str], append]
    x: int
    y: int
    total: Annotated[int, operator.add]


class ModelState(BaseModel):
    log: Annotated[list[str], append] = []
    x: int = 0
    y: int = 0
    total: Annotated[int, operator.add] = 0


KEYS = ("log", "x", "y", "total")


def as_dict(state: Any) -> dict[str, Any]:
    if isinstance(state, BaseModel):
        return {k: getattr(state, k) for k in KEYS}
    return {k: state[k] for k in KEYS}


def crc(value: Any) -> int:
    return zlib.crc32(repr(value).encode())


def answer_for(value: dict[str, Any]) -> str:
    """The answer a human gives to an interrupt: a pure function of the pause value."""
    return f"ans:{value['node']}.{value['idx']}.{value['seen'] % 997}"


class Tracker:
    """Every execution: (invoke call, task id, node or dotted path, event, state digest)."""

    def __init__(self) -> None:
        self.call = 0
        self.events: list[tuple[int, str, str, str, int]] = []
        self._lock = threading.Lock()

    def add(self, task_id: str, node: str, event: str, seen: int) -> None:
        with self._lock:
            self.events.append((self.call, task_id, node, event, seen))

    def starts(self) -> Counter[str]:
        return Counter(node for _, _, node, ev, _ in self.events if ev == "start")
