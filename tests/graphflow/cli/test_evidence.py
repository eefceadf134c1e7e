"""``audit``, ``verify``, ``freeze`` and ``unfreeze``: the evidence log from the shell."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from typing import Any

import pytest

from graphflow.audit import AuditEntry

from .conftest import CALL, Cli

API_FIELDS = {"seq", "at", "stage", "call_id", "tool", "actor", "decision", "applied",
              "checkpoint_id", "pause_id", "detail"}  # fmt: skip


def approved(cli: Cli, thread: str = "t1") -> dict[str, Any]:
    """A thread whose tool call paused, was approved by alice and ran; its pause."""
    cli.start(thread)
    [pause] = cli("pauses", thread, "--json").json()
    assert cli("approve", thread, CALL, "--by", "alice").code == 0
    assert cli("resume", thread, "--graph", "flows:graph").code == 0
    return dict(pause)


def evidence_path(cli: Cli) -> str:
    return cli.db.removesuffix(".db") + ".evidence.db"


def tamper(cli: Cli, *statements: str) -> None:
    """Run SQL on the log's file, its guarding triggers dropped, as someone with it would."""
    db = sqlite3.connect(evidence_path(cli), isolation_level=None)
    try:
        for trigger in ("evidence_events_no_update", "evidence_events_no_delete"):
            db.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        for sql in statements:
            db.execute(sql)
    finally:
        db.close()


