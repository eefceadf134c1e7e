"""Human decisions on proposed tool calls, bound to the call id and its arguments.

A decision answers the ``tool_confirmation`` pause of one function call id (never a tool
name). When it carries a fingerprint, the fingerprint must equal the proposed call's, or the
decision is recorded as not applied and the call stays pending (DESIGN.md promise 5).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from typing import Any, Literal
from uuid import UUID

from checkpoints.models import AnswerRecord, CallId, DecisionRecord, PauseId, PauseRecord, ThreadId
from graphflow.errors import InvalidArgumentError

Verdict = Literal["approve", "deny"]


@dataclass(frozen=True, slots=True)
class Decision:
    """A human's answer to one proposed tool call.

    Build it with ``Decision.approve(...)`` or ``Decision.deny(...)``; the strings
    ``"approve"`` and ``"deny"`` are accepted wherever a decision is.
    """

    verdict: Verdict
    fingerprint: str | None = None
    by: str | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.verdict not in ("approve", "deny"):
            raise InvalidArgumentError(
                f"a decision's verdict must be 'approve' or 'deny', not {self.verdict!r}"
            )

    @classmethod
    def approve(
        cls, *, fingerprint: str | None = None, by: str | None = None, reason: str | None = None
    ) -> Decision:
        """Approve the call; with ``fingerprint``, only if its arguments are the ones reviewed."""
        return cls("approve", fingerprint, by, reason)

    @classmethod
    def deny(cls, *, reason: str | None = None, by: str | None = None) -> Decision:
        """Deny the call: it does not run and the model is told why."""
        return cls("deny", None, by, reason)

    @classmethod
    def coerce(cls, value: Any) -> Decision:
        """A ``Decision`` from a Decision, ``"approve"``/``"deny"`` or a mapping of fields."""
        if isinstance(value, Decision):
            return value
        if value in ("approve", "deny"):
            return cls(value)
        if isinstance(value, Mapping) and value.get("verdict") in ("approve", "deny"):
            return cls(
                value["verdict"], value.get("fingerprint"), value.get("by"), value.get("reason")
            )
        raise InvalidArgumentError(
            f"a decision must be Decision.approve(...), Decision.deny(...), 'approve' or "
            f"'deny', not {value!r}"
        )

    def as_answer(self) -> dict[str, Any]:
        """The stored answer a tool-confirmation pause receives."""
        return {
            "verdict": self.verdict,
            "fingerprint": self.fingerprint,
            "by": self.by,
            "reason": self.reason,
        }


def _canonical(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_canonical(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, UUID | Decimal):
        return str(value)
    if isinstance(value, Enum):
        return _canonical(value.value)
    if isinstance(value, bytes):
        return value.hex()
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return _canonical(dump(mode="json"))
    raise InvalidArgumentError(f"cannot fingerprint a value of type {type(value).__name__}")


def tool_call_fingerprint(tool_name: str, args: Mapping[str, Any]) -> str:
    """A stable digest of a tool call: independent of key order at every level."""
    doc = {"tool": tool_name, "args": _canonical(args)}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def match_decisions(
    thread_id: str,
    pending: Sequence[PauseRecord],
    decisions: Mapping[str, Any],
    *,
    by: str | None = None,
) -> tuple[list[AnswerRecord], list[DecisionRecord]]:
    """Turn ``decisions`` (keyed by function call id) into answers to pending pauses.

    Returns the answers to store and every decision as an append-only record, with
    ``applied=False`` and a note for the ones that were ignored (unknown call id, tool name
    used as a key, fingerprint mismatch).
    """
    by_call: dict[str, PauseRecord] = {}
    by_tool: dict[str, list[str]] = {}
    for p in pending:
        req = p.value.get("request") if isinstance(p.value, Mapping) else None
        if p.kind == "tool_confirmation" and isinstance(req, Mapping):
            by_call[str(req["function_call_id"])] = p
            by_tool.setdefault(str(req["tool_name"]), []).append(str(req["function_call_id"]))
    answers: list[AnswerRecord] = []
    records: list[DecisionRecord] = []
    tid = ThreadId(thread_id)
    for call_id, raw in decisions.items():
        d = Decision.coerce(raw)
        actor = d.by or by
        pause = by_call.get(call_id)
        note: str | None = None
        if pause is None:
            note = (
                f"{call_id!r} is a tool name, not a function call id (pending calls: "
                f"{by_tool[call_id]})"
                if call_id in by_tool
                else f"no pending tool call {call_id!r}"
            )
        else:
            expected = pause.value["request"].get("fingerprint")
            if d.fingerprint is not None and d.fingerprint != expected:
                note = f"fingerprint {d.fingerprint!r} does not match the call's {expected!r}"
        records.append(
            DecisionRecord(
                tid,
                CallId(call_id),
                d.verdict,
                d.fingerprint,
                actor,
                d.reason,
                applied=note is None,
                note=note,
            )
        )
        if pause is not None and note is None:
            answer = Decision(d.verdict, d.fingerprint, actor, d.reason).as_answer()
            answers.append(AnswerRecord(PauseId(pause.id), tid, answer, actor, d.reason))
    return answers, records
