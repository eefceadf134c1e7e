"""Rows of append-only records: pauses, answers, decisions and dispatches (see ``checks``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

from checkpoints.encoding import load_value
from checkpoints.models import (
    DISPATCH_STATUSES,
    PAUSE_KINDS,
    VERDICTS,
    AnswerRecord,
    CallId,
    CheckpointId,
    DecisionRecord,
    DispatchRecord,
    DispatchStatus,
    PauseId,
    PauseKind,
    PauseRecord,
    TaskId,
    ThreadId,
)
from checkpoints.sqlite.rows.checks import (
    bad_shape,
    check_crc,
    crc,
    damaged,
    is_opt_str,
    is_opt_time,
    is_time,
    time_value,
)

# -- pauses, answers, decisions, dispatches -------------------------------------------------

PAUSE_COLS = "id, ns, checkpoint_id, task_id, node, kind, value, created_at, crc"


def pause_row(thread_id: str, p: PauseRecord, value: bytes) -> tuple[Any, ...]:
    """A pause's values as written (table order, ``crc`` last)."""
    values = (thread_id, p.id, p.ns, p.checkpoint_id, p.task_id, p.node, p.kind, value,
              time_value(p.created_at))  # fmt: skip
    return (*values, crc(values))


def pause(thread_id: str, row: Sequence[Any]) -> PauseRecord:
    """Decode a pause row (``PAUSE_COLS``)."""
    pid, ns, cid, tid, node, kind, value, created, stored = row
    who = cid if type(cid) is str else None
    what = f"pause {pid!r}" if type(pid) is str else "pause"
    check_crc(
        stored, (thread_id, pid, ns, cid, tid, node, kind, value, created), thread_id, who, what
    )
    if not (
        all(type(v) is str for v in (pid, ns, cid, tid, node)) and type(kind) is str
        and kind in PAUSE_KINDS and type(value) is bytes and is_time(created)
    ):  # fmt: skip
        raise bad_shape(thread_id, who, what, "a column of the wrong type or value")
    return PauseRecord(
        PauseId(pid), ThreadId(thread_id), ns, CheckpointId(cid), TaskId(tid), node,
        cast(PauseKind, kind), load_value(value, thread_id, cid, what), created,
    )  # fmt: skip


ANSWER_COLS = "seq, pause_id, value, by, reason, created_at, crc"


def answer_row(seq: int, a: AnswerRecord, value: bytes) -> tuple[Any, ...]:
    """An answer's values as written (table order, ``crc`` last)."""
    values = (seq, a.thread_id, a.pause_id, value, a.by, a.reason, time_value(a.created_at))
    return (*values, crc(values))


def answer(thread_id: str, row: Sequence[Any]) -> AnswerRecord:
    """Decode an answer row (``ANSWER_COLS``)."""
    seq, pid, value, by, reason, created, stored = row
    what = f"answer to {pid!r}" if type(pid) is str else "answer"
    check_crc(stored, (seq, thread_id, pid, value, by, reason, created), thread_id, None, what)
    if not (
        type(pid) is str and type(value) is bytes and is_opt_str(by) and is_opt_str(reason)
        and is_time(created)
    ):  # fmt: skip
        raise bad_shape(thread_id, None, what, "a column of the wrong type")
    return AnswerRecord(
        PauseId(pid), ThreadId(thread_id), load_value(value, thread_id, None, what), by, reason,
        created,
    )  # fmt: skip


DECISION_COLS = (
    "seq, call_id, verdict, fingerprint, by, reason, applied, note, created_at, pause_id, extra,"
    " crc"
)


def decision_row(seq: int, d: DecisionRecord, extra: bytes | None) -> tuple[Any, ...]:
    """A decision's values as written (table order, ``crc`` last)."""
    values = (seq, d.thread_id, d.call_id, d.verdict, d.fingerprint, d.by, d.reason,
              int(d.applied), d.note, time_value(d.created_at), d.pause_id, extra)  # fmt: skip
    return (*values, crc(values))


def decision(thread_id: str, row: Sequence[Any]) -> DecisionRecord:
    """Decode a decision row (``DECISION_COLS``)."""
    seq, call, verdict, fp, by, reason, applied, note, created, pid, extra, stored = row
    what = f"decision on call {call!r}" if type(call) is str else "decision"
    values = (seq, thread_id, call, verdict, fp, by, reason, applied, note, created, pid,
              extra)  # fmt: skip
    check_crc(stored, values, thread_id, None, what)
    if not (
        type(call) is str and type(verdict) is str and verdict in VERDICTS
        and all(is_opt_str(v) for v in (fp, by, reason, note, pid))
        and applied in (0, 1) and type(applied) is int and is_time(created)
        and (extra is None or type(extra) is bytes)
    ):  # fmt: skip
        raise bad_shape(thread_id, None, what, "a column of the wrong type or value")
    fields: Any = {}
    if extra is not None:
        fields = load_value(extra, thread_id, None, f"extra of decision {call!r}")
        if type(fields) is not dict or not fields or any(type(k) is not str for k in fields):
            raise bad_shape(thread_id, None, what, "its extra fields are not a map of names")
    return DecisionRecord(
        ThreadId(thread_id), CallId(call), cast(Literal["approve", "deny"], verdict), fp, by,
        reason, bool(applied), note, created, pid, fields,
    )  # fmt: skip


DISPATCH_COLS = "tool, fingerprint, owner, status, result, error, claimed_at, completed_at, crc"


def dispatch_crc(
    thread_id: str,
    call_id: str,
    tool: str,
    fingerprint: str | None,
    owner: str,
    status: str,
    result: bytes | None,
    error: str | None,
    claimed_at: float,
    completed_at: float | None,
) -> int:
    """The checksum of a dispatch row (its columns in table order)."""
    return crc(
        (thread_id, call_id, tool, fingerprint, owner, status, result, error, claimed_at,
         completed_at)
    )  # fmt: skip


def dispatch(thread_id: str, call_id: str, row: Sequence[Any]) -> DispatchRecord:
    """Decode a dispatch row (``DISPATCH_COLS``)."""
    tool, fp, owner, status, result, error, claimed, completed, stored = row
    what = f"dispatch of call {call_id!r}"
    try:
        ok = stored == dispatch_crc(
            thread_id, call_id, tool, fp, owner, status, result, error, claimed, completed
        )
    except TypeError:
        ok = False
    if not ok or type(stored) is not int:
        raise damaged(thread_id, None, what, "checksum mismatch")
    if not (
        type(tool) is str and is_opt_str(fp) and type(owner) is str and type(status) is str
        and status in DISPATCH_STATUSES and (result is None or type(result) is bytes)
        and is_opt_str(error) and is_time(claimed) and is_opt_time(completed)
    ):  # fmt: skip
        raise bad_shape(thread_id, None, what, "a column of the wrong type or value")
    value = None if result is None else load_value(result, thread_id, None, "tool result")
    return DispatchRecord(
        ThreadId(thread_id), CallId(call_id), tool, fp, owner, cast(DispatchStatus, status),
        value, error, claimed, completed,
    )  # fmt: skip
