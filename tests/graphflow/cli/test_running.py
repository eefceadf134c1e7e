"""``run``, ``resume`` and ``draw``: what they print, and a ``--graph`` that does not load."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from .conftest import CALL, USER, Cli


def test_run_prints_each_step_and_ends_with_the_pauses(cli: Cli) -> None:
    got = cli("run", "--graph", "flows:nested", "--thread", "n1", "--input", "{}")
    assert got.code == 0 and got.stderr == ""
    lines = got.stdout.splitlines()
    assert lines[0] == '[step 0] first -> {"verdict": "drafted"}'
    assert lines[1] == '[step 1] sub.check paused (interrupt): "inner ok?"'
    assert lines[2] == "thread n1: paused, waiting for answer"
    assert lines[3].startswith("  pause ") and " interrupt  node sub.check  thread n1 " in lines[3]
    assert lines[4] == '    value  "inner ok?"'
    assert lines[5].startswith("    answer with: graphflow answer n1 ")


def test_run_of_a_tool_call_shows_the_call(cli: Cli) -> None:
    got = cli("run", "--graph", "flows:graph", "--thread", "t1", "--input", json.dumps(USER))
    assert got.code == 0, got.stderr
    assert got.stdout.splitlines()[0] == (
        "[step 0] file_manager paused (tool_confirmation): delete_file "
        '{"path": "/data/report.csv"} (call call_1)'
    )
    # Each suggested command runs as given: with the --db this one was given
    assert (
        f"answer with: graphflow approve t1 {CALL} --db {cli.db}  |  "
        f"graphflow deny t1 {CALL} --reason TEXT --db {cli.db}"
    ) in got.stdout


def test_suggested_commands_carry_what_the_command_was_given(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import click

    from graphflow.cli.common import suggest

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRAPHFLOW_DB", raising=False)
    resume = "graphflow resume 'thréad ✓' --graph MODULE:ATTR"
    with click.Context(click.Command("x")) as ctx:
        assert suggest(resume) == resume  # (nothing known: as written)
        ctx.meta["graphflow.db"] = "graphflow.db"  # the default: no --db
        assert suggest("graphflow threads") == "graphflow threads"
        ctx.meta["graphflow.db"] = str(tmp_path / "graphflow.db")  # (the same file)
        assert suggest("graphflow threads") == "graphflow threads"
        ctx.meta["graphflow.db"] = "my runs/x.db"
        assert suggest("graphflow threads") == "graphflow threads --db 'my runs/x.db'"
        ctx.meta["graphflow.graph_ref"] = "flows:graph"
        assert suggest(resume) == (
            "graphflow resume 'thréad ✓' --graph flows:graph --db 'my runs/x.db'"
        )
        monkeypatch.setenv("GRAPHFLOW_DB", "my runs/x.db")  # what a bare command uses
        assert suggest("graphflow threads") == "graphflow threads"


def test_run_debug_prints_every_event(cli: Cli) -> None:
    got = cli("run", "--graph", "flows:nested", "--thread", "n1", "--input", "{}", "--debug")
    assert got.code == 0, got.stderr
    assert "[step 0] first started (attempt 1)" in got.stdout
    assert "[step 0] first completed" in got.stdout
    # A task that paused: one line, its pause's (what it asks), not its end and its pause
    paused = [
        line for line in got.stdout.splitlines() if line.startswith("[step") and " paused" in line
    ]
    assert paused == ['[step 1] sub.check paused (interrupt): "inner ok?"'], paused
    assert "checkpoint " in got.stdout and "(next: sub)" in got.stdout


def test_run_json_is_the_run_result(cli: Cli) -> None:
    doc = cli.start("t1").json()
    assert set(doc) == {"status", "state", "pauses", "thread_id", "checkpoint_id",
                        "ignored_decisions"}  # fmt: skip
    assert (doc["status"], doc["thread_id"], doc["ignored_decisions"]) == ("paused", "t1", [])
    (pause,) = doc["pauses"]
    assert pause["request"]["function_call_id"] == CALL
    assert doc["state"]["messages"][0]["content"] == "delete the report"


def test_the_whole_flow_with_a_principal(cli: Cli) -> None:
    cli.start("t1")
    assert cli("approve", "t1", CALL, "--by", "alice").code == 0
    got = cli("resume", "t1", "--graph", "flows:graph", "--principal", "alice")
    assert got.code == 0, got.stderr
    assert got.stdout.splitlines()[0].startswith("[step 0] file_manager -> {")
    assert "review paused (interrupt)" in got.stdout
    (pause,) = cli("pauses", "t1", "--json").json()
    assert cli("answer", "t1", pause["pause_id"], '"ship it"').code == 0
    done = cli("resume", "t1", "--graph", "flows:graph")
    assert done.code == 0
    assert done.stdout.splitlines()[-1].startswith('thread t1: done; state {"messages": ')


def test_run_with_null_input_continues_and_a_paused_thread_refuses_input(cli: Cli) -> None:
    cli.start("t1")
    again = cli("run", "--graph", "flows:graph", "--thread", "t1", "--input", "null", "--json")
    assert again.code == 0 and again.json()["status"] == "paused"  # answers nothing: same pause
    refused = cli("run", "--graph", "flows:graph", "--thread", "t1", "--input", "{}")
    assert refused.code == 1 and refused.stdout == ""
    assert "thread 't1' is paused at" in refused.error
    assert "`graphflow resume t1 --graph" in refused.error and "invoke(" not in refused.error


FAILING = """\
from typing import TypedDict
from graphflow import END, START, StateGraph


