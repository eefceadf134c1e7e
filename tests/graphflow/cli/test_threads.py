"""``threads``, ``show``, ``history``, ``pauses``: text and ``--json``, and their bad input."""

from __future__ import annotations

import dataclasses
import json
import sqlite3

from graphflow.types import ToolConfirmationRequest

from .conftest import CALL, Cli

RFC3339 = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$"


def test_threads_lists_and_filters(cli: Cli) -> None:
    cli.start("t1")
    cli.start("t2")
    assert cli("cancel", "t2", "--reason", "not needed").code == 0
    rows = cli("threads", "--json").json()
    assert [(r["thread_id"], r["status"], r["pending_pauses"]) for r in rows] == [
        ("t2", "cancelled", 0),
        ("t1", "paused", 1),
    ]
    assert set(rows[0]) == {
        "thread_id", "status", "updated_at", "pending_pauses", "graph_name", "created_at"
    }  # fmt: skip
    assert rows[1]["graph_name"] == "files"
    import re

    assert re.match(RFC3339, rows[1]["updated_at"]) and re.match(RFC3339, rows[1]["created_at"])
    paused = cli("threads", "--status", "paused", "--json").json()
    assert [r["thread_id"] for r in paused] == ["t1"]
    both = cli("threads", "--status", "paused", "--status", "cancelled", "--json").json()
    assert [r["thread_id"] for r in both] == ["t2", "t1"]
    text = cli("threads")
    assert text.code == 0 and text.stderr == ""
    header, *lines = text.stdout.splitlines()
    assert header.split() == ["THREAD", "STATUS", "PENDING", "PAUSES", "UPDATED"]
    assert [line.split()[:3] for line in lines] == [["t2", "cancelled", "0"], ["t1", "paused", "1"]]
    assert cli("threads", "--status", "done").stdout == "no threads with status done\n"


def test_threads_pages_in_thread_id_order_with_the_next_cursor(cli: Cli) -> None:
    for thread in ("t3", "t1", "t2"):
        cli.start(thread)
    assert cli("cancel", "t2", "--reason", "not needed").code == 0
    first = cli("threads", "--limit", "2", "--json").json()
    assert [r["thread_id"] for r in first["threads"]] == ["t1", "t2"]
    assert first["next_cursor"] == "t2"
    assert set(first) == {"threads", "next_cursor"}
    assert set(first["threads"][0]) == set(cli("threads", "--json").json()[0])  # fields as before
    last = cli("threads", "--limit", "2", "--after", "t2", "--json").json()
    assert ([r["thread_id"] for r in last["threads"]], last["next_cursor"]) == (["t3"], None)
    exact = cli("threads", "--limit", "3", "--json").json()  # a full page that is the last
    assert (len(exact["threads"]), exact["next_cursor"]) == (3, None)
    rest = cli("threads", "--after", "t1", "--json").json()
    assert ([r["thread_id"] for r in rest["threads"]], rest["next_cursor"]) == (["t2", "t3"], None)
    paused = cli("threads", "--status", "paused", "--limit", "1", "--json").json()
    assert ([r["thread_id"] for r in paused["threads"]], paused["next_cursor"]) == (["t1"], "t1")
    both = cli("threads", "--status", "cancelled", "--status", "paused", "--limit", "2", "--json")
    assert [r["thread_id"] for r in both.json()["threads"]] == ["t1", "t2"]
    text = cli("threads", "--limit", "2")
    assert text.code == 0 and text.stderr == ""
    header, *lines = text.stdout.splitlines()
    assert header.split() == ["THREAD", "STATUS", "PENDING", "PAUSES", "UPDATED"]
    assert [line.split()[:2] for line in lines[:-1]] == [["t1", "paused"], ["t2", "cancelled"]]
    assert lines[-1] == "next page: --after t2"
    assert cli("threads", "--limit", "5", "--after", "t2").stdout.splitlines()[-1].startswith("t3")
    assert cli("threads", "--after", "t3").stdout == "no threads after 't3'\n"


