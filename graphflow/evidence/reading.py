"""Reading an evidence log back: its events, its head, ``verify``, and the JSONL export.

Reading trusts nothing it did not check: ``events`` returns the stored events as they are;
``verify`` recomputes every hash (``graphflow.evidence.verification``). An export carries
each event's seq, prev_hash and hash, so ``verify_jsonl`` checks one on its own, without
the log.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import rfc8785

from graphflow.errors import InvalidArgumentError
from graphflow.evidence import verification
from graphflow.evidence.chain import GENESIS, EvidenceHead, StoredRow, canonical_bytes, with_hashes
from graphflow.evidence.errors import EvidenceError
from graphflow.evidence.store import EvidenceStore, last_row, select_rows, stream_rows
from graphflow.evidence.verification import VerifyReport


@dataclass(frozen=True, slots=True)
class EvidenceRecord:
    """One stored event: ``seq``, ``prev_hash`` and ``hash`` (lowercase hex), ``event`` (the
    AAEF event, with ``extensions.graphflow.prev_hash`` and ``evidence.evidence_hash``),
    ``event_type`` and ``thread_id`` (None for an event of no thread)."""

    seq: int
    prev_hash: str
    hash: str
    event: dict[str, Any]
    event_type: str
    thread_id: str | None


def record(path: str, row: StoredRow) -> EvidenceRecord:
    """The record of a stored row of the log at ``path``.

    Raises:
        EvidenceError: its bytes are not a JSON object (run ``verify``).
    """
    try:
        event = json.loads(row.body)
        if not isinstance(event, dict):
            raise ValueError("not a JSON object")
        full = with_hashes(event, str(row.prev_hash), str(row.hash))
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise EvidenceError(
            f"evidence log {path!r}: the event at seq {row.seq} is damaged ({e}); "
            "run verify() to see what was changed",
            path=path,
        ) from e
    return EvidenceRecord(
        row.seq,
        str(row.prev_hash),
        str(row.hash),
        full,
        str(row.event_type),
        row.thread_id if isinstance(row.thread_id, str) else None,
    )


def events(
    store: EvidenceStore, thread_id: str | None = None, since: int | None = None
) -> list[EvidenceRecord]:
    """``EvidenceLog.events``: the stored events in seq order (see there)."""
    if thread_id is not None and not isinstance(thread_id, str):
        raise InvalidArgumentError(f"thread_id must be a str or None, not {thread_id!r}")
    if since is not None and (type(since) is not int or since < 0):
        raise InvalidArgumentError(f"since must be a seq (an int >= 0) or None, not {since!r}")
    with store.reading() as conn:
        rows = select_rows(conn, thread_id, since)
    return [record(store.path, row) for row in rows]


def head(store: EvidenceStore) -> EvidenceHead:
    """``EvidenceLog.head``: the last event's seq and hash."""
    with store.reading() as conn:
        row = last_row(conn)
    if row is None:
        return EvidenceHead(0, GENESIS)
    try:
        return EvidenceHead(row[0], row[1])
    except InvalidArgumentError as e:
        raise EvidenceError(
            f"evidence log {store.path!r}: its last event is damaged ({e}); run verify()",
            path=store.path,
        ) from e


_HAS_EVENTS = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'evidence_events'"


def verify(store: EvidenceStore, expected_head: EvidenceHead | None = None) -> VerifyReport:
    """``EvidenceLog.verify``: read the rows once; classify them only when they do not hold."""
    if expected_head is not None and not isinstance(expected_head, EvidenceHead):
        raise InvalidArgumentError(
            f"expected_head must be an EvidenceHead, not {type(expected_head).__name__}"
        )
    with store.reading() as conn:
        if not conn.execute(_HAS_EVENTS).fetchone()[0]:  # (the file is ours: _setup saw it)
            gone = verification.VerifyProblem(
                1, "deleted", "the log's table of events is gone: every event was deleted"
            )
            report = verification.classify([], expected_head)
            return dataclasses.replace(report, ok=False, problems=(gone, *report.problems))
        scanned = verification.scan(stream_rows(conn), expected_head)
        if scanned.problem is None:
            return scanned.report()
        rows = list(stream_rows(conn))
    return verification.classify(rows, expected_head)


def export_jsonl(store: EvidenceStore, path: str | os.PathLike[str]) -> int:
    """``EvidenceLog.export_jsonl``: every event, one JSON object per line; the count."""
    out_path = os.fspath(path)
    count = 0
    try:
        with (
            open(out_path, "w", encoding="utf-8", newline="\n") as out,
            store.reading() as conn,
        ):
            for row in stream_rows(conn):
                event = record(store.path, row).event
                out.write(json.dumps(event, ensure_ascii=False, separators=(",", ":")))
                out.write("\n")
                count += 1
    except OSError as e:
        raise EvidenceError(
            f"cannot export evidence log {store.path!r} to {out_path!r}: {e}", path=out_path
        ) from e
    return count


def verify_jsonl(
    path: str | os.PathLike[str], expected_head: EvidenceHead | None = None
) -> VerifyReport:
    """Verify an ``export_jsonl`` file on its own: line N must be the event of seq N.

    Raises:
        EvidenceError: the file cannot be read.
    """
    file_path = os.fspath(path)
    exported: list[dict[str, Any]] = []
    try:
        with open(file_path, encoding="utf-8") as f:
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:
                    event = {}
                exported.append(event if isinstance(event, dict) else {})
    except (OSError, UnicodeDecodeError) as e:
        raise EvidenceError(
            f"cannot read evidence export {file_path!r}: {e}", path=file_path
        ) from e
    return verification.verify_rows(rows_from_events(exported), expected_head)


def rows_from_events(exported: Iterable[dict[str, Any]]) -> list[StoredRow]:
    """Rows rebuilt from exported events (in file order), for ``verify_jsonl``."""
    rows = []
    for n, event in enumerate(exported, 1):
        ext = event.get("extensions") if isinstance(event, dict) else None
        graphflow = ext.get("graphflow") if isinstance(ext, dict) else None
        graphflow = graphflow if isinstance(graphflow, dict) else {}
        evidence = event.get("evidence") if isinstance(event, dict) else None
        evidence_hash = evidence.get("evidence_hash") if isinstance(evidence, dict) else None
        digest = evidence_hash[7:] if isinstance(evidence_hash, str) else None
        try:
            body = canonical_bytes(event) if isinstance(event, dict) else b""
        except (rfc8785.CanonicalizationError, TypeError, ValueError):
            body = b""
        prev = graphflow.get("prev_hash")
        rows.append(
            StoredRow(
                n,
                prev if isinstance(prev, str) else None,  # (what JSON holds may be unhashable)
                digest,
                body,
                graphflow.get("thread_id"),
                event.get("event_type") if isinstance(event, dict) else None,
            )
        )
    return rows
