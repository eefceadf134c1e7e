"""What a call answers: one pure function for ``invoke`` and ``submit`` alike.

``resolve`` turns a paused thread's pending pauses, the call's ``resume=`` and
``decisions=``, and who answers into the answer records to store and one record of every
decision given, applied or not (with the reason when not). Nothing here does I/O, so the two
entry points cannot drift apart, and every rule is unit-tested on data.

The rules (README, "Answering pauses"):

- A tool confirmation is answered only by ``decisions=``, keyed by the function call id of
  the proposed call (or by the pause id, to tell apart two pending calls that share an id).
  A decision whose key matches no pending call, whose fingerprint is malformed or differs
  from the call's, or whose key names an interrupt or gate pause is recorded as not applied,
  with the reason; the call stays pending.
- ``resume=`` answers interrupts and gates: a mapping whose keys are all pending pause ids
  maps each pause to its answer; any other value is the answer of the single pending
  interrupt or gate. A mapping that looks like a mistaken pause map (a key that is a pending
  pause id, looks like one, is the start of one, or names a pending pause's node or call) is
  refused with the pending ids; to give such a dict as a plain answer, wrap it:
  ``resume={pause_id: {...}}``.
- ``invoke(None)`` with neither releases every pending gate (``interrupt_before``/``after``).
- Every answer value is serialized here, so a value that cannot be stored is refused before
  any node runs.

How decisions are matched to the pending calls is ``engine.confirmations``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from checkpoints import serde
from checkpoints.models import AnswerRecord, DecisionRecord, PauseId, PauseRecord, ThreadId
from graphflow import arguments
from graphflow.decisions import Decision
from graphflow.engine.confirmations import match, request_of
from graphflow.engine.pauses import GATE_KINDS, UNSET, looks_like_pause_id
from graphflow.errors import (
    AmbiguousResumeError,
    InvalidArgumentError,
    NothingToResumeError,
    UnknownPauseError,
)


@dataclass(frozen=True, slots=True)
class Resolution:
    """The answers to store and a record of every decision (``applied`` or not)."""

    answers: tuple[AnswerRecord, ...] = ()
    decisions: tuple[DecisionRecord, ...] = ()

    @property
    def ignored(self) -> tuple[DecisionRecord, ...]:
        """The decisions that answered nothing, each with its reason in ``note``."""
        return tuple(d for d in self.decisions if not d.applied)


def check_decisions(decisions: Any) -> dict[str, Decision]:
    """``decisions=`` as a dict of ``Decision``s; raise before anything runs when it is not a
    mapping of function call ids to ``Decision``/``"approve"``/``"deny"``."""
    if decisions is None:
        return {}
    if not isinstance(decisions, Mapping):
        raise InvalidArgumentError(
            f"decisions must be a mapping {{function_call_id: Decision | 'approve' | 'deny'}}, "
            f"not {type(decisions).__name__} {decisions!r:.80}"
        )
    out: dict[str, Decision] = {}
    for key, value in decisions.items():
        if not isinstance(key, str) or not key:
            raise InvalidArgumentError(
                f"decisions are keyed by function call id (a non-empty string), not {key!r}"
            )
        if isinstance(value, Mapping) and value.get("roles"):
            raise InvalidArgumentError(
                f"decision {key!r}: roles cannot be given with a decision; an approver's roles "
                "come from its Principal (Decision.approve(by=Principal(...))) or from the "
                "agent's AccessControl assignments"
            )
        out[key] = d = Decision.coerce(value)
        if d.by is not None:  # (checked here, as given: a stored answer is read as it was)
            arguments.identity(f"decision {key!r}: by", d.by)
        arguments.text(f"decision {key!r}: reason", d.reason)
    return out


def resolve(
    thread_id: str,
    pending: Sequence[PauseRecord],
    *,
    resume: Any = UNSET,
    decisions: Mapping[str, Decision] | None = None,
    by: str | None = None,
    reason: str | None = None,
    release_gates: bool = False,
) -> Resolution:
    """The answers and decision records a call brings to a thread's pending pauses.

    Args:
        thread_id: the thread (named in errors and records).
        pending: the records of the thread's pending pauses.
        resume: ``resume=`` of the call (``UNSET`` when not given).
        decisions: ``decisions=`` of the call, already checked by ``check_decisions``.
        by: who answers (the run's principal, or ``submit``'s ``by``).
        reason: a reason given with the call, for answers and decisions without their own.
        release_gates: with neither ``resume`` nor decisions, release pending gates (what
            ``invoke(None)`` does; ``submit`` never does).

    Raises:
        UnknownPauseError, AmbiguousResumeError, NothingToResumeError, InvalidArgumentError:
            the answers do not fit the pending pauses (nothing is returned).
        checkpoints.SerializationError: an answer cannot be stored.
    """
    tid = ThreadId(thread_id)
    answers: list[AnswerRecord] = []
    if resume is not UNSET:
        for pid, value in _resume_items(thread_id, pending, resume):
            answers.append(AnswerRecord(pid, tid, value, by, reason))
    elif release_gates and not decisions:
        answers += [
            AnswerRecord(p.id, tid, None, by, "continued") for p in pending if p.kind in GATE_KINDS
        ]
    records: list[DecisionRecord] = []
    if decisions:
        found, records = match(thread_id, pending, decisions, by=by, reason=reason)
        answers += found
    for a in answers:  # refuse what cannot be stored now, before any node runs
        serde.dumps(a.value, key=f"answer to pause {a.pause_id!r}")
    return Resolution(tuple(answers), tuple(records))


def match_decisions(
    thread_id: str,
    pending: Sequence[PauseRecord],
    decisions: Mapping[str, Any],
    *,
    by: str | None = None,
) -> tuple[list[AnswerRecord], list[DecisionRecord]]:
    """Decisions (keyed by function call id) as answers to pending tool confirmations, and
    every decision as an append-only record (``applied=False`` with a note when ignored)."""
    return match(thread_id, pending, check_decisions(decisions), by=by, reason=None)


def effective(records: Sequence[DecisionRecord]) -> list[DecisionRecord]:
    """Decision records as they took effect: of several applied decisions on one pause, the
    latest wins (answers are latest-wins) and the earlier ones are returned with
    ``applied=False`` and a note naming the decision that superseded them. A decision that
    the call refused when it ran (a refusal record, ``extra["refused"]``: the approver
    lacked the role, the approval expired) is returned with ``applied=False`` and the
    refusal's note, in place of the refusal record."""
    latest: dict[str, int] = {}
    refused: dict[int, DecisionRecord] = {}
    folded: set[int] = set()
    for i, r in enumerate(records):
        key = r.pause_id or r.call_id
        if r.applied:
            latest[key] = i
        elif (r.extra or {}).get("refused") and key in latest and latest[key] not in refused:
            refused[latest[key]] = r
            folded.add(i)
    winners = {i for i in latest.values() if i not in refused}
    out = []
    for i, r in enumerate(records):
        if i in folded:
            continue
        if r.applied and i in refused:
            r = replace(r, applied=False, note=refused[i].note)
        elif r.applied and i not in winners:
            winner = records[latest[r.pause_id or r.call_id]]
            note = f"superseded by the {winner.verdict} of {winner.by or 'an anonymous caller'}"
            r = replace(r, applied=False, note=note)
        out.append(r)
    return out


