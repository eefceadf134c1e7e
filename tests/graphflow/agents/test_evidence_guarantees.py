"""Guarantees of the evidence log shown end to end:

- a full approval flow across three processes (the call pauses and that process exits; a
  second one records the approval; a third runs the call) leaves a trail whose every event
  validates against the AAEF schema, checked here with a validator of the test's own, and
  links by call id, pause id and checkpoint id to the thread's stored checkpoints;
- a log file made read-only blocks a high-risk call and lets a low-risk one run, its gap
  recorded when the file is writable again (the directory taken away is in
  ``test_evidence_trail.py``);
- a call that untrusted content influenced says so in its events, naming the source.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator, FormatChecker

from checkpoints import SqliteCheckpointer
from graphflow.evidence import EvidenceLog, validation

from ._auth_flow import REFUND, Spy, ask, build

HERE = Path(__file__).parent


@pytest.fixture
def spy(tmp_path: Path) -> Spy:
    return Spy(tmp_path / "spy.jsonl")


def child(db: Path, spy: Spy, action: str, **extra: Any) -> dict[str, Any]:
    """Run ``_auth_flow.py`` in a new process, without evidence validation on (this test
    validates what it reads back)."""
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[2])}
    env.pop("GRAPHFLOW_EVIDENCE_VALIDATE", None)
    out = subprocess.run(
        [sys.executable, str(HERE / "_auth_flow.py"), str(db), str(spy.path), action,
         json.dumps(extra)],
        capture_output=True, text=True, timeout=60, cwd=HERE.parents[2], env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_an_approval_across_three_processes_leaves_a_valid_linked_trail(
    tmp_path: Path, spy: Spy
) -> None:
    db = tmp_path / "flow.db"
    assert child(db, spy, "start", text="refund 7 500", principal="alice")["status"] == "paused"
    approve = {REFUND: {"verdict": "approve", "by": "carol", "reason": "checked"}}
    assert child(db, spy, "submit", decisions=approve, by="carol") == {
        "status": "submitted", "ignored": 0
    }  # fmt: skip
    assert spy.runs() == []  # recording the approval ran nothing
    assert child(db, spy, "resume")["status"] == "done"
    assert len(spy.runs("issue_refund")) == 1

    log = EvidenceLog(tmp_path / "flow.evidence.db", validate=False)
    records = log.events("t1")
    validator = Draft202012Validator(validation.schema(), format_checker=FormatChecker())
    for r in records:
        errors = [e.message for e in validator.iter_errors(r.event)]
        assert errors == [], (r.seq, r.event_type, errors)
    assert log.verify().ok

    g = build(SqliteCheckpointer(db), spy)
    history = g.get_state_history("t1")
    checkpoints = {s.checkpoint_id for s in history}
    [pause] = [p for s in history for p in s.pauses]
    ext = [r.event["extensions"]["graphflow"] for r in records]
    assert [x["stage"] for x in ext] == [
        "proposed", "policy_decision", "paused", "decision_received", "dispatch_claimed",
        "executed",
    ]  # fmt: skip
    assert {x["call_id"] for x in ext} == {REFUND}
    assert all(x["checkpoint_id"] in checkpoints for x in ext), (ext, checkpoints)
    assert ext[2]["pause_id"] == ext[3]["pause_id"] == pause.id
    assert ext[2]["checkpoint_id"] == pause.checkpoint_id
    assert ext[4]["nonce"] == pause.id  # the dispatch is claimed under the approved pause
    digest = pause.request.action_digest  # type: ignore[attr-defined]
    assert ext[4]["action_digest"] == ext[5]["action_digest"] == digest
    assert records[3].event["approval"]["approver_id"] == "carol"
    assert records[5].event["result"]["status"] == "allowed_after_approval"
    assert [r.seq for r in records] == sorted(r.seq for r in records)
    trail = g.audit("t1")
    assert [e.seq for e in trail] == [r.seq for r in records]
    assert trail[3].stage == "decision" and trail[3].actor == "carol" and trail[3].applied


# -- a read-only log file ------------------------------------------------------------------------
@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` read-only: by its mode, or for root as an immutable file. (Its -shm file
    is left alone: SQLite maps it into memory, and a mapped file made immutable faults.)"""
    files = [path]
    if os.geteuid() != 0:
        for f in files:
            os.chmod(f, 0o444)
        undo = [["chmod", "644", str(f)] for f in files]
    else:
        undo = []
        for f in files:
            try:
                made = subprocess.run(["chattr", "+i", str(f)], capture_output=True).returncode
            except FileNotFoundError:
                made = 1
            if made != 0:
                for cmd in undo:
                    subprocess.run(cmd, check=True)
                pytest.skip("cannot make a file read-only for root here (no chattr +i)")
            undo.append(["chattr", "-i", str(f)])
    try:
        assert not os.access(path, os.W_OK)
        yield
    finally:
        for cmd in undo:
            subprocess.run(cmd, check=True)