def test_threads_refuses_a_bad_page(cli: Cli) -> None:
    cli.start("t1")
    for args, said in (
        (["--limit", "0"], "Invalid value for '--limit': 0 is not in the range x>=1"),
        (["--limit", "ten"], "Invalid value for '--limit': 'ten' is not a valid integer range"),
        (["--limit", "-3", "--json"], "Invalid value for '--limit': -3 is not in the range"),
        (["--after", "bad\udcffid"], "Invalid value for '--after': after 'bad\\udcffid' is not"
                                      " a cursor of the thread-id order"),
    ):  # fmt: skip
        got = cli("threads", *args)
        assert (got.code, got.stdout) == (2, ""), args
        assert got.error.startswith(f"graphflow: error: {said}"), got.error
        assert got.error.endswith("(see 'graphflow threads --help')")


def test_show(cli: Cli) -> None:
    cli.start("t1")
    snap = cli("show", "t1", "--json").json()
    assert set(snap) == {
        "values", "next", "tasks", "pauses", "step", "checkpoint_id",
        "parent_checkpoint_id", "created_at", "metadata",
    }  # fmt: skip
    assert snap["next"] == ["file_manager"]
    assert snap["values"]["messages"][0]["content"] == "delete the report"
    (task,) = snap["tasks"]
    assert (task["name"], task["status"], task["attempts"]) == ("file_manager", "paused", 1)
    assert task["pauses"][0]["request"]["function_call_id"] == CALL
    assert snap["pauses"] == task["pauses"]
    text = cli("show", "t1")
    assert text.code == 0 and text.stderr == ""
    assert "next: file_manager" in text.stdout
    assert "file_manager  paused  attempts 1" in text.stdout
    assert '"delete the report"' in text.stdout


def test_show_with_the_graph_types_the_state(cli: Cli) -> None:
    cli.start("t1")
    typed = cli("show", "t1", "--graph", "flows:graph", "--json").json()
    untyped = cli("show", "t1", "--json").json()
    assert typed == untyped  # the messages are revived by the library's own registrations
    assert typed["values"]["verdict"] == ""


def test_show_subgraphs(cli: Cli) -> None:
    got = cli("run", "--graph", "flows:nested", "--thread", "n1", "--input", "{}", "--json")
    assert got.json()["status"] == "paused"
    flat = cli("show", "n1", "--json").json()
    assert [t["state"] for t in flat["tasks"]] == [None]
    for extra in ([], ["--graph", "flows:nested"]):  # with or without the graph's code
        deep = cli("show", "n1", "--subgraphs", *extra, "--json").json()
        (task,) = deep["tasks"]
        assert task["name"] == "sub"
        inner = task["state"]
        assert inner["next"] == ["check"]
        assert inner["tasks"][0]["pauses"][0]["value"] == "inner ok?"
        assert inner["tasks"][0]["pauses"][0]["node"] == "sub.check"
    text = cli("show", "n1", "--subgraphs").stdout
    assert "    next: check" in text


def test_show_and_history_of_an_unknown_thread_are_exit_4(cli: Cli) -> None:
    cli.start("t1")
    for command in ("show", "history"):
        got = cli(command, "nope", "--json")
        assert got.code == 4 and got.stdout == ""
        assert got.error == (
            f"graphflow: error: no thread 'nope' in database {cli.db!r}; `graphflow threads "
            f"--db {cli.db}` lists them"
        )


def test_history_newest_first(cli: Cli) -> None:
    cli.start("t1")
    assert cli("approve", "t1", CALL, "--json").code == 0
    assert cli("resume", "t1", "--graph", "flows:graph", "--json").code == 0
    snaps = cli("history", "t1", "--json").json()
    steps = [s["step"] for s in snaps]
    assert steps == sorted(steps, reverse=True) and len(steps) >= 2
    assert snaps[0]["next"] == ["review"]
    assert [s["metadata"]["source"] for s in snaps][-1] == "input"
    limited = cli("history", "t1", "--limit", "1", "--json").json()
    assert limited == snaps[:1]
    text = cli("history", "t1")
    header, *rows = text.stdout.splitlines()
    assert header.split()[:3] == ["STEP", "CHECKPOINT", "SOURCE"] and len(rows) == len(snaps)
    assert cli("history", "t1", "--limit", "0").code == 2


