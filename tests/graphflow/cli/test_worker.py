"""``graphflow worker``: ``--once`` resumes answered threads (table and ``--json``); its bad
input. (Run forever and SIGTERM: ``tests/graphflow/test_worker_processes.py``.)"""

from __future__ import annotations

from .conftest import CALL, Cli


def test_worker_once_json_resumes_an_approved_thread(cli: Cli) -> None:
    cli.start("t1")
    cli.start("t2")  # not answered: left paused
    assert cli("approve", "t1", CALL, "--by", "alice").code == 0
    got = cli("worker", "--graph", "flows:graph", "--once", "--json")
    assert got.code == 0 and got.stderr == ""
    assert got.json() == [
        {
            "thread_id": "t1",
            "status": "paused",
            "error": None,
            "graph_name": "files",
            "reason": "answered",
        },
    ]  # fmt: skip  (the tool ran; the thread now waits at review)
    (pause,) = [p for p in cli("pauses", "t1", "--json").json()]
    assert pause["node"] == "review"
    assert cli("answer", "t1", pause["pause_id"], '"yes"').code == 0
    table = cli("worker", "--graph", "flows:graph", "--once")
    assert table.code == 0 and table.stderr == ""
    head, row = table.stdout.splitlines()
    assert head.split() == ["THREAD", "STATUS", "REASON", "ERROR"]
    assert row.split() == ["t1", "done", "answered"]
    assert cli("worker", "--graph", "flows:graph", "--once").stdout == "nothing runnable\n"
    statuses = {t["thread_id"]: t["status"] for t in cli("threads", "--json").json()}
    assert statuses == {"t1": "done", "t2": "paused"}


def test_worker_reports_a_thread_of_another_graph(cli: Cli) -> None:
    cli.start("t1")
    assert cli("approve", "t1", CALL).code == 0
    got = cli("worker", "--graph", "flows:nested", "--once", "--json")
    assert got.code == 0
    [r] = got.json()
    assert (r["thread_id"], r["status"], r["graph_name"]) == ("t1", "failed", "files")
    assert "'files'" in r["error"] and "'nested'" in r["error"]


def test_worker_bad_input(cli: Cli) -> None:
    missing = cli("worker", "--graph", "flows:graph", "--once")  # no database yet
    assert missing.code == 4 and "does not exist" in missing.error
    cli.start("t1")
    bad_graph = cli("worker", "--graph", "flows:nope", "--once")
    assert bad_graph.code == 1 and "no attribute 'nope'" in bad_graph.error
    bad_n = cli("worker", "--graph", "flows:graph", "--once", "--concurrency", "0")
    assert bad_n.code == 2 and "--concurrency" in bad_n.error
    no_graph = cli("worker", "--once")
    assert no_graph.code == 2 and "--graph" in no_graph.error
