"""Rows of ``SqliteCheckpointer``'s tables: their checksums, and decoding them with checks.

Every row carries ``crc``, ``serde.checksum`` of its columns in table order (migration
``0002_checksums`` says which), computed here as a row is written (or in SQL, by
``gf_crc``, for updates of columns the writer has not read). A row is decoded only after
its checksum matched: a changed, erased or swapped column (keys included) is damage. The
decoders then check what the checksum cannot vouch for (rows of files migrated from schema
1, which got checksums of what they held, and writers that compute them): each column's
type and range, each blob's shape. Any failure is a ``CorruptCheckpointError`` naming the
thread and checkpoint; a record is never returned partly decoded.
"""

from __future__ import annotations

import math
import sqlite3
import zlib
from collections.abc import Sequence
from typing import Any, Literal, cast

from checkpoints import serde
from checkpoints._decode import load_value
from checkpoints.errors import CorruptCheckpointError
from checkpoints.models import (
    CHECKPOINT_SOURCES,
    DISPATCH_STATUSES,
    PAUSE_KINDS,
    TASK_STATUSES,
    THREAD_STATUSES,
    VERDICTS,
    AnswerRecord,
    CallId,
    CheckpointId,
    CheckpointRecord,
    CheckpointSource,
    DecisionRecord,
    DispatchRecord,
    DispatchStatus,
    PauseId,
    PauseKind,
    PauseRecord,
    TaskId,
    TaskRecord,
    TaskSpec,
    TaskStatus,
    ThreadId,
    ThreadInfo,
    ThreadRecord,
    ThreadStatus,
)

crc = serde.checksum
INT64 = 1 << 63


