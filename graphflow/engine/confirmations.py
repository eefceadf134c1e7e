"""Decisions matched to pending tool confirmations: the ``decisions=`` half of a call's answers.

``match`` makes each decision the answer of the call it names (by function call id, or by
pause id), bound to that call's fingerprint and action digest, or records why it answered
nothing (no such call, a tool name, an interrupt's id, a fingerprint malformed or not the
call's). Kept apart from ``engine.answers``, which brings ``resume=`` and ``decisions=``
together in ``resolve``: matching decisions has rules of its own and is the larger half.
Pure, like ``resolve``, through which its rules are tested.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from checkpoints.models import AnswerRecord, CallId, DecisionRecord, PauseId, PauseRecord, ThreadId
from graphflow.decisions import Decision, normalize_fingerprint
from graphflow.errors import InvalidArgumentError


def request_of(pause: PauseRecord) -> Mapping[str, Any]:
    """A pause's tool-confirmation request (empty when it has none)."""
    req = pause.value.get("request") if isinstance(pause.value, Mapping) else None
    return req if isinstance(req, Mapping) else {}


def match(
    thread_id: str,
    pending: Sequence[PauseRecord],
    decisions: Mapping[str, Decision],
    *,
    by: str | None,
    reason: str | None,
) -> tuple[list[AnswerRecord], list[DecisionRecord]]:
    """``decisions`` as answers to the pending tool confirmations they name, and every
    decision as a record (``applied=False`` with the reason in ``note`` when it answered
    nothing); raise ``InvalidArgumentError`` when a key is ambiguous or two decisions answer
    one call."""
    tool = [p for p in pending if p.kind == "tool_confirmation" and request_of(p)]
    by_pause = {p.id: p for p in tool}
    by_call: dict[str, list[PauseRecord]] = {}
    by_tool: dict[str, list[str]] = {}
    for p in tool:
        req = request_of(p)
        by_call.setdefault(str(req.get("function_call_id")), []).append(p)
        by_tool.setdefault(str(req.get("tool_name")), []).append(str(req.get("function_call_id")))
    others = {p.id: p for p in pending if p.id not in by_pause}
    tid = ThreadId(thread_id)
    answers: list[AnswerRecord] = []
    records: list[DecisionRecord] = []
    answered: dict[str, str] = {}
    for key, d in decisions.items():
        actor = d.by or by
        why = d.reason if d.reason is not None else reason
        target: PauseRecord | None = by_pause.get(PauseId(key))
        note: str | None = None
        if target is not None and key in by_call and by_call[key] != [target]:
            raise InvalidArgumentError(
                f"thread {thread_id!r}: decision key {key!r} is both a pause id and the "
                "function call id of another pending call; key it by that call's pause id"
            )
        if target is None and key in by_call:
            candidates = by_call[key]
            if len(candidates) > 1:
                raise InvalidArgumentError(
                    f"thread {thread_id!r}: {len(candidates)} pending calls have the function "
                    f"call id {key!r} (pauses {[p.id for p in candidates]}); key each decision "
                    "by its pause id"
                )
            target = candidates[0]
        if target is None:
            if key in others:
                p = others[PauseId(key)]
                note = (
                    f"pause {key!r} is {'an' if p.kind == 'interrupt' else 'a'} {p.kind} pause "
                    f"of node {p.node!r}, not a tool call: answer it with resume={{...}}"
                )
            elif key in by_tool:
                note = (
                    f"{key!r} is a tool name, not a function call id (pending calls: "
                    f"{by_tool[key]})"
                )
            else:
                pending_calls = sorted(by_call)
                note = f"no pending tool call {key!r} (pending calls: {pending_calls})"
        else:
            expected = request_of(target).get("fingerprint")
            if d.fingerprint is not None:
                try:
                    given = normalize_fingerprint(d.fingerprint)
                except InvalidArgumentError as e:
                    note = str(e)
                else:
                    if given != expected:
                        note = (
                            f"fingerprint {d.fingerprint!r} does not match the call's {expected!r}"
                        )
            if note is None and target.id in answered:
                raise InvalidArgumentError(
                    f"thread {thread_id!r}: decisions {answered[target.id]!r} and {key!r} both "
                    f"answer pause {target.id!r}; give one decision per call"
                )
        call_id = str(request_of(target).get("function_call_id")) if target is not None else key
        applied = target is not None and note is None
        records.append(
            DecisionRecord(
                tid,
                CallId(call_id),
                d.verdict,
                d.fingerprint,
                actor,
                why,
                applied=applied,
                note=note,
                pause_id=target.id if target is not None else None,
            )
        )
        if applied and target is not None:
            answered[target.id] = key
            # Bound to the call it answered, given or not: a call re-planned with other
            # arguments under the same key finds an answer for another call (refused).
            fingerprint = request_of(target).get("fingerprint")
            value = Decision(d.verdict, fingerprint, actor, why, d.expires_at, d.roles).as_answer()
            digest = request_of(target).get("action_digest")
            if digest:  # bound to the whole digest of the call it answered
                value["action_digest"] = digest
            answers.append(AnswerRecord(target.id, tid, value, actor, why))
    return answers, records