def started_log(tmp_path: Path, spy: Spy) -> tuple[EvidenceLog, Any]:
    """A graph on SQLite with an explicit log that already holds another thread's trail."""
    log = EvidenceLog(tmp_path / "e.db")
    g = build(SqliteCheckpointer(tmp_path / "s.db"), spy, evidence=log)
    assert g.invoke(ask("refund 1 10"), thread_id="before", principal="alice").status == "done"
    return log, g


def test_a_read_only_log_blocks_a_high_risk_call_until_it_is_writable(
    tmp_path: Path, spy: Spy
) -> None:
    log, g = started_log(tmp_path, spy)
    with read_only(tmp_path / "e.db"):
        [p] = g.invoke(ask("refund 7 50"), thread_id="t", principal="alice").pauses
        assert p.request is not None and p.request.policy_decision == "defer"
        assert p.request.reason is not None
        assert p.request.reason.startswith("evidence unavailable: ")
        assert g.invoke(None, thread_id="t").status == "paused"  # still read-only
        assert len(spy.runs("issue_refund")) == 1  # the earlier thread's only
    assert g.invoke(None, thread_id="t").status == "done"
    assert len(spy.runs("issue_refund")) == 2
    stages = [r.event["extensions"]["graphflow"]["stage"] for r in log.events("t")]
    assert stages[0] == "proposed" and stages[-2:] == ["dispatch_claimed", "executed"]
    assert log.verify().ok


def test_a_read_only_log_lets_a_low_risk_call_run_and_records_the_gap_later(
    tmp_path: Path, spy: Spy
) -> None:
    log, g = started_log(tmp_path, spy)
    with read_only(tmp_path / "e.db"):
        assert g.invoke(ask("inbox"), thread_id="t", principal="alice").status == "done"
        assert [r["tool"] for r in spy.runs("read_inbox")] == ["read_inbox"]
        assert log.events("t") == []
    trail = g.audit("t")  # writable again: what the outbox kept is written now
    records = log.events("t")
    [gap] = [r.event for r in records if r.event["extensions"]["graphflow"]["stage"] == "gap"]
    assert "executed" in gap["extensions"]["graphflow"]["gap"]["missed"]
    assert "executed" in [r.event["extensions"]["graphflow"]["stage"] for r in records]
    assert trail[-1].stage == "result" and len(trail) == len(records)
    assert log.verify().ok


# -- provenance of untrusted content ------------------------------------------------------------
def test_a_call_influenced_by_untrusted_content_says_so_and_names_the_source(spy: Spy) -> None:
    from checkpoints import MemoryCheckpointer

    g = build(MemoryCheckpointer(), spy)
    g.invoke(ask("inbox, then refund 7 50"), thread_id="tainted", principal="alice")
    g.invoke(ask("refund 7 50"), thread_id="clean", principal="alice")
    log = g.evidence
    assert log is not None

    def contexts(thread: str) -> list[dict[str, Any]]:
        return [r.event["context"] for r in log.events(thread)
                if r.event["extensions"]["graphflow"]["call_id"] == REFUND]  # fmt: skip

    tainted, clean = contexts("tainted"), contexts("clean")
    assert tainted and all(c["untrusted_content_influenced_action"] is True for c in tainted)
    assert all(
        c["input_sources"] == [{"source_type": "untrusted_content", "source_id":
                                "tool:read_inbox", "trust_level": "untrusted"}]
        for c in tainted
    )  # fmt: skip
    assert clean and all(c["untrusted_content_influenced_action"] is False for c in clean)
    assert all("input_sources" not in c for c in clean)
