"""The one encoder of ``--json`` output: graphflow's objects and any state value as JSON.

The rules (README, "Command line"):

- graphflow's records are objects with the field names of the Python objects:
  ``RunResult``, ``StateSnapshot``, ``TaskInfo``, ``ThreadInfo`` (``thread_id``, ``status``,
  ``updated_at``, ``pending_pauses``, ``graph_name``, ``created_at``), ``DecisionRecord``;
  a pause (``Pause``, ``ToolConfirmationPause``) is always ``{thread_id, pause_id, kind,
  node, checkpoint_id, created_at, value, request, answered, answer, answered_by,
  answered_at, answer_reason}``, ``request`` holding every ``ToolConfirmationRequest``
  field, or null for a pause that is not a tool confirmation; the call's ``args`` and
  ``describe`` there (and in ``value``) are shown as the evidence log stores them: the
  value of a secret key (``api_key``, ``password``, ``token``...) and secret-looking text
  as ``"sha256:<hex>"`` (``graphflow.evidence.redact``; the fingerprint still binds the
  real arguments);
- datetimes (and the stored timestamps of records) are RFC 3339 strings in UTC
  (``2025-01-31T12:00:00.000000Z``; a naive datetime is taken as UTC);
- ``None``, booleans, integers, strings, finite floats are themselves; mappings become
  objects (keys as strings), lists and tuples arrays;
- a pydantic model becomes ``model_dump(mode="json")``, another dataclass an object of its
  fields; anything else (sets, bytes, enums, non-finite floats, a model that cannot dump
  itself, a value that contains itself) becomes ``str(value)``. Encoding never fails.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

_PLAIN = (str, int, bool, type(None))


def rfc3339(value: datetime | float) -> str:
    """A datetime, or a stored timestamp (seconds since the epoch), in RFC 3339 UTC."""
    if not isinstance(value, datetime):
        value = datetime.fromtimestamp(value, tz=UTC)
    elif value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    text = value.astimezone(UTC).isoformat(timespec="microseconds")
    return text.removesuffix("+00:00") + "Z"


def encode(value: Any) -> Any:
    """``value`` as JSON types, by the rules of this module's docstring."""
    return _Encoder().encode(value)


def request_fields(request: Any) -> dict[str, Any]:
    """A ``ToolConfirmationRequest`` as JSON, its call's secrets as digests."""
    fields: dict[str, Any] = _Encoder().encode(request)
    redactor = _redactor()
    # (encoded first: JSON types only, which the redactor takes whatever the call held;
    # ``describe``, the tool's facts about the call, may quote its arguments, under any
    # key: the secret values of the arguments are replaced there too)
    secrets = sorted(_secret_values(redactor, fields["args"], False), key=len, reverse=True)
    fields["describe"] = _without(fields["describe"], secrets)
    for name in ("args", "describe"):
        fields[name] = redactor.prepare(fields[name], keyed=True, where=name)
    return fields


def _secret_values(redactor: Any, value: Any, secret: bool) -> set[str]:
    """The strings under a secret key of ``value`` (at any depth)."""
    if isinstance(value, str):
        return {value} if secret and value else set()
    if isinstance(value, dict):
        return {
            s
            for k, v in value.items()
            for s in _secret_values(redactor, v, secret or redactor.is_secret_key(k))
        }
    if isinstance(value, list):
        return {s for v in value for s in _secret_values(redactor, v, secret)}
    return set()


def _without(value: Any, secrets: list[str]) -> Any:
    """``value`` with each of ``secrets`` replaced by its digest wherever it appears."""
    if not secrets:
        return value
    if isinstance(value, str):
        from graphflow.evidence.redact import digest

        for s in secrets:
            if s in value:
                value = value.replace(s, digest(s))
        return value
    if isinstance(value, dict):
        return {k: _without(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_without(v, secrets) for v in value]
    return value


@functools.cache
def _redactor() -> Any:
    """The evidence log's default redaction (imported at the first request shown)."""
    from graphflow.evidence.redact import Redactor

    return Redactor()


def pause(value: Any) -> dict[str, Any]:
    """A ``Pause`` (or ``ToolConfirmationPause``) in its one JSON shape."""
    return _Encoder().pause(value)


class _Encoder:
    """One encoding: it remembers the containers it is inside, to stop at a cycle."""

    def __init__(self) -> None:
        self._inside: set[int] = set()

    def encode(self, value: Any) -> Any:
        if type(value) in _PLAIN:
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else str(value)
        if isinstance(value, datetime):
            return rfc3339(value)
        if id(value) in self._inside:
            return f"<cycle: {type(value).__name__}>"
        self._inside.add(id(value))
        try:
            return self._container(value)
        finally:
            self._inside.discard(id(value))

    def _container(self, value: Any) -> Any:
        if isinstance(value, str):  # a subclass (a str enum) as its text
            return str.__str__(value)
        if isinstance(value, int):
            return int(value)
        if isinstance(value, Mapping):
            return {str(k): self.encode(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.encode(v) for v in value]
        dump = getattr(value, "model_dump", None)
        if callable(dump) and not isinstance(value, type):
            try:
                return self.encode(dump(mode="json"))
            except Exception:  # a model holding what it cannot serialize
                return str(value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return self._record(value)
        return str(value)

    def _record(self, value: Any) -> dict[str, Any]:
        # An instance of a class means its module is loaded: looking the module up, rather
        # than importing it, keeps a listing of threads from importing graphflow's types.
        types, models = sys.modules.get("graphflow.types"), sys.modules.get("checkpoints.models")
        if types is not None and isinstance(value, types.Pause):
            return self.pause(value)
        if models is not None and isinstance(value, models.ThreadInfo):
            return {
                "thread_id": value.thread_id,
                "status": value.status,
                "updated_at": rfc3339(value.updated_ts),
                "pending_pauses": value.pending_pauses,
                "graph_name": value.graph_name,
                "created_at": rfc3339(value.created_ts) if value.created_ts is not None else None,
            }
        out = {f.name: self.encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if models is not None and isinstance(value, models.DecisionRecord):
            out["created_at"] = rfc3339(value.created_at)
        return out

    def pause(self, value: Any) -> dict[str, Any]:
        request = getattr(value, "request", None)
        shown = self.encode(value.value)
        fields = None
        if request is not None:
            fields = request_fields(request)
            if isinstance(shown, dict) and "request" in shown:
                shown["request"] = fields
        return {
            "thread_id": value.thread_id,
            "pause_id": value.id,
            "kind": value.kind,
            "node": value.node,
            "checkpoint_id": value.checkpoint_id,
            "created_at": rfc3339(value.created_at),
            "value": shown,
            "request": fields,
            "answered": value.answered,
            "answer": self.encode(value.answer),
            "answered_by": value.answered_by,
            "answered_at": rfc3339(value.answered_at) if value.answered_at is not None else None,
            "answer_reason": value.answer_reason,
        }
