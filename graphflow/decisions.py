"""Decisions on proposed tool calls and the fingerprint that binds them to the arguments.

A decision answers the ``tool_confirmation`` pause of one proposed call, found by its function
call id (never a tool name). When it carries a fingerprint, the fingerprint must equal the
proposed call's, or the decision is recorded as not applied and the call stays pending
(DESIGN.md promise 5). Decisions are an argument of every run, so they live with the core
types; ``graphflow.auth`` re-exports them. Matching decisions to pauses is
``graphflow.engine.answers``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from typing import Any, Literal
from uuid import UUID

from graphflow.errors import InvalidArgumentError

Verdict = Literal["approve", "deny"]


@dataclass(frozen=True, slots=True)
class Decision:
    """A human's answer to one proposed tool call.

    Build it with ``Decision.approve(...)`` or ``Decision.deny(...)``; the strings
    ``"approve"`` and ``"deny"`` are accepted wherever a decision is. ``by`` is the
    approver's id; given a ``graphflow.auth.Principal``, its roles are kept too
    (``roles``), for calls whose approval needs a role. An approval may expire
    (``expires_at``, an aware datetime): after it, the call does not run and waits for a
    new decision.
    """

    verdict: Verdict
    fingerprint: str | None = None
    by: str | None = None
    reason: str | None = None
    expires_at: datetime | None = None
    roles: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.verdict not in ("approve", "deny"):
            raise InvalidArgumentError(
                f"a decision's verdict must be 'approve' or 'deny', not {self.verdict!r}"
            )
        if self.by is not None and not isinstance(self.by, str):
            who = self.by
            ident = getattr(who, "id", None)
            if not isinstance(ident, str) or not ident or isinstance(who, Mapping):
                raise InvalidArgumentError(
                    f"a decision's by must be the approver's id (a str) or a Principal, not "
                    f"{type(who).__name__} {who!r:.60}"
                )
            object.__setattr__(self, "by", ident)
            roles = getattr(who, "roles", None)
            if roles and not self.roles:
                object.__setattr__(self, "roles", tuple(str(r) for r in roles))
        if self.by == "":
            raise InvalidArgumentError("a decision's by must be a non-empty id, or None")
        if isinstance(self.roles, str) or not all(isinstance(r, str) and r for r in self.roles):
            raise InvalidArgumentError(
                f"a decision's roles must be a tuple of role names, not {self.roles!r:.60}"
            )
        if self.expires_at is not None and (
            not isinstance(self.expires_at, datetime) or self.expires_at.tzinfo is None
        ):
            raise InvalidArgumentError(
                f"expires_at must be an aware datetime (with a time zone), not {self.expires_at!r}"
            )

    @classmethod
    def approve(
        cls,
        *,
        fingerprint: str | None = None,
        by: Any = None,
        reason: str | None = None,
        expires_at: datetime | None = None,
    ) -> Decision:
        """Approve the call; with ``fingerprint``, only if its arguments are the ones reviewed;
        with ``expires_at``, only until then. ``by``: an id or a ``Principal``."""
        return cls("approve", fingerprint, by, reason, expires_at)

    @classmethod
    def deny(cls, *, reason: str | None = None, by: Any = None) -> Decision:
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
                value["verdict"],
                value.get("fingerprint"),
                value.get("by"),
                value.get("reason"),
                value.get("expires_at"),
                _roles(value.get("roles")),
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
            "expires_at": self.expires_at,
            "roles": list(self.roles),
        }


def _roles(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise InvalidArgumentError(
            f"a decision's roles must be a list of role names, not {value!r:.60}"
        )
    return tuple(value)


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


_FINGERPRINT = re.compile(r"^(?:sha256:)?([0-9a-f]{64})$")


def normalize_fingerprint(value: Any) -> str:
    """A fingerprint as ``tool_call_fingerprint`` writes it (``sha256:`` + 64 hex digits).

    The bare hex digest is accepted too (the prefix is added), as are upper-case digits.

    Raises:
        InvalidArgumentError: ``value`` is not a fingerprint.
    """
    m = _FINGERPRINT.match(value.strip().lower()) if isinstance(value, str) else None
    if m is None:
        raise InvalidArgumentError(
            f"fingerprint {value!r} is malformed: expected 'sha256:' and 64 hex digits, as "
            "ToolConfirmationRequest.fingerprint shows"
        )
    return "sha256:" + m.group(1)
