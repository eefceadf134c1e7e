"""Pauses: the public ``Pause`` of a stored record, and pause ids (made and parsed here)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from checkpoints.models import AnswerRecord, PauseKind, PauseRecord, to_datetime
from graphflow.types import Pause, ToolConfirmationPause, ToolConfirmationRequest

UNSET: Any = type("Unset", (), {"__repr__": lambda self: "UNSET"})()
"""Marks an argument that was not given (``None`` is a valid resume value)."""

GATE_KINDS = ("before", "after")

_REQUEST_FIELDS = frozenset(f.name for f in dataclasses.fields(ToolConfirmationRequest))


@dataclass(frozen=True, slots=True)
class PauseRequest:
    """A pause a node (or a gate) asks for: its stable key within the task, kind and value."""

    key: str
    kind: PauseKind
    value: Any


def pause_from_record(rec: PauseRecord, answer: AnswerRecord | None = None) -> Pause:
    """The public ``Pause`` for a stored pause record (answered by ``answer``, if given)."""
    pause = _unanswered(rec)
    if answer is None:
        return pause
    return dataclasses.replace(
        pause,
        answered=True,
        answer=answer.value,
        answered_by=answer.by,
        answered_at=to_datetime(answer.created_at),
        answer_reason=answer.reason,
    )


def _unanswered(rec: PauseRecord) -> Pause:
    created = to_datetime(rec.created_at)
    if rec.kind == "tool_confirmation" and isinstance(rec.value, Mapping):
        req = rec.value.get("request")
        request = None
        if isinstance(req, Mapping):
            known = {k: v for k, v in req.items() if k in _REQUEST_FIELDS}
            if "taint_sources" in known:
                known["taint_sources"] = tuple(known["taint_sources"] or ())
            request = ToolConfirmationRequest(**known)
        return ToolConfirmationPause(
            rec.id,
            rec.kind,
            rec.node,
            rec.value,
            rec.thread_id,
            rec.checkpoint_id,
            created,
            request,
        )
    return Pause(rec.id, rec.kind, rec.node, rec.value, rec.thread_id, rec.checkpoint_id, created)


def principal_name(principal: Any) -> str | None:
    """The id to record for a principal (a ``Principal``, an id string, or None)."""
    if principal is None:
        return None
    if isinstance(principal, str):
        return principal
    return str(getattr(principal, "id", None) or getattr(principal, "name", None) or principal)


# -- pause ids: made and parsed here only ---------------------------------------------------
#
# A pause id is ``<task id>:<key>``: the task id (16 hex digits, unique in the thread) and a
# key unique within the task (``i0``, ``before``, ``tc:t0:call_1``, ...).

_PAUSE_ID = re.compile(r"^[0-9a-f]{16}:\S+$")


def make_pause_id(task_id: str, key: str) -> str:
    """The stable id of a task's pause with ``key``."""
    return f"{task_id}:{key}"


def task_of(pause_id: str) -> str:
    """The task id a pause id belongs to."""
    return pause_id.partition(":")[0]


def looks_like_pause_id(value: str) -> bool:
    """Whether a string has the shape of a pause id."""
    return bool(_PAUSE_ID.match(value))
