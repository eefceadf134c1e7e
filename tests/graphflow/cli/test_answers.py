"""``approve``, ``deny``, ``answer``, ``cancel``: recorded through ``submit``, nothing runs;
each one's bad input."""

from __future__ import annotations

from typing import Any

import anyio

from checkpoints import SqliteCheckpointer
from graphflow.compiled import CompiledGraph
from graphflow.decisions import tool_call_fingerprint

from .conftest import CALL, Cli

FINGERPRINT = tool_call_fingerprint("delete_file", {"path": "/data/report.csv"})


def _decisions(cli: Cli, thread: str) -> list[Any]:
    import sys

    sys.path.insert(0, str(cli.cwd))
    import flows

    store = SqliteCheckpointer(cli.db)
    try:
        return list(CompiledGraph(flows.graph.spec, store).list_decisions(thread))
    finally:
        anyio.run(store.close)


def _steps(cli: Cli, thread: str) -> int:
    return len(cli("history", thread, "--json").json())


def test_approve_shows_the_call_then_records_it_and_runs_nothing(cli: Cli) -> None:
    cli.start("t1")
    before = _steps(cli, "t1")
    got = cli("approve", "t1", CALL, "--by", "alice", "--reason", "looks fine")
    assert got.code == 0 and got.stderr == ""
    shown, recorded = got.stdout.splitlines()
    assert shown.startswith('approve delete_file {"path": "/data/report.csv"} (call call_1, pause ')
    assert FINGERPRINT in shown
    assert recorded.startswith("recorded: approve by alice; nothing ran.")
    assert _steps(cli, "t1") == before  # nothing ran
    assert cli("threads", "--json").json()[0]["status"] == "paused"
    (d,) = _decisions(cli, "t1")
    assert (d.call_id, d.verdict, d.by, d.reason, d.applied) == (
        CALL, "approve", "alice", "looks fine", True
    )  # fmt: skip


def test_approve_json(cli: Cli) -> None:
    cli.start("t1")
    got = cli("approve", "t1", CALL, "--fingerprint", FINGERPRINT, "--json")
    assert got.code == 0 and got.stderr == ""
    doc = got.json()
    assert doc["request"]["tool_name"] == "delete_file"
    assert doc["request"]["args"] == {"path": "/data/report.csv"}
    decision = doc["decision"]
    assert (decision["call_id"], decision["verdict"]) == (CALL, "approve")
    assert decision["applied"] is True
    assert decision["fingerprint"] == FINGERPRINT
    assert decision["created_at"].endswith("Z")


def test_approve_by_pause_id(cli: Cli) -> None:
    cli.start("t1")
    (pause,) = cli("pauses", "t1", "--json").json()
    got = cli("approve", "t1", pause["pause_id"], "--json")
    assert got.code == 0, got.stderr
    assert got.json()["decision"]["pause_id"] == pause["pause_id"]


def test_approve_of_an_unknown_call_is_recorded_not_applied_and_exit_4(cli: Cli) -> None:
    cli.start("t1")
    got = cli("approve", "t1", "call_9")
    assert got.code == 4 and got.stdout == ""
    assert got.error == (
        "graphflow: error: thread 't1': the approve of 'call_9' was recorded but not applied: "
        "no pending tool call 'call_9' (pending calls: ['call_1'])"
    )
    (d,) = _decisions(cli, "t1")
    assert (d.call_id, d.applied) == ("call_9", False)


def test_approve_with_another_fingerprint_is_not_applied_and_exit_1(cli: Cli) -> None:
    cli.start("t1")
    other = tool_call_fingerprint("delete_file", {"path": "/etc"})
    got = cli("approve", "t1", CALL, "--fingerprint", other, "--json")
    assert got.code == 1 and got.stdout == ""  # (--json: nothing but data on stdout)
    assert "was recorded but not applied: fingerprint" in got.error
    assert "does not match the call's" in got.error
    assert cli("pauses", "t1", "--json").json()[0]["request"]["function_call_id"] == CALL


def test_approve_on_an_unknown_thread_is_exit_4(cli: Cli) -> None:
    cli.start("t1")
    got = cli("approve", "nope", CALL)
    assert got.code == 4 and got.stdout == "" and "no thread 'nope'" in got.error


def test_a_decision_on_a_thread_with_no_pending_pause_is_exit_4(cli: Cli) -> None:
    cli.start("t1")
    assert cli("cancel", "t1", "--reason", "r").code == 0
    for args in (["approve", "t1", CALL], ["deny", "t1", CALL, "--reason", "r"]):
        got = cli(*args)
        assert got.code == 4 and got.stdout == ""
        assert got.error == (
            f"graphflow: error: thread 't1' has no pending pause, so no pending call {CALL!r}; "
            f"`graphflow threads --db {cli.db}` shows its status"  # (the --db it was given)
        )
    assert _decisions(cli, "t1") == []