def edit(path: str, seq: int) -> None:
    """Change one stored event in place, as someone with the file would."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("DROP TRIGGER IF EXISTS evidence_events_no_update")
        changed = db.execute(
            "UPDATE evidence_events SET body = replace(body, 'delete_file', 'delete_fiLe') "
            "WHERE seq = ?",
            (seq,),
        ).rowcount
        assert changed == 1
    finally:
        db.close()


# -- audit ---------------------------------------------------------------------------------------
def test_audit_json_is_the_trail_with_checkpoint_and_pause_ids(cli: Cli) -> None:
    pause = approved(cli)
    got = cli("audit", "t1", "--json")
    assert got.code == 0 and got.stderr == ""
    trail = got.json()
    assert {f.name for f in dataclasses.fields(AuditEntry)} >= API_FIELDS
    assert all(set(e) == {f.name for f in dataclasses.fields(AuditEntry)} for e in trail)
    assert [e["stage"] for e in trail] == [
        "proposal", "policy", "pause", "decision", "dispatch", "result", "interrupt"
    ]  # fmt: skip
    by_stage = {e["stage"]: e for e in trail}
    assert by_stage["pause"]["pause_id"] == pause["pause_id"]
    assert by_stage["pause"]["checkpoint_id"] == pause["checkpoint_id"]
    assert by_stage["decision"]["actor"] == "alice" and by_stage["decision"]["applied"] is True
    assert by_stage["decision"]["pause_id"] == pause["pause_id"]
    assert {e["call_id"] for e in trail[:6]} == {CALL}
    assert [e["seq"] for e in trail] == sorted(e["seq"] for e in trail)
    assert trail[0]["at"].endswith("Z")


def test_audit_text_shows_each_entry_with_its_ids(cli: Cli) -> None:
    pause = approved(cli)
    got = cli("audit", "t1")
    assert got.code == 0
    header, *rows = got.stdout.splitlines()
    assert header.split()[:3] == ["SEQ", "AT", "STAGE"] and "CHECKPOINT" in header
    assert len(rows) == 7
    [pause_row] = [r for r in rows if r.split()[2] == "pause"]
    assert pause["pause_id"] in pause_row and pause["checkpoint_id"] in pause_row


def test_audit_of_a_decision_that_did_not_apply_says_why(cli: Cli) -> None:
    cli.start("t1")
    assert cli("approve", "t1", "call_nope").code == 4  # recorded, not applied
    [entry] = [e for e in cli("audit", "t1", "--json").json() if e["stage"] == "decision"]
    assert entry["applied"] is False and entry["call_id"] == "call_nope"
    assert "call_nope" in entry["detail"]
    assert " NO " in cli("audit", "t1").stdout


def test_audit_reads_an_evidence_file_given_with_evidence(cli: Cli) -> None:
    approved(cli)
    os.rename(evidence_path(cli), cli.cwd / "moved.evidence.db")
    got = cli("audit", "t1", "--evidence", str(cli.cwd / "moved.evidence.db"), "--json")
    assert got.code == 0 and len(got.json()) == 7
    missing = cli("audit", "t1", "--evidence", str(cli.cwd / "nope.db"))
    assert missing.code == 4 and "does not exist" in missing.error
    assert not (cli.cwd / "nope.db").exists()


def test_audit_of_an_unknown_thread_database_or_log_is_exit_4(cli: Cli) -> None:
    cli.start("t1")
    got = cli("audit", "nope")
    assert got.code == 4 and "no thread 'nope'" in got.error
    missing = cli("audit", "t1", "--db", str(cli.cwd / "other.db"), db=False)
    assert missing.code == 4 and not (cli.cwd / "other.db").exists()
    os.remove(evidence_path(cli))
    no_log = cli("audit", "t1")
    assert no_log.code == 4 and "does not exist" in no_log.error
    assert not os.path.exists(evidence_path(cli))


# -- verify --------------------------------------------------------------------------------------
def test_verify_an_intact_log_prints_its_head(cli: Cli) -> None:
    approved(cli)
    got = cli("verify")
    assert got.code == 0 and got.stderr == ""
    assert got.stdout.startswith("ok: 7 events in ")
    head = got.stdout.split("head ")[1].strip()
    report = cli("verify", "--json", "--expect-head", head)
    assert report.code == 0
    doc = report.json()
    assert doc["ok"] is True and doc["count"] == 7 and doc["problems"] == []
    assert f"{doc['head']['count']}:{doc['head']['hash']}" == head
    assert doc["path"] == evidence_path(cli)


def test_verify_an_edited_log_is_exit_3_naming_seq_and_kind(cli: Cli) -> None:
    approved(cli)
    edit(evidence_path(cli), 3)
    got = cli("verify")
    assert got.code == 3
    assert "does not verify" in got.error and "seq 3 modified" in got.error
    lines = got.stdout.splitlines()
    assert lines and lines[0].startswith("seq 3  modified  ")
    doc = cli("verify", "--json")
    assert doc.code == 3
    problems = doc.json()["problems"]
    assert (problems[0]["seq"], problems[0]["kind"]) == (3, "modified")
    assert all(p["detail"] for p in problems)


def test_audit_of_a_damaged_event_says_which_command_shows_what_changed(cli: Cli) -> None:
    approved(cli)
    tamper(cli, "UPDATE evidence_events SET body = substr(body, 1, 20) WHERE seq = 2")
    got = cli("audit", "t1")
    assert got.code == 1 and got.stdout == ""
    assert "seq 2 is damaged" in got.error and "run `graphflow verify`" in got.error
    assert "verify()" not in got.error


def test_audit_of_a_log_that_does_not_verify_shows_the_trail_and_exits_3(cli: Cli) -> None:
    """An event deleted from the log: the trail is printed as it reads, then one line says
    the log does not verify (exit 3)."""
    approved(cli)
    intact = cli("audit", "t1", "--json").json()
    tamper(cli, "DELETE FROM evidence_events WHERE seq = 3")
    for args in (("audit", "t1"), ("audit", "t1", "--json")):
        got = cli(*args)
        assert got.code == 3, (got.code, got.error)
        assert got.error.count("\n") <= 1 and "does not verify" in got.error
        assert "the first at seq 3: deleted" in got.error and "`graphflow verify`" in got.error
    assert len(cli("audit", "t1", "--json").json()) == len(intact) - 1


def test_verify_a_truncated_log_against_the_expected_head_is_exit_3(cli: Cli) -> None:
    approved(cli)
    head = cli("verify", "--json").json()["head"]
    db = sqlite3.connect(evidence_path(cli), isolation_level=None)
    db.execute("DROP TRIGGER IF EXISTS evidence_events_no_delete")
    db.execute("DELETE FROM evidence_events WHERE seq > 5")
    db.close()
    assert cli("verify").code == 0  # on its own, a shorter chain still holds
    got = cli("verify", "--expect-head", f"{head['count']}:{head['hash']}")
    assert got.code == 3 and got.stdout.startswith("seq 6  truncated  ")


def test_verify_a_log_whose_table_was_dropped_is_exit_3(cli: Cli) -> None:
    """Every event deleted at once (the table dropped): a problem of the log, not an error;
    nothing makes the table again, and the thread's audit says why it cannot be read."""
    approved(cli)
    head = cli("verify", "--json").json()["head"]
    db = sqlite3.connect(evidence_path(cli), isolation_level=None)
    db.execute("DROP TABLE evidence_events")
    db.close()
    got = cli("verify")
    assert got.code == 3 and got.stdout.startswith("seq 1  deleted  the log's table of events")
    doc = cli("verify", "--json", "--expect-head", f"{head['count']}:{head['hash']}")
    assert doc.code == 3
    assert [(p["seq"], p["kind"]) for p in doc.json()["problems"]] == [
        (1, "deleted"),
        (1, "truncated"),
    ]
    audit = cli("audit", "t1")
    assert audit.code == 1 and "table of events is gone" in audit.error
    assert cli("verify").code == 3  # (still gone: nothing made it again)


def test_verify_takes_an_evidence_path(cli: Cli) -> None:
    approved(cli)
    path = str(cli.cwd / "elsewhere.log")
    os.rename(evidence_path(cli), path)
    assert cli("verify", "--evidence", path).code == 0
    assert cli("verify").code == 4  # the default one is gone