def install(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the SQL functions ``gf_crc(col, ...)`` (``serde.checksum`` of its args)
    and ``gf_channel_crc`` (``channel_crc``)."""
    conn.create_function("gf_crc", -1, _gf_crc, deterministic=True)
    conn.create_function("gf_channel_crc", 7, _gf_channel_crc, deterministic=True)


def _gf_crc(*values: object) -> int:
    return crc(values)


def _gf_channel_crc(*values: Any) -> int | None:
    try:
        return channel_crc(*values)
    except (TypeError, AttributeError, OverflowError):
        return None


def damaged(
    thread_id: str, checkpoint_id: str | None, what: str, detail: str
) -> CorruptCheckpointError:
    """The error for a stored record that is not what was written."""
    at = f" checkpoint {checkpoint_id!r}" if checkpoint_id is not None else ""
    return CorruptCheckpointError(
        f"thread {thread_id!r}{at}: stored {what} is damaged ({detail}); restore the store "
        "from a backup",
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
    )


def bad_shape(thread_id: str, checkpoint_id: str | None, what: str, detail: object) -> Exception:
    """The error for a record that passed its checksum but holds values of the wrong kind."""
    return damaged(thread_id, checkpoint_id, what, f"invalid shape: {detail}")


def _is_str(v: object) -> bool:
    return type(v) is str


def _is_opt_str(v: object) -> bool:
    return v is None or type(v) is str


def _is_time(v: object) -> bool:
    return type(v) is float and math.isfinite(v)


def _is_opt_time(v: object) -> bool:
    return v is None or (type(v) is float and math.isfinite(v))


def _is_count(v: object) -> bool:
    return type(v) is int and 0 <= v < INT64


def _is_int64(v: object) -> bool:
    return type(v) is int and -INT64 <= v < INT64


def time_value(v: float | None) -> float | None:
    """A time as its REAL column stores it (an int given is stored, and read, as a float)."""
    return v if v is None or type(v) is float else float(v)


def count(thread_id: str, what: str, value: object, found: int) -> None:
    """Check a stored count against the rows found (a row moved by a damaged key, or a
    damaged count, shows here)."""
    if value != found or type(value) is not int:
        raise damaged(
            thread_id, None, what, f"{found} rows found where the count says {value!r:.40}"
        )


# -- threads --------------------------------------------------------------------------------

THREAD_COLS = (
    "status, head, graph_name, lease_owner, lease_expires_at, pending_pause_ids, created_at,"
    " updated_at, pending_count, crc, head_crc, lease_crc, n_checkpoints, newest, n_pauses,"
    " n_answers, n_decisions, n_dispatches"
)
"""What ``thread`` decodes (the row read ``_sqlite_sql._THREAD``-style); counts after it."""
N_CHECKPOINTS, NEWEST, N_PAUSES, N_ANSWERS, N_DECISIONS, N_DISPATCHES = range(12, 18)

# A thread row has three checksums, so that the writes of a run recompute only what they
# change from values they know (no SQL callback on a step's commit): the head (every step),
# the lease (taken, renewed, given up), and the rest (status changes).


def thread_crc(
    thread_id: str,
    status: str,
    graph_name: str | None,
    pending: bytes | None,
    pending_count: int,
    created_at: float,
    updated_at: float,
) -> int:
    """The checksum of a thread row's status columns."""
    return crc((thread_id, status, graph_name, pending, pending_count, created_at, updated_at))


def head_crc(thread_id: str, head: str | None) -> int:
    """The checksum of a thread row's head."""
    return crc((thread_id, head))


def lease_crc(thread_id: str, owner: str | None, expires_at: float | None) -> int:
    """The checksum of a thread row's lease."""
    return crc((thread_id, owner, expires_at))


def info_crc(
    thread_id: str,
    status: str,
    updated_at: float,
    pending_count: int,
    graph_name: str | None,
    created_at: float,
) -> int:
    """The checksum of the columns ``list_threads`` reads from the status index."""
    return crc((thread_id, status, updated_at, pending_count, graph_name, created_at))


def thread(thread_id: str, row: Sequence[Any]) -> ThreadRecord:
    """Decode a thread row (``THREAD_COLS``)."""
    status, head, graph, owner, expires, pending, created, updated, n = row[:9]
    stored, stored_head, stored_lease = row[9:12]
    what = "thread row"
    try:
        ok = (
            stored == thread_crc(thread_id, status, graph, pending, n, created, updated)
            and stored_head == head_crc(thread_id, head)
            and stored_lease == lease_crc(thread_id, owner, expires)
        )
    except TypeError:  # a column of a type no row holds
        ok = False
    if not ok or not (type(stored) is type(stored_head) is type(stored_lease) is int):
        raise damaged(thread_id, None, what, "checksum mismatch")
    if not (
        type(status) is str and status in THREAD_STATUSES and _is_opt_str(head)
        and _is_opt_str(graph) and _is_opt_str(owner) and _is_opt_time(expires)
        and _is_time(created) and _is_time(updated) and _is_count(n)
        and (pending is None or type(pending) is bytes)
    ):  # fmt: skip
        raise bad_shape(thread_id, head, what, "a column of the wrong type or value")
    ids: tuple[PauseId, ...] = ()
    if pending is not None:
        found = load_value(pending, thread_id, head, "pending pauses")
        if type(found) is not list or not found or any(type(p) is not str for p in found):
            raise bad_shape(thread_id, head, "pending pauses", f"{found!r:.80}")
        ids = tuple(found)
    if len(ids) != n:
        raise bad_shape(thread_id, head, what, f"{len(ids)} pending pauses, count {n}")
    return ThreadRecord(
        ThreadId(thread_id), cast(ThreadStatus, status), head, graph, owner, expires, ids,
        created, updated,
    )  # fmt: skip


INFO_COLS = "thread_id, status, updated_at, pending_count, graph_name, created_at, info_crc"


def info(row: Sequence[Any]) -> ThreadInfo:
    """Decode a row of ``list_threads`` (``INFO_COLS``)."""
    tid, status, updated, n, graph, created, stored = row
    try:
        ok = stored == info_crc(tid, status, updated, n, graph, created)
    except TypeError:
        ok = False
    who = tid if type(tid) is str else repr(tid)
    if not ok or type(stored) is not int or type(tid) is not str:
        raise damaged(who, None, "thread row (in the status index)", "checksum mismatch")
    if not (
        type(status) is str and status in THREAD_STATUSES and _is_time(updated)
        and _is_count(n) and _is_opt_str(graph) and _is_time(created)
    ):  # fmt: skip
        raise bad_shape(tid, None, "thread row", "a column of the wrong type or value")
    return ThreadInfo(tid, cast(ThreadStatus, status), updated, n, graph, created)


# -- checkpoints ----------------------------------------------------------------------------

CKPT_COLS = (
    "id, parent_id, step, source, channel_versions, channel_bases, body, created_at, crc,"
    " n_tasks, n_memos"
)
N_TASKS, N_MEMOS = 9, 10


def checkpoint_row(
    thread_id: str, ns: str, ck: CheckpointRecord, versions: bytes, bases: bytes | None, body: bytes
) -> tuple[Any, ...]:
    """A checkpoint's values as written (``thread_id, ns, id, ..., created_at, crc``)."""
    values = (thread_id, ns, ck.id, ck.parent_id, ck.step, ck.source, versions, bases, body,
              time_value(ck.created_at))  # fmt: skip
    return (*values, crc(values))


def checkpoint(thread_id: str, ns: str, row: Sequence[Any]) -> CheckpointRecord:
    """Decode a checkpoint row (``CKPT_COLS``)."""
    cid, parent, step, source, versions_blob, bases_blob, body_blob, created, stored = row[:9]
    who = cid if type(cid) is str else None
    try:
        values = (thread_id, ns, cid, parent, step, source, versions_blob, bases_blob,
                  body_blob, created)  # fmt: skip
        ok = stored == crc(values)
    except TypeError:
        ok = False
    if not ok or type(stored) is not int:
        raise damaged(thread_id, who, "checkpoint", "checksum mismatch")
    what = "checkpoint"
    if not (
        type(cid) is str and _is_opt_str(parent) and _is_int64(step)
        and type(source) is str and source in CHECKPOINT_SOURCES and _is_time(created)
        and type(versions_blob) is bytes and type(body_blob) is bytes
        and (bases_blob is None or type(bases_blob) is bytes)
    ):  # fmt: skip
        raise bad_shape(thread_id, who, what, "a column of the wrong type or value")
    versions = load_value(versions_blob, thread_id, cid, what)
    bases = {} if bases_blob is None else load_value(bases_blob, thread_id, cid, what)
    body = load_value(body_blob, thread_id, cid, what)
    if type(versions) is not dict:
        raise bad_shape(thread_id, cid, what, "channel versions are not a map")
    for k, v in versions.items():
        if type(k) is not str or type(v) is not int or not 0 <= v < INT64:
            raise bad_shape(thread_id, cid, what, f"channel {k!r:.40} has version {v!r:.40}")
    if type(bases) is not dict:
        raise bad_shape(thread_id, cid, what, "channel bases are not a map")
    chains = {}
    for k, b in bases.items():
        if not (
            type(b) is list and len(b) == 2 and type(b[0]) is int and type(b[1]) is int
            and 0 <= b[1] < INT64 and k in versions and -INT64 <= b[0] <= versions[k]
        ):  # fmt: skip
            raise bad_shape(thread_id, cid, what, f"channel {k!r:.40} has base {b!r:.40}")
        chains[k] = (b[0], b[1])
    if not (
        type(body) is list and len(body) == 2 and type(body[0]) is list
        and type(body[1]) is dict
    ):  # fmt: skip
        raise bad_shape(thread_id, cid, what, "its frontier and metadata are not a pair")
    frontier = []
    for t in body[0]:
        if not (
            type(t) is list and len(t) == 4 and type(t[0]) is str and type(t[1]) is str
            and type(t[2]) is bool
        ):  # fmt: skip
            raise bad_shape(thread_id, cid, what, f"a frontier entry is {t!r:.80}")
        frontier.append(TaskSpec(TaskId(t[0]), t[1], t[2], t[3]))
    return CheckpointRecord(
        id=CheckpointId(cid),
        thread_id=ThreadId(thread_id),
        ns=ns,
        parent_id=parent,
        step=step,
        source=cast(CheckpointSource, source),
        channel_versions=versions,
        frontier=tuple(frontier),
        channel_bases=chains,
        metadata=body[1],
        created_at=created,
    )


def anchored_counts(thread_id: str, row: Sequence[Any]) -> tuple[int, int]:
    """A checkpoint row's counts of task and memo rows (checked to be counts)."""
    n_tasks, n_memos = row[N_TASKS], row[N_MEMOS]
    if not (_is_count(n_tasks) and _is_count(n_memos)):
        who = row[0] if type(row[0]) is str else None
        raise damaged(thread_id, who, "checkpoint", "its counts of tasks and memos")
    return n_tasks, n_memos


# -- channels -------------------------------------------------------------------------------

CHANNEL_COLS = "c.kind, c.version, coalesce(c.blob, b.data), c.crc"
"""(The base is the one asked for: ``base = ?`` selects the rows.)"""


def channel_seed(thread_id: str, ns: str, channel: str, kind: str, base: int) -> int:
    """The checksum of a channel row's keys but its version: the same for every row of an
    append chain, so that reading one costs two ``zlib.crc32`` calls a row."""
    return crc((thread_id, ns, channel, kind, base))


def channel_crc(
    thread_id: str, ns: str, channel: str, version: int, kind: str, base: int, value: bytes
) -> int:
    """The checksum of a channel row: its keys and its value, wherever that is stored
    (``gf_channel_crc`` in SQL)."""
    seed = channel_seed(thread_id, ns, channel, kind, base)
    return zlib.crc32(value, zlib.crc32(version.to_bytes(8, "big", signed=True), seed))


def channel_blobs(
    thread_id: str, ns: str, channel: str, found: Sequence[Sequence[Any]], base: int
) -> list[bytes]:
    """The value bytes of channel rows (``CHANNEL_COLS``: a set row at ``base``, then its
    appends, which ``base = ?`` selected) after their checksums and kinds."""
    first, rest = found[0], found[1:]
    c32 = zlib.crc32
    try:
        kind, version, value, stored = first
        ok = kind == "set" and stored == channel_crc(
            thread_id, ns, channel, version, kind, base, value
        )
        if ok and rest:
            seed = channel_seed(thread_id, ns, channel, "append", base)
            ok = {r[0] for r in rest} == {"append"} and [
                c32(r[2], c32(r[1].to_bytes(8, "big", signed=True), seed)) for r in rest
            ] == [r[3] for r in rest]
    except (TypeError, AttributeError, OverflowError):  # a column of the wrong type
        ok = False
    if not ok:
        raise damaged(
            thread_id, None, f"channel {channel!r}",
            f"checksum mismatch in its rows from version {base}",
        )  # fmt: skip
    return [r[2] for r in found]


# -- tasks and memos ------------------------------------------------------------------------

TASK_COLS = "task_id, node, status, attempts, started_at, ended_at, error, body, crc"


def task_row(thread_id: str, ns: str, t: TaskRecord, body: bytes | None) -> tuple[Any, ...]:
    """A task's values as written (table order, ``crc`` last)."""
    values = (thread_id, ns, t.checkpoint_id, t.task_id, t.node, t.status, t.attempts,
              time_value(t.started_at), time_value(t.ended_at), t.error, body)  # fmt: skip
    return (*values, crc(values))


def task(thread_id: str, ns: str, checkpoint_id: str, row: Sequence[Any]) -> TaskRecord:
    """Decode a task row (``TASK_COLS``) of checkpoint ``checkpoint_id``."""
    tid, node, status, attempts, started, ended, error, body, stored = row
    what = f"task {node!r}" if type(node) is str else "task"
    try:
        values = (thread_id, ns, checkpoint_id, tid, node, status, attempts, started, ended,
                  error, body)  # fmt: skip
        ok = stored == crc(values)
    except TypeError:
        ok = False
    if not ok or type(stored) is not int:
        raise damaged(thread_id, checkpoint_id, what, "checksum mismatch")
    if not (
        type(tid) is str and type(node) is str and type(status) is str
        and status in TASK_STATUSES and _is_count(attempts) and _is_opt_time(started)
        and _is_opt_time(ended) and _is_opt_str(error)
        and (body is None or type(body) is bytes)
    ):  # fmt: skip
        raise bad_shape(thread_id, checkpoint_id, what, "a column of the wrong type or value")
    writes = routes = None
    if body is not None:
        found = load_value(body, thread_id, checkpoint_id, what)
        if type(found) is not list or len(found) != 2:
            raise bad_shape(thread_id, checkpoint_id, what, f"{found!r:.80}")
        writes, routes = found
        if routes is not None and type(routes) is not list:
            raise bad_shape(thread_id, checkpoint_id, what, "its routes are not a list")
        if writes is not None and (type(writes) is not list or any(
            type(w) not in (tuple, list) or len(w) != 2 or type(w[0]) is not str for w in writes
        )):  # fmt: skip
            raise bad_shape(thread_id, checkpoint_id, what, "its writes are not (key, value) pairs")
    return TaskRecord(
        CheckpointId(checkpoint_id), TaskId(tid), node, cast(TaskStatus, status), attempts,
        started, ended, error, writes, routes,
    )  # fmt: skip


MEMO_COLS = "task_id, key, value, created_at, crc"


def memo_row(
    thread_id: str, ns: str, checkpoint_id: str, task_id: str, key: str, value: bytes, at: float
) -> tuple[Any, ...]:
    """A memo's values as written (table order, ``crc`` last)."""
    values = (thread_id, ns, checkpoint_id, task_id, key, value, time_value(at))
    return (*values, crc(values))


def memo(
    thread_id: str, ns: str, checkpoint_id: str, row: Sequence[Any]
) -> tuple[TaskId, str, Any]:
    """Decode a memo row (``MEMO_COLS``): (task id, key, value)."""
    tid, key, value, created, stored = row
    what = f"step {key!r}" if type(key) is str else "memoized step"
    try:
        ok = stored == crc((thread_id, ns, checkpoint_id, tid, key, value, created))
    except TypeError:
        ok = False
    if not ok or type(stored) is not int:
        raise damaged(thread_id, checkpoint_id, what, "checksum mismatch")
    if not (
        type(tid) is str and type(key) is str and type(value) is bytes and _is_time(created)
    ):  # fmt: skip
        raise bad_shape(thread_id, checkpoint_id, what, "a column of the wrong type")
    return TaskId(tid), key, load_value(value, thread_id, checkpoint_id, what)


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
    try:
        ok = stored == crc((thread_id, pid, ns, cid, tid, node, kind, value, created))
    except TypeError:
        ok = False
    if not ok or type(stored) is not int:
        raise damaged(thread_id, who, what, "checksum mismatch")
    if not (
        all(type(v) is str for v in (pid, ns, cid, tid, node)) and type(kind) is str
        and kind in PAUSE_KINDS and type(value) is bytes and _is_time(created)
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
    try:
        ok = stored == crc((seq, thread_id, pid, value, by, reason, created))
    except TypeError:
        ok = False
    if not ok or type(stored) is not int:
        raise damaged(thread_id, None, what, "checksum mismatch")
    if not (
        type(pid) is str and type(value) is bytes and _is_opt_str(by) and _is_opt_str(reason)
        and _is_time(created)
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
    try:
        values = (seq, thread_id, call, verdict, fp, by, reason, applied, note, created, pid,
                  extra)  # fmt: skip
        ok = stored == crc(values)
    except TypeError:
        ok = False
    if not ok or type(stored) is not int:
        raise damaged(thread_id, None, what, "checksum mismatch")
    if not (
        type(call) is str and type(verdict) is str and verdict in VERDICTS
        and all(_is_opt_str(v) for v in (fp, by, reason, note, pid))
        and applied in (0, 1) and type(applied) is int and _is_time(created)
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
        type(tool) is str and _is_opt_str(fp) and type(owner) is str and type(status) is str
        and status in DISPATCH_STATUSES and (result is None or type(result) is bytes)
        and _is_opt_str(error) and _is_time(claimed) and _is_opt_time(completed)
    ):  # fmt: skip
        raise bad_shape(thread_id, None, what, "a column of the wrong type or value")
    value = None if result is None else load_value(result, thread_id, None, "tool result")
    return DispatchRecord(
        ThreadId(thread_id), CallId(call_id), tool, fp, owner, cast(DispatchStatus, status),
        value, error, claimed, completed,
    )  # fmt: skip