class S(TypedDict):
    n: int


def boom(state: S) -> dict:
    raise ValueError("no disk")


graph = StateGraph(S).add_node(boom).add_edge(START, "boom").add_edge("boom", END).compile()
"""


def test_a_node_error_says_which_command_retries_it(cli: Cli) -> None:
    (cli.cwd / "failing.py").write_text(FAILING, encoding="utf-8")
    got = cli("run", "--graph", "failing:graph", "--thread", "t1", "--input", '{"n": 0}')
    assert got.code == 1 and "node 'boom' raised ValueError: no disk" in got.error
    # The command to run, as this one was given: its --graph and --db
    assert f"`graphflow resume t1 --graph failing:graph --db {cli.db}`" in got.error
    assert "invoke(" not in got.error


@pytest.mark.parametrize(
    ("ref", "source", "message"),
    [
        ("missing:graph", None,
         "--graph 'missing:graph': no module named 'missing' in the current directory"),
        ("broken:graph", "import not_a_module_anywhere\n",
         "--graph 'broken:graph': importing 'broken' failed: No module named "
         "'not_a_module_anywhere'"),
        ("broken:graph", "raise RuntimeError('boom')\n",
         "--graph 'broken:graph': importing 'broken' failed: RuntimeError: boom"),
        ("broken:graph", "def f(:\n",
         "--graph 'broken:graph': importing 'broken' failed: SyntaxError:"),
        ("broken:graph", "import sys\nsys.exit(3)\n",
         "--graph 'broken:graph': importing 'broken' failed: it called sys.exit(3)"),
        ("flows:nothing", None,
         "--graph 'flows:nothing': module 'flows' has no attribute 'nothing'"),
        ("flows:uncompiled", None,
         "--graph 'flows:uncompiled' is a StateGraph, not a CompiledGraph; call .compile() on it"),
        ("flows:USER", None, "--graph 'flows:USER' is a dict, not a CompiledGraph"),
    ],
)  # fmt: skip
def test_a_graph_that_does_not_load_is_exit_1_naming_it(
    cli: Cli, ref: str, source: str | None, message: str
) -> None:
    if source is not None:
        (cli.cwd / "broken.py").write_text(source)
    (cli.cwd / "flows.py").write_text((cli.cwd / "flows.py").read_text() + "USER = {}\n")
    for args in (["run", "--graph", ref, "--thread", "t", "--input", "{}"],
                 ["draw", "--graph", ref]):  # fmt: skip
        got = cli(*args)
        assert got.code == 1 and got.stdout == ""
        assert got.error.startswith(f"graphflow: error: {message}"), got.error
    assert not (cli.cwd / "g.db").exists()  # nothing was created


def test_resume(cli: Cli) -> None:
    cli.start("t1")
    assert cli("approve", "t1", CALL).code == 0
    doc = cli("resume", "t1", "--graph", "flows:graph", "--json").json()
    assert doc["status"] == "paused" and doc["pauses"][0]["node"] == "review"
    tool = doc["state"]["messages"][2]
    assert tool["role"] == "tool" and "/data/report.csv" in tool["content"]


def test_resume_bad_input(cli: Cli) -> None:
    cli.start("t1")
    unknown = cli("resume", "nope", "--graph", "flows:graph")
    assert unknown.code == 4 and unknown.stdout == "" and "no thread 'nope'" in unknown.error
    assert cli("resume", "t1").code == 2  # --graph is required
    assert cli("resume", "t1", "--graph", "flows:nothing").code == 1


def test_draw(cli: Cli) -> None:
    got = cli("draw", "--graph", "flows:graph")
    assert got.code == 0 and got.stderr == ""
    assert got.stdout.startswith("flowchart TD\n")
    assert "file_manager --> review" in got.stdout
    doc = cli("draw", "--graph", "flows:graph", "--json").json()
    assert doc["name"] == "files" and doc["mermaid"] == got.stdout
    assert not (cli.cwd / "g.db").exists()  # draw does not open the database
    assert cli("draw").code == 2


def test_draw_prints_only_the_diagram_on_stdout(cli: Cli) -> None:
    """What the graph's module prints as it is imported goes to stderr: ``draw > g.mmd``
    writes the diagram alone."""
    (cli.cwd / "chatty.py").write_text(
        "print('importing chatty')\nfrom flows import graph\n", encoding="utf-8"
    )
    got = cli("draw", "--graph", "chatty:graph")
    assert got.code == 0 and got.stdout.startswith("flowchart TD\n")
    assert "importing chatty" not in got.stdout and "importing chatty" in got.stderr


LIVE = """\
import os, time
from typing import TypedDict
from graphflow import END, START, StateGraph


