"""Fixtures of the command line tests: a graph module in ``tmp_path`` and two ways to run
``graphflow``: click's ``CliRunner`` in this process (stdout and stderr kept apart) and a
real subprocess, both with ``tmp_path`` as the current directory."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from click.testing import CliRunner

from graphflow.cli import app

FLOWS = '''\
"""Graphs for the command line tests."""

from graphflow import END, START, StateGraph, interrupt
from graphflow.agents import (
    Agent, AgentNode, MessagesState, ModelResponse, ScriptedModel, ToolCall, tool,
)


class State(MessagesState):
    verdict: str = ""


@tool
def delete_file(path: str) -> dict:
    """Delete a file."""
    return {"deleted": path}


model = ScriptedModel([
    ModelResponse(tool_calls=[ToolCall(id="call_1", name="delete_file",
                                       args={"path": "/data/report.csv"})]),
    ModelResponse(text="Deleted."),
])
agent = Agent(name="file_manager", model=model, tools=[delete_file],
              require_confirmation=["delete_file"])


def review(state: State) -> dict:
    answer = interrupt({"question": "publish?"})
    return {"verdict": str(answer)}


builder = StateGraph(State).add_node(AgentNode(agent)).add_node(review)
builder.add_edge(START, "file_manager").add_edge("file_manager", "review")
builder.add_edge("review", END)
graph = builder.compile(name="files")   # the command line runs it on --db
uncompiled = builder


class Inner(MessagesState):
    verdict: str = ""
    note: str = ""


def check(state: Inner) -> dict:
    return {"note": str(interrupt("inner ok?"))}


inner = StateGraph(Inner).add_node(check).add_edge(START, "check").add_edge("check", END)


def first(state: State) -> dict:
    return {"verdict": "drafted"}


outer = StateGraph(State).add_node(first).add_node("sub", inner.compile())
outer.add_edge(START, "first").add_edge("first", "sub").add_edge("sub", END)
nested = outer.compile(name="nested")
'''

USER = {"messages": [{"role": "user", "content": "delete the report"}]}
CALL = "call_1"


@dataclass
class Result:
    """What one ``graphflow`` command did."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    @property
    def error(self) -> str:
        """The one error line (asserting there is exactly one, and no traceback)."""
        lines = self.stderr.splitlines()
        assert len(lines) == 1, self.stderr
        assert lines[0].startswith("graphflow: error: "), self.stderr
        return lines[0]


class Cli:
    """Runs ``graphflow`` in ``tmp_path``, on ``tmp_path / "g.db"`` unless told otherwise."""

    def __init__(self, cwd: pathlib.Path):
        self.cwd = cwd
        self.db = str(cwd / "g.db")

    def __call__(self, *args: str, db: bool = True, input: str | None = None) -> Result:
        """Through click's ``CliRunner`` (stdout and stderr apart), in this process."""
        argv = [*args, "--db", self.db] if db else list(args)
        got = CliRunner().invoke(app, argv, catch_exceptions=False, input=input)
        return Result(got.exit_code, got.stdout, got.stderr)

    def sub(self, *args: str, db: bool = True) -> Result:
        """In a new process (``python -m graphflow``)."""
        argv = ["--db", self.db, *args] if db else list(args)
        proc = subprocess.run(
            [sys.executable, "-m", "graphflow", *argv],
            cwd=self.cwd, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert "Traceback" not in proc.stderr, proc.stderr
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def start(self, thread: str = "t1") -> Result:
        """Run ``flows:graph`` on a new thread until it pauses for the tool call."""
        got = self("run", "--graph", "flows:graph", "--thread", thread,
                   "--input", json.dumps(USER), "--json")  # fmt: skip
        assert got.code == 0, got.stderr
        return got


@pytest.fixture
def cli(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cli]:
    """A ``Cli`` in ``tmp_path``, which holds ``flows.py``; ``sys.path`` and ``sys.modules``
    are restored afterwards (the command imports ``flows`` from the current directory)."""
    (tmp_path / "flows.py").write_text(FLOWS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("GRAPHFLOW_DB", raising=False)
    for name in ("flows", "broken"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield Cli(tmp_path)
    for name in ("flows", "broken"):
        sys.modules.pop(name, None)