def test_an_empty_evidence_path_is_a_usage_error(cli: Cli) -> None:
    approved(cli)
    for command in ("verify", "audit"):
        args = [command, "--evidence", ""] + (["t1"] if command == "audit" else [])
        got = cli(*args)
        assert got.code == 2 and got.stdout == "" and "--evidence ''" in got.error, command


def test_verify_of_a_missing_log_is_exit_4_and_creates_nothing(cli: Cli) -> None:
    got = cli("verify")
    assert got.code == 4 and "does not exist" in got.error
    assert not os.path.exists(evidence_path(cli)) and not os.path.exists(cli.db)
    other = cli("verify", "--evidence", str(cli.cwd / "x.evidence.db"))
    assert other.code == 4 and not (cli.cwd / "x.evidence.db").exists()


@pytest.mark.parametrize(
    "head",
    ["", "7", "7:", ":" + "a" * 64, "x:" + "a" * 64, "-1:" + "a" * 64, "7:" + "A" * 64,
     "7:" + "a" * 63, "7:" + "g" * 64],
)  # fmt: skip
def test_a_malformed_expect_head_is_a_usage_error(cli: Cli, head: str) -> None:
    approved(cli)
    got = cli("verify", "--expect-head", head)
    assert got.code == 2 and "COUNT:HASH" in got.error


def test_an_expect_head_of_seq_0_must_be_the_empty_logs(cli: Cli) -> None:
    approved(cli)
    got = cli("verify", "--expect-head", "0:" + "a" * 64)
    assert got.code == 2 and "the empty log's head is 0:" + "0" * 64 in got.error


def test_verify_in_a_new_process_is_one_line_and_exit_3(cli: Cli) -> None:
    approved(cli)
    edit(evidence_path(cli), 5)
    got = cli.sub("verify")
    assert got.code == 3 and "seq 5 modified" in got.error


# -- freeze and unfreeze -------------------------------------------------------------------------
def test_freeze_stops_a_thread_until_unfreeze(cli: Cli) -> None:
    cli.start("t1")
    got = cli("freeze", "t1", "--reason", "incident 7", "--by", "secops", "--json")
    assert got.code == 0 and got.stderr == ""
    assert got.json() == {"thread_id": "t1", "status": "frozen", "reason": "incident 7",
                          "by": "secops"}  # fmt: skip
    assert cli("threads", "--json").json()[0]["status"] == "frozen"
    refused = cli("approve", "t1", CALL, "--by", "alice")
    assert refused.code == 1 and "frozen" in refused.error
    blocked = cli("resume", "t1", "--graph", "flows:graph")
    assert blocked.code == 1 and "frozen" in blocked.error
    for got in (refused, blocked):  # (the command that lifts it, not the Python call)
        assert f"`graphflow unfreeze t1 --reason TEXT --db {cli.db}`" in got.error
        assert "graph." not in got.error
    assert cli("pauses", "t1", "--json").json()[0]["answered"] is False
    thawed = cli("unfreeze", "t1", "--reason", "cleared", "--by", "secops", "--json")
    assert thawed.code == 0 and thawed.json()["status"] == "paused"  # (the thread's, now)
    assert cli("approve", "t1", CALL, "--by", "alice").code == 0
    assert cli("resume", "t1", "--graph", "flows:graph").code == 0
    trail = cli("audit", "t1", "--json").json()
    marks = [(e["stage"], e["actor"], e["detail"]) for e in trail if "freeze" in e["stage"]]
    assert marks == [("freeze", "secops", "incident 7"), ("unfreeze", "secops", "cleared")]
    assert "result" in [e["stage"] for e in trail]


def test_freeze_text_and_bad_input(cli: Cli) -> None:
    cli.start("t1")
    assert cli("freeze", "nope", "--reason", "r").code == 4
    assert cli("freeze", "t1").code == 2
    assert cli("freeze", "t1", "--reason", " ").code == 2
    assert cli("unfreeze", "t1", "--reason", "r").code == 1  # not frozen
    got = cli("freeze", "t1", "--reason", "r")
    assert got.code == 0 and got.stdout == "froze thread t1: r\n"
    assert cli("freeze", "t1", "--reason", "again").code == 1
    assert cli("freeze", "t1", "--reason", "r", "--db", str(cli.cwd / "n.db"), db=False).code == 4
    assert not (cli.cwd / "n.db").exists()


def test_audit_and_verify_in_a_read_only_directory(cli: Cli, read_only: Any) -> None:
    directory = cli.cwd / "kept"
    directory.mkdir()
    cli.db = str(directory / "g.db")
    approved(cli)  # (the commands' stores and logs are closed when each returns)
    with read_only(directory):
        trail = cli("audit", "t1", "--json")
        assert trail.code == 0, trail.stderr
        assert [e["stage"] for e in trail.json()][:2] == ["proposal", "policy"]
        verified = cli("verify")
        assert verified.code == 0 and verified.stdout.startswith("ok: "), verified.stderr
    assert sorted(p.name for p in directory.iterdir()) == ["g.db", "g.evidence.db"]