# -- resume= ---------------------------------------------------------------------------------


_PLAIN = frozenset({str, bytes, int, float, bool, list, tuple, type(None)})


def _resume_items(
    thread_id: str, pending: Sequence[PauseRecord], resume: Any
) -> list[tuple[PauseId, Any]]:
    by_id = {p.id: p for p in pending}
    if type(resume) not in _PLAIN and isinstance(resume, Mapping) and resume:
        keys = list(resume)
        known = [k for k in keys if k in by_id]
        if known and len(known) == len(keys):
            _refuse_tool_answers(thread_id, [by_id[k] for k in known])
            return [(PauseId(k), resume[k]) for k in keys]
        mistaken = [k for k in keys if k in by_id or _mistaken_key(k, pending)]
        if mistaken:
            unknown = [str(k) for k in keys if k not in by_id]
            raise UnknownPauseError(
                thread_id,
                unknown,
                list(by_id),
                hint="to give a dict as the answer of the one pending pause, wrap it as "
                "resume={pause_id: {...}}",
            )
    answerable = [p for p in pending if p.kind != "tool_confirmation"]
    if not answerable:
        if pending:
            _refuse_tool_answers(thread_id, pending)
        raise NothingToResumeError(thread_id)
    if len(answerable) > 1:
        raise AmbiguousResumeError(thread_id, [p.id for p in answerable])
    return [(answerable[0].id, resume)]


def _mistaken_key(key: Any, pending: Sequence[PauseRecord]) -> bool:
    """Whether a key of a resume mapping was likely meant as a pause id."""
    if not isinstance(key, str):
        return False
    if looks_like_pause_id(key):
        return True
    for p in pending:
        if len(key) >= 4 and p.id.startswith(key):
            return True
        if key == p.node or key == p.node.rpartition(".")[2]:
            return True
        if request_of(p).get("function_call_id") == key:
            return True
    return False


def _refuse_tool_answers(thread_id: str, pauses: Sequence[PauseRecord]) -> None:
    tool = [p.id for p in pauses if p.kind == "tool_confirmation"]
    if tool:
        calls = [request_of(p).get("function_call_id") for p in pauses]
        raise InvalidArgumentError(
            f"thread {thread_id!r}: pauses {tool} are tool confirmations; answer them with "
            f"decisions={{function_call_id: Decision.approve(...) or Decision.deny(...)}} "
            f"(pending calls: {[c for c in calls if c]})"
        )