def test_pauses_show_the_full_confirmation_payload(cli: Cli) -> None:
    cli.start("t1")
    got = cli("pauses", "t1", "--json")
    assert got.code == 0 and got.stderr == ""
    (p,) = got.json()
    assert {"thread_id", "pause_id", "kind", "node", "checkpoint_id", "value", "request"} <= set(p)
    assert (p["thread_id"], p["kind"], p["node"]) == ("t1", "tool_confirmation", "file_manager")
    fields = {f.name for f in dataclasses.fields(ToolConfirmationRequest)}
    assert set(p["request"]) == fields  # every field the request has
    assert p["request"]["tool_name"] == "delete_file"
    assert p["request"]["args"] == {"path": "/data/report.csv"}
    assert p["request"]["fingerprint"].startswith("sha256:")
    text = cli("pauses", "t1").stdout
    for name in ("tool", "call id", "args", "fingerprint", "agent"):
        assert f"\n  {name} " in text
    assert '{"path": "/data/report.csv"}' in text
    assert f"graphflow approve t1 {CALL}" in text


def test_pauses_of_every_paused_thread(cli: Cli) -> None:
    cli.start("t0")
    assert cli("cancel", "t0", "--reason", "r").code == 0
    assert cli("pauses", "--json").json() == []
    assert cli("pauses").stdout == "no pending pauses\n"
    cli.start("t1")
    cli.start("t2")
    got = cli("run", "--graph", "flows:nested", "--thread", "n1", "--input", "{}", "--json")
    assert got.code == 0
    found = cli("pauses", "--json").json()
    assert sorted((p["thread_id"], p["kind"]) for p in found) == [
        ("n1", "interrupt"), ("t1", "tool_confirmation"), ("t2", "tool_confirmation"),
    ]  # fmt: skip
    interrupt = next(p for p in found if p["kind"] == "interrupt")
    assert interrupt["request"] is None and interrupt["value"] == "inner ok?"
    assert "graphflow answer n1 " in cli("pauses").stdout


def test_pauses_of_an_unknown_thread_is_exit_4(cli: Cli) -> None:
    cli.start("t1")
    got = cli("pauses", "nope", "--json")
    assert got.code == 4 and got.stdout == "" and "no thread 'nope'" in got.error


def test_a_type_of_the_graph_read_without_it_says_to_pass_it(cli: Cli) -> None:
    (cli.cwd / "typed.py").write_text(
        "from pydantic import BaseModel\n"
        "from graphflow import END, START, StateGraph, interrupt\n"
        "class Item(BaseModel):\n    name: str\n"
        "class S(BaseModel):\n    item: Item | None = None\n"
        "def a(s: S) -> dict:\n    interrupt('ok?')\n    return {}\n"
        "def b(s: S) -> dict:\n    return {'item': Item(name='x')}\n"
        "g = StateGraph(S).add_node(a).add_node(b).add_edge(START, 'b').add_edge('b', 'a')\n"
        "graph = g.add_edge('a', END).compile()\n"
    )
    assert cli.sub("run", "--graph", "typed:graph", "--thread", "t", "--input", "{}").code == 0
    without = cli.sub("show", "t", "--json")
    assert without.code == 1 and without.stdout == ""
    assert "'typed.Item' is not registered" in without.error
    assert without.error.endswith("pass --graph MODULE:ATTR")
    with_graph = cli.sub("show", "t", "--graph", "typed:graph", "--json")
    assert with_graph.code == 0
    assert json.loads(with_graph.stdout)["values"]["item"] == {"name": "x"}


