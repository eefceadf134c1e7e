"""End to end, each command a new process: run pauses, ``pauses`` shows the call,
``approve`` records it, ``resume`` runs it, ``answer`` and ``resume`` finish the thread."""

from __future__ import annotations

import json

from .conftest import CALL, USER, Cli


def test_run_pauses_approve_resume_answer_resume(cli: Cli) -> None:
    run = cli.sub("run", "--graph", "flows:graph", "--thread", "t1", "--input", json.dumps(USER))
    assert run.code == 0 and run.stderr == ""
    assert "thread t1: paused, waiting for answer" in run.stdout

    shown = cli.sub("pauses", "--json")
    assert shown.code == 0 and shown.stderr == ""
    (pause,) = json.loads(shown.stdout)
    request = pause["request"]
    assert (request["tool_name"], request["function_call_id"]) == ("delete_file", CALL)
    assert request["args"] == {"path": "/data/report.csv"}

    approved = cli.sub("approve", "t1", CALL, "--by", "alice", "--fingerprint",
                       request["fingerprint"])  # fmt: skip
    assert approved.code == 0 and approved.stderr == ""
    assert approved.stdout.startswith('approve delete_file {"path": "/data/report.csv"}')
    assert json.loads(cli.sub("threads", "--json").stdout)[0]["status"] == "paused"

    resumed = cli.sub("resume", "t1", "--graph", "flows:graph")
    assert resumed.code == 0 and resumed.stderr == ""
    assert resumed.stdout.startswith('[step 0] file_manager -> {"messages": [')
    assert "review paused (interrupt)" in resumed.stdout

    (question,) = json.loads(cli.sub("pauses", "t1", "--json").stdout)
    assert question["kind"] == "interrupt" and question["request"] is None
    answered = cli.sub("answer", "t1", question["pause_id"], '"ship it"')
    assert answered.code == 0 and answered.stderr == ""

    done = cli.sub("resume", "t1", "--graph", "flows:graph", "--json")
    assert done.code == 0 and done.stderr == ""
    result = json.loads(done.stdout)
    assert (result["status"], result["state"]["verdict"], result["pauses"]) == (
        "done", "ship it", []
    )  # fmt: skip
    assert result["state"]["messages"][-1]["content"] == "Deleted."
    assert json.loads(cli.sub("threads", "--json").stdout)[0]["status"] == "done"
    assert json.loads(cli.sub("pauses", "--json").stdout) == []


def test_deny_then_resume_tells_the_model(cli: Cli) -> None:
    cli.start("t1")
    denied = cli.sub("deny", "t1", CALL, "--reason", "keep it")
    assert denied.code == 0 and denied.stderr == ""
    resumed = json.loads(cli.sub("resume", "t1", "--graph", "flows:graph", "--json").stdout)
    tool = resumed["state"]["messages"][2]
    assert tool["role"] == "tool" and "keep it" in tool["content"]


def test_errors_in_subprocesses_are_one_line(cli: Cli) -> None:
    missing = cli.sub("threads")
    assert missing.code == 4 and missing.stdout == ""
    assert missing.stderr == (
        f"graphflow: error: database {cli.db!r} does not exist (nothing was created); pass "
        "--db with the file your graph runs on, or set GRAPHFLOW_DB\n"
    )
    cli.start("t1")
    unknown = cli.sub("approve", "t1", "nope")
    assert unknown.code == 4 and unknown.stdout == ""
    assert len(unknown.stderr.splitlines()) == 1
    bad_graph = cli.sub("resume", "t1", "--graph", "nowhere:graph")
    assert bad_graph.code == 1 and bad_graph.stdout == ""
    assert bad_graph.error.startswith("graphflow: error: --graph 'nowhere:graph': no module")


def test_the_approval_flow_through_the_cli_alone(cli: Cli) -> None:
    """run pauses, pauses shows the call, approve records it, worker --once resumes it,
    audit shows the trail, verify passes; a tampered log makes verify exit 3. Each command
    is a new process."""
    from .test_evidence import edit, evidence_path

    run = cli.sub("run", "--graph", "flows:graph", "--thread", "t1", "--input", json.dumps(USER))
    assert run.code == 0 and "thread t1: paused" in run.stdout
    (pause,) = json.loads(cli.sub("pauses", "--json").stdout)
    assert pause["request"]["function_call_id"] == CALL
    assert cli.sub("approve", "t1", CALL, "--by", "alice").code == 0
    assert json.loads(cli.sub("threads", "--json").stdout)[0]["status"] == "paused"

    worked = cli.sub("worker", "--graph", "flows:graph", "--once", "--json")
    assert worked.code == 0 and worked.stderr == ""
    (result,) = json.loads(worked.stdout)
    assert (result["thread_id"], result["status"]) == ("t1", "paused")  # at the review
    assert cli.sub("worker", "--graph", "flows:graph", "--once", "--json").stdout.strip() == "[]"

    trail = json.loads(cli.sub("audit", "t1", "--json").stdout)
    stages = [e["stage"] for e in trail if e["call_id"] == CALL]
    assert stages == ["proposal", "policy", "pause", "decision", "dispatch", "result"]
    decision = next(e for e in trail if e["stage"] == "decision")
    assert decision["actor"] == "alice" and decision["pause_id"] == pause["pause_id"]
    assert decision["checkpoint_id"] == pause["checkpoint_id"]

    verified = cli.sub("verify")
    assert verified.code == 0, verified.stderr
    edit(evidence_path(cli), 2)
    tampered = cli.sub("verify")
    assert tampered.code == 3 and "2" in tampered.stdout and tampered.stderr.count("\n") == 1
