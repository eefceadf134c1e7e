"""Tampering with a real log file: each change is reported with its seq and kind."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
import rfc8785

from graphflow.errors import InvalidArgumentError
from graphflow.evidence import GENESIS, EvidenceHead, EvidenceLog, stages
from graphflow.evidence.chain import chain_hash

from ._support import facts, fill, tampering

N = 10

INSERT = "INSERT INTO evidence_events (seq, prev_hash, hash, thread_id, event_type, body) VALUES "


@pytest.fixture
def path(tmp_path: pathlib.Path) -> pathlib.Path:
    """A closed log file of N proposals (call ``c<i>`` has order ``A-<i>``)."""
    path = tmp_path / "e.db"
    fill(path, N).close()
    return path


def found(path: pathlib.Path, expected_head: EvidenceHead | None = None) -> list[tuple[int, str]]:
    report = EvidenceLog(path).verify(expected_head)
    assert report.ok == (not report.problems)
    for problem in report.problems:
        assert problem.detail
    return [(p.seq, p.kind) for p in report.problems]


def row(path: pathlib.Path, seq: int) -> tuple[str, str, str]:
    with tampering(path) as db:
        prev, digest, body = db.execute(
            "SELECT prev_hash, hash, body FROM evidence_events WHERE seq = ?", (seq,)
        ).fetchone()
    return prev, digest, body


def forge(body: str, seq: int, prev: str, **args: Any) -> tuple[str, str]:
    """An event like ``body`` written as ``seq`` after ``prev``, hashed as the log would."""
    event = json.loads(body)
    event["extensions"]["graphflow"]["seq"] = seq
    event["extensions"]["graphflow"]["detail"]["arguments"].update(args)
    data = rfc8785.dumps(event)
    return data.decode(), chain_hash(prev, seq, data)


def test_an_intact_log_verifies(path: pathlib.Path) -> None:
    log = EvidenceLog(path)
    report = log.verify(expected_head=log.head())
    assert report.ok and report.count == N and report.problems == ()
    assert report.head == log.head()
    assert EvidenceLog(":memory:").verify() .head == EvidenceHead(0, GENESIS)  # fmt: skip


def test_editing_a_field_in_the_file_bytes_is_modified(path: pathlib.Path) -> None:
    data = path.read_bytes()
    assert data.count(b'"order_id":"A-4"') == 1
    path.write_bytes(data.replace(b'"order_id":"A-4"', b'"order_id":"A-7"'))
    assert found(path) == [(4, "modified")]


def test_an_edited_event_whose_hash_was_recomputed_is_modified(path: pathlib.Path) -> None:
    prev, _, body = row(path, 6)
    body, digest = forge(body, 6, prev, order_id="A-66")
    with tampering(path) as db:
        db.execute("UPDATE evidence_events SET body = ?, hash = ? WHERE seq = 6", (body, digest))
    assert found(path) == [(6, "modified")]


@pytest.mark.parametrize("column", ["thread_id", "event_type", "prev_hash", "hash"])
def test_a_changed_column_is_modified(path: pathlib.Path, column: str) -> None:
    value = {"thread_id": "other", "event_type": "agentic_action_executed"}.get(column, "f" * 64)
    with tampering(path) as db:
        db.execute(f"UPDATE evidence_events SET {column} = ? WHERE seq = 5", (value,))
    assert found(path) == [(5, "modified")]


def test_a_deleted_event_is_deleted(path: pathlib.Path) -> None:
    with tampering(path) as db:
        db.execute("DELETE FROM evidence_events WHERE seq IN (4, 1)")
    assert found(path) == [(1, "deleted"), (4, "deleted")]


def test_deleted_events_with_the_rest_renumbered_are_deleted(path: pathlib.Path) -> None:
    with tampering(path) as db:
        db.execute("DELETE FROM evidence_events WHERE seq IN (4, 5)")
        db.execute("UPDATE evidence_events SET seq = -(seq - 2) WHERE seq > 5")
        db.execute("UPDATE evidence_events SET seq = -seq WHERE seq < 0")
    assert found(path) == [(4, "deleted")]


def test_an_inserted_event_is_inserted(path: pathlib.Path) -> None:
    """A forger who knows the hash makes room after seq 3 and writes a fitting event."""
    _, hash3, _ = row(path, 3)
    _, _, body4 = row(path, 4)
    body, digest = forge(body4, 4, hash3, order_id="FORGED", amount=10_000)
    with tampering(path) as db:
        db.execute("DROP INDEX evidence_events_prev_hash")
        db.execute("UPDATE evidence_events SET seq = -(seq + 1) WHERE seq > 3")
        db.execute("UPDATE evidence_events SET seq = -seq WHERE seq < 0")
        db.execute(
            INSERT + "(4, ?, ?, 't0', 'agentic_action_attempted', ?)",
            (hash3, digest, body),
        )
    assert found(path) == [(4, "inserted")]


def test_an_inserted_event_with_a_made_up_hash_is_inserted(path: pathlib.Path) -> None:
    body = row(path, 8)[2]
    with tampering(path) as db:
        db.execute("UPDATE evidence_events SET seq = -(seq + 1) WHERE seq > 7")
        db.execute("UPDATE evidence_events SET seq = -seq WHERE seq < 0")
        db.execute(
            INSERT + "(8, ?, ?, 't0', 'agentic_action_attempted', ?)",
            ("e" * 64, "a" * 64, body.replace("A-8", "A-X")),
        )
    assert found(path) == [(8, "inserted")]


def test_two_swapped_events_are_reordered(path: pathlib.Path) -> None:
    with tampering(path) as db:
        db.execute("UPDATE evidence_events SET seq = 100 WHERE seq = 3")
        db.execute("UPDATE evidence_events SET seq = 3 WHERE seq = 7")
        db.execute("UPDATE evidence_events SET seq = 7 WHERE seq = 100")
    assert found(path) == [(3, "reordered"), (7, "reordered")]


def test_a_truncated_tail_is_truncated_against_the_expected_head(path: pathlib.Path) -> None:
    head = EvidenceLog(path).head()
    with tampering(path) as db:
        db.execute("DELETE FROM evidence_events WHERE seq > 7")
    assert found(path) == []  # on its own, a shorter chain is a valid chain
    assert found(path, head) == [(8, "truncated")]
    assert found(path, EvidenceHead(7, row(path, 7)[1])) == []  # an older head still holds


def test_a_tail_cut_and_written_again_does_not_match_the_expected_head(
    path: pathlib.Path,
) -> None:
    head = EvidenceLog(path).head()
    with tampering(path) as db:
        db.execute("DELETE FROM evidence_events WHERE seq > 8")
    log = EvidenceLog(path)
    for i in range(3):
        log.append(stages.proposed(facts(call_id=f"new{i}")))
    assert found(path) == []
    assert found(path, head) == [(N, "modified")]


def test_an_expected_head_must_be_a_head() -> None:
    with pytest.raises(InvalidArgumentError, match="64 lowercase hex"):
        EvidenceHead(3, "ABC")
    with pytest.raises(InvalidArgumentError, match="int >= 0"):
        EvidenceHead(-1, GENESIS)
    with pytest.raises(InvalidArgumentError, match="no log's head"):
        EvidenceHead(0, "a" * 64)  # (the empty log's hash is GENESIS)
    assert EvidenceLog(":memory:").verify(EvidenceHead(0, GENESIS)).ok
    with pytest.raises(InvalidArgumentError, match="must be an EvidenceHead"):
        EvidenceLog(":memory:").verify((3, GENESIS))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("parent", "written_as"), [(N - 1, N + 1), (N - 1, N), (0, 1), (1, 2), (5, 6)]
)
def test_a_second_continuation_of_an_event_appended_at_the_end_is_one_fork(
    path: pathlib.Path, parent: int, written_as: int
) -> None:
    """Two events claiming one parent (seq ``parent``): the one stored after the last row,
    written as ``written_as``, is one fork; the rows between are not said to be
    reordered."""
    prev, _, body = row(path, parent + 1)
    body, digest = forge(body, written_as, prev, order_id="OTHER")
    with tampering(path) as db:
        db.execute("DROP INDEX evidence_events_prev_hash")
        db.execute(
            INSERT + "(?, ?, ?, 't0', 'agentic_action_attempted', ?)",
            (N + 1, prev, digest, body),
        )
    assert found(path) == [(N + 1, "forked")]