def test_deny(cli: Cli) -> None:
    cli.start("t1")
    got = cli("deny", "t1", CALL, "--reason", "keep the report", "--by", "bob")
    assert got.code == 0 and got.stderr == ""
    assert got.stdout.startswith("deny delete_file ")
    (d,) = _decisions(cli, "t1")
    assert (d.verdict, d.by, d.reason) == ("deny", "bob", "keep the report")
    done = cli("resume", "t1", "--graph", "flows:graph", "--json").json()
    tool_message = done["state"]["messages"][2]
    assert tool_message["role"] == "tool" and "keep the report" in tool_message["content"]


def test_deny_needs_a_reason(cli: Cli) -> None:
    cli.start("t1")
    for args in ([], ["--reason", "  "]):
        got = cli("deny", "t1", CALL, *args)
        assert got.code == 2 and got.stdout == ""
        assert "--reason" in got.error
    assert _decisions(cli, "t1") == []


def _to_review(cli: Cli) -> str:
    """Start t1, approve the call and resume: it pauses at ``review``; its pause id."""
    cli.start("t1")
    assert cli("approve", "t1", CALL).code == 0
    result = cli("resume", "t1", "--graph", "flows:graph", "--json").json()
    assert result["status"] == "paused"
    pause_id: str = result["pauses"][0]["pause_id"]
    return pause_id


def test_approve_of_an_interrupt_says_which_command_answers_it(cli: Cli) -> None:
    pause_id = _to_review(cli)
    got = cli("approve", "t1", pause_id)
    assert got.code == 4 and "not a tool call" in got.error and "resume=" not in got.error
    assert f"answer it with `graphflow answer t1 {pause_id} VALUE_JSON --db {cli.db}`" in (
        got.error
    )


def test_answer(cli: Cli) -> None:
    pause_id = _to_review(cli)
    got = cli("answer", "t1", pause_id, '"yes"', "--by", "carol")
    assert got.code == 0 and got.stderr == ""
    assert got.stdout.startswith(f'recorded the answer "yes" to pause {pause_id} (node review')
    assert cli("threads", "--json").json()[0]["status"] == "paused"  # nothing ran
    done = cli("resume", "t1", "--graph", "flows:graph", "--json").json()
    assert (done["status"], done["state"]["verdict"]) == ("done", "yes")


def test_answer_json(cli: Cli) -> None:
    pause_id = _to_review(cli)
    doc = cli("answer", "t1", pause_id, '{"ok": true}', "--by", "carol", "--json").json()
    assert doc["answer"] == {"ok": True} and doc["pause"]["pause_id"] == pause_id
    assert doc["pause"]["value"] == {"question": "publish?"}
    # The pause as stored now: answered (not yet applied: the next run applies it)
    assert doc["pause"]["answered"] is True and doc["pause"]["answered_by"] == "carol"
    assert doc["pause"]["answer"] == {"ok": True}


def test_answer_bad_input(cli: Cli) -> None:
    pause_id = _to_review(cli)
    bad_json = cli("answer", "t1", pause_id, "yes")
    assert bad_json.code == 2 and "VALUE_JSON is not JSON" in bad_json.error
    unknown = cli("answer", "t1", "0000000000000000:i0", '"yes"')
    assert unknown.code == 4
    assert unknown.error == (
        "graphflow: error: thread 't1' has no pending pause '0000000000000000:i0'; pending: "
        f"['{pause_id}']"
    )
    assert cli("answer", "nope", pause_id, "1").code == 4
    for not_json in ("NaN", "Infinity", "1e999", '{"a": NaN}'):  # (RFC 8259)
        got = cli("answer", "t1", pause_id, not_json)
        assert got.code == 2 and "VALUE_JSON is not JSON" in got.error, not_json
    assert cli("pauses", "t1", "--json").json()[0]["answered"] is False


def test_answer_to_a_tool_confirmation_says_to_approve(cli: Cli) -> None:
    cli.start("t1")
    (pause,) = cli("pauses", "t1", "--json").json()
    got = cli("answer", "t1", pause["pause_id"], '"approve"')
    assert got.code == 2
    assert f"answer it with graphflow approve t1 {CALL}" in got.error


def test_cancel(cli: Cli) -> None:
    cli.start("t1")
    got = cli("cancel", "t1", "--reason", "wrong report", "--by", "dan", "--json")
    assert got.code == 0 and got.stderr == ""
    assert got.json() == {"thread_id": "t1", "status": "cancelled", "reason": "wrong report",
                          "by": "dan"}  # fmt: skip
    (row,) = cli("threads", "--json").json()
    assert (row["status"], row["graph_name"]) == ("cancelled", "files")  # its name is kept
    snap = cli("show", "t1", "--json").json()
    assert snap["metadata"]["cancelled"]["reason"] == "wrong report"
    assert snap["metadata"]["cancelled"]["by"] == "dan"


def test_cancel_bad_input(cli: Cli) -> None:
    cli.start("t1")
    assert cli("cancel", "nope", "--reason", "r").code == 4
    assert cli("cancel", "t1").code == 2
    assert cli("cancel", "t1", "--reason", "").code == 2
    assert cli("cancel", "t1", "--reason", "r").code == 0
    again = cli("cancel", "t1", "--reason", "r")
    assert again.code == 1 and "was cancelled" in again.error