class S(TypedDict):
    n: int
    waited: bool


def slow(state: S) -> dict:
    deadline = time.monotonic() + 10  # (the test creates "go" once it has read a's line)
    while not os.path.exists("go") and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"waited": os.path.exists("go")}


builder = StateGraph(S).add_node("a", lambda s: {"n": s["n"] + 1}).add_node("b", slow)
graph = builder.add_edge(START, "a").add_edge("a", "b").add_edge("b", END).compile()
"""


def test_run_prints_each_step_as_it_happens(cli: Cli) -> None:
    (cli.cwd / "live.py").write_text(LIVE, encoding="utf-8")
    argv = [sys.executable, "-m", "graphflow", "--db", cli.db, "run", "--graph", "live:graph",
            "--thread", "t1", "--input", json.dumps({"n": 0, "waited": False})]  # fmt: skip
    with subprocess.Popen(argv, cwd=cli.cwd, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # (a's step, printed while b still runs)
        (cli.cwd / "go").touch()
        rest = proc.stdout.read()
    assert proc.returncode == 0 and " a " in f" {first}"
    assert '"waited": true' in rest, rest


CHATTY = """\
from graphflow import END, START, StateGraph, interrupt
from typing import TypedDict

print("loading chatty")


class S(TypedDict, total=False):
    x: int


def talk(state: S) -> dict:
    print("node says hello")
    return {"x": int(interrupt("ok?"))}


graph = StateGraph(S).add_node(talk).add_edge(START, "talk").add_edge("talk", END).compile()
"""


def test_json_stdout_holds_the_document_alone_when_user_code_prints(cli: Cli) -> None:
    """A print in the graph's module or in a node goes to stderr under ``--json``."""
    (cli.cwd / "chatty.py").write_text(CHATTY, encoding="utf-8")
    run = cli.sub("run", "--graph", "chatty:graph", "--thread", "t", "--input", "{}", "--json")
    assert run.code == 0 and run.json()["status"] == "paused"
    assert "loading chatty" in run.stderr and "node says hello" in run.stderr
    (pause,) = run.json()["pauses"]
    assert cli.sub("answer", "t", pause["pause_id"], "5", "--json").code == 0
    resumed = cli.sub("resume", "t", "--graph", "chatty:graph", "--json")
    assert resumed.code == 0 and resumed.json()["state"] == {"x": 5}
    assert "node says hello" in resumed.stderr
    drawn = cli("draw", "--graph", "chatty:graph", "--json")
    assert drawn.code == 0 and "mermaid" in drawn.json()
    # Without --json, draw's stdout is still data (a diagram to redirect): prints go to
    # stderr; run's text stays text, the prints where the user put them.
    text = cli.sub("draw", "--graph", "chatty:graph")
    assert text.stdout.startswith("flowchart TD") and "loading chatty" in text.stderr
    ran = cli.sub("run", "--graph", "chatty:graph", "--thread", "t2", "--input", "{}")
    assert ran.stdout.startswith("loading chatty")


NOISY = """\
import atexit, os, subprocess, sys
from typing import TypedDict
from graphflow import END, START, StateGraph


class S(TypedDict):
    x: int


os.write(1, b"module noise\\n")
atexit.register(lambda: print("exit noise"))


def loud(state: S) -> dict:
    os.write(1, b"descriptor noise\\n")
    subprocess.run([sys.executable, "-c", "print('child noise')"], check=True)
    print("print noise")
    return {"x": 1}


graph = StateGraph(S).add_node(loud).add_edge(START, "loud").add_edge("loud", END).compile()
"""


def test_json_stdout_holds_only_the_document_whatever_writes_below_python(cli: Cli) -> None:
    # A node writing to file descriptor 1, and a subprocess it starts, reach stderr.
    (cli.cwd / "noisy.py").write_text(NOISY, encoding="utf-8")
    got = cli.sub("run", "--graph", "noisy:graph", "--thread", "n", "--input", '{"x": 0}', "--json")
    assert got.code == 0, got.stderr
    assert got.json()["status"] == "done" and got.json()["state"] == {"x": 1}
    for noise in ("module noise", "descriptor noise", "child noise", "print noise", "exit noise"):
        assert noise in got.stderr and noise not in got.stdout
    listed = cli.sub("threads", "--json")  # and stdout is whole again for the next document
    assert [t["thread_id"] for t in listed.json()] == ["n"]
    text = cli.sub("run", "--graph", "noisy:graph", "--thread", "m", "--input", '{"x": 0}')
    assert "descriptor noise" in text.stdout  # without --json nothing is moved
