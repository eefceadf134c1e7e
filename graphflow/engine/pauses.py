"""Pauses and answers: the public ``Pause`` of a stored record, and what counts as an answer."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from checkpoints.models import PauseRecord, to_datetime
from graphflow.errors import InvalidArgumentError
from graphflow.types import Pause, ToolConfirmationPause, ToolConfirmationRequest

UNSET: Any = type("Unset", (), {"__repr__": lambda self: "UNSET"})()
"""Marks an argument that was not given (``None`` is a valid resume value)."""

GATE_KINDS = ("before", "after")


def pause_from_record(rec: PauseRecord) -> Pause:
    """The public ``Pause`` for a stored pause record."""
    created = to_datetime(rec.created_at)
    if rec.kind == "tool_confirmation" and isinstance(rec.value, Mapping):
        req = rec.value.get("request")
        request = ToolConfirmationRequest(**req) if isinstance(req, Mapping) else None
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
    if principal is None:
        return None
    if isinstance(principal, str):
        return principal
    return str(getattr(principal, "id", None) or getattr(principal, "name", None) or principal)


def refuse_tool_answers(thread_id: str, pauses: Sequence[PauseRecord]) -> None:
    """Tool confirmations are answered by ``decisions=`` (bound to call id and fingerprint,
    and recorded), never by ``resume=``."""
    tool = [p.id for p in pauses if p.kind == "tool_confirmation"]
    if tool:
        raise InvalidArgumentError(
            f"thread {thread_id!r}: pauses {tool} are tool confirmations; answer them with "
            "decisions={function_call_id: Decision.approve(...) or Decision.deny(...)}"
        )


_PLAIN = frozenset({str, bytes, int, float, bool, list, tuple, type(None)})
_PAUSE_ID = re.compile(r"^[0-9a-f]{16}:\S+$")


def is_pause_map(resume: Any) -> bool:
    """A non-empty mapping whose keys all look like pause ids maps ids to answers.

    Any other value (a dict of data included) is one answer for the single pending pause.
    """
    if type(resume) in _PLAIN:  # (an ABC check of a str is slow the first time)
        return False
    return (
        isinstance(resume, Mapping)
        and bool(resume)
        and all(isinstance(k, str) and _PAUSE_ID.match(k) for k in resume)
    )