def test_a_damaged_store_says_to_restore_it_and_not_to_pass_the_graph(cli: Cli) -> None:
    cli.start("t1")
    conn = sqlite3.connect(cli.db)
    with conn:
        conn.execute("DELETE FROM gf_pauses")
    conn.close()
    for command in (["pauses", "t1"], ["show", "t1"]):
        got = cli(*command, "--json")
        assert got.code == 1 and got.stdout == "", command
        assert got.error.endswith("restore the store from a backup"), got.error
        assert "--graph" not in got.error and "\n" not in got.error.strip()


def test_pauses_and_show_agree_that_an_approved_call_is_answered(cli: Cli) -> None:
    cli.start("t1")
    assert cli("approve", "t1", CALL, "--by", "alice").code == 0
    (pause,) = cli("pauses", "t1", "--json").json()
    shown = [p for task in cli("show", "t1", "--json").json()["tasks"] for p in task["pauses"]]
    assert (pause["answered"], pause["answered_by"]) == (True, "alice")
    assert [(p["pause_id"], p["answered"], p["answered_by"]) for p in shown] == [
        (pause["pause_id"], True, "alice")
    ]


SECRET_FLOW = '''\
from graphflow import END, START, StateGraph
from graphflow.agents import (
    Agent, AgentNode, MessagesState, ModelResponse, ScriptedModel, ToolCall, tool,
)


@tool(describe=lambda a: {"calls": a["url"], "key": a["api_key"]})
def call_api(url: str, api_key: str) -> dict:
    """Call an API."""
    return {"ok": True}


ARGS = {"url": "https://api.example/v1?token=tok-abcdef", "api_key": "hunter2-key-value"}
model = ScriptedModel([
    ModelResponse(tool_calls=[ToolCall(id="call_1", name="call_api", args=ARGS)]),
    ModelResponse(text="done"),
])
agent = Agent(name="caller", model=model, tools=[call_api], require_confirmation=["call_api"])
graph = (StateGraph(MessagesState).add_node(AgentNode(agent)).add_edge(START, "caller")
         .add_edge("caller", END).compile(name="secret"))
'''


def test_a_calls_secrets_are_shown_as_digests_by_every_command(cli: Cli) -> None:
    import sys

    from graphflow.evidence.redact import digest

    (cli.cwd / "secretflow.py").write_text(SECRET_FLOW, encoding="utf-8")
    try:
        ran = cli("run", "--graph", "secretflow:graph", "--thread", "s", "--input", "{}")
        outputs = [
            ran,
            cli("run", "--graph", "secretflow:graph", "--thread", "s2", "--input", "{}", "--json"),
            cli("pauses"),
            cli("pauses", "--json"),
            cli("pauses", "s", "--graph", "secretflow:graph", "--json"),
            cli("show", "s"),
            cli("show", "s", "--json"),
            cli("history", "s", "--json"),
            cli("deny", "s2", CALL, "--by", "bob", "--reason", "no", "--json"),
            cli("approve", "s", CALL, "--by", "alice", "--json"),
            cli("approve", "s", CALL, "--by", "alice"),
        ]
        assert all(o.code == 0 for o in outputs), [o.stderr for o in outputs]
        for o in outputs:
            assert "hunter2" not in o.stdout and "tok-abcdef" not in o.stdout, o.stdout
        request = cli("pauses", "s", "--json").json()[0]["request"]
        assert request["describe"]["key"] == digest("hunter2-key-value")
        assert request["args"]["api_key"] == digest("hunter2-key-value")
        assert request["args"]["url"] == "https://api.example/v1?token=" + digest("tok-abcdef")
        assert digest("hunter2-key-value") in outputs[2].stdout  # the table too
        # The fingerprint binds the real arguments: the approval above applies.
        assert cli("resume", "s", "--graph", "secretflow:graph", "--json").json()["status"] == (
            "done"
        )
    finally:
        sys.modules.pop("secretflow", None)
