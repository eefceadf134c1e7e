"""A file-manager agent that asks on the terminal before it deletes (after Google ADK's
tool-confirmation sample), with a scripted model.

    python examples/file_manager_cli.py                  # asks you, on a terminal
    python examples/file_manager_cli.py --answers y,y    # or answer up front
    FILE_MANAGER_ANSWERS=n,n python examples/file_manager_cli.py
    printf 'y\\nn\\n' | python examples/file_manager_cli.py

The agent has ``list_files``, ``read_file`` and ``delete_file``; only ``delete_file`` needs
confirmation (``require_confirmation``). It works in a sandbox directory it creates under the
current directory and removes at the end; it never touches anything else, and a delete
really deletes there. Asked to tidy up, the model lists the files, reads ``notes.txt`` and
proposes two deletes. The run pauses; each proposed call is shown as
``Approve delete_file {'path': ...}? [y/N]`` and the answer becomes a decision keyed by the
call id. A denied call does not run: the model is told it was denied, and says so.

Where the answers come from, first match wins: ``--answers`` (comma-separated ``y``/``n``),
then ``FILE_MANAGER_ANSWERS``, then the terminal when stdin is a TTY, then stdin's lines
when it is piped; when none gives any (stdin is not a TTY and empty, as when the test suite
runs this file), the scripted answers ``y,n`` are used: one approved delete, one denied. A
missing answer counts as ``n``. Answers that do not come from the terminal are echoed after
the prompt, so the output reads the same either way.

Each run uses a new thread of ``file_manager_cli.db`` (in the current directory), so running
it twice with the same answers prints the same lines.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from checkpoints import SqliteCheckpointer
from graphflow import END, START, CompiledGraph, StateGraph, ToolConfirmationPause
from graphflow.agents import (
    Agent,
    AgentNode,
    Message,
    MessagesState,
    ModelResponse,
    ScriptedModel,
    Tool,
    ToolCall,
    tool,
)
from graphflow.auth import Decision, ToolCallContext

DB = "file_manager_cli.db"
USER = "terminal user"  # the approver recorded with each decision
DEFAULT_ANSWERS = ["y", "n"]  # used when no answers are given and there is no terminal
FILES = {
    "notes.txt": "old.log and draft.txt can go.",
    "old.log": "2024-01-01 started\n",
    "draft.txt": "first draft\n",
}


def file_tools(root: Path) -> list[Tool]:
    """The agent's tools, confined to ``root``."""

    def inside(path: str) -> Path:
        target = (root / path).resolve()
        if target.parent != root.resolve():
            raise ValueError(f"{path!r} is not a file of the sandbox")
        return target

    @tool
    def list_files() -> list[str]:
        """List the files of the sandbox."""
        return sorted(p.name for p in root.iterdir())

    @tool
    def read_file(path: str) -> str:
        """Read a file of the sandbox."""
        return inside(path).read_text()

    @tool
    def delete_file(path: str) -> dict[str, str]:
        """Delete a file of the sandbox."""
        inside(path).unlink()
        return {"deleted": path}

    return [list_files, read_file, delete_file]


class FileManagerModel:
    """A stand-in for an LLM: scripted tool calls, then a reply that reports what became of
    the deletes, read from the tool results in the transcript (as a real model would)."""

    def __init__(self) -> None:
        self.script = ScriptedModel(
            [
                ModelResponse(tool_calls=[ToolCall(id="ls", name="list_files", args={})]),
                ModelResponse(
                    tool_calls=[ToolCall(id="read", name="read_file", args={"path": "notes.txt"})]
                ),
                ModelResponse(
                    tool_calls=[
                        ToolCall(id="del_log", name="delete_file", args={"path": "old.log"}),
                        ToolCall(id="del_draft", name="delete_file", args={"path": "draft.txt"}),
                    ]
                ),
            ]
        )

    async def generate(self, messages: list[Message], tools: list[Tool]) -> ModelResponse:
        args = {c.id: c.args for m in messages for c in m.tool_calls}
        deletes = [m for m in messages if m.role == "tool" and m.name == "delete_file"]
        if not deletes:
            return await self.script.generate(messages, tools)
        lines = []
        for m in deletes:
            path = args[m.tool_call_id or ""]["path"]
            if "was denied" in m.content:  # what the agent tells the model of a denied call
                lines.append(f"I did not delete {path}: you denied it.")
            elif m.content.startswith('{"deleted"'):
                lines.append(f"Deleted {path}.")
            else:  # the tool failed
                lines.append(f"I could not delete {path}: {m.content}")
        return ModelResponse(text=" ".join(lines))


def show_call(call: ToolCallContext, result: Any) -> Any:
    """Print each call as it runs (an ``after_tool`` callback; it keeps the result)."""
    print(f"  ran {call.tool.name}({call.args}) -> {result!r}")
    return result


def build(root: Path) -> CompiledGraph:
    agent = Agent(
        "file_manager",
        FileManagerModel(),
        file_tools(root),
        instruction="You manage the files of a sandbox directory.",
        require_confirmation=["delete_file"],
        after_tool=[show_call],
    )
    b = StateGraph(MessagesState).add_node(AgentNode(agent))
    b.add_edge(START, "file_manager").add_edge("file_manager", END)
    return b.compile(checkpointer=SqliteCheckpointer(DB))


def answer_source(argv: list[str]) -> Callable[[str], str]:
    """``ask(prompt) -> answer``, from wherever the answers come (see the module docstring)."""
    parser = argparse.ArgumentParser(description="The file manager with terminal approval.")
    parser.add_argument("--answers", help="comma-separated y/n answers, in prompt order")
    given = parser.parse_args(argv).answers or os.environ.get("FILE_MANAGER_ANSWERS")
    if given is not None:
        answers = given.split(",")
    elif sys.stdin.isatty():
        return input
    else:
        answers = sys.stdin.read().split() or DEFAULT_ANSWERS
    queue = iter(answers)

    def ask(prompt: str) -> str:
        answer = next(queue, "n")
        print(prompt + answer)  # echo it, as a terminal would show it
        return answer

    return ask


def run(root: Path, ask: Callable[[str], str]) -> None:
    for name, text in FILES.items():
        (root / name).write_text(text)
    graph = build(root)
    thread = f"fm-{uuid.uuid4().hex[:8]}"
    user = {"role": "user", "content": "Tidy up the sandbox: notes.txt says what can go."}
    print("user:", user["content"])
    result = graph.invoke({"messages": [user]}, thread_id=thread)
    while result.status == "paused":
        decisions: dict[str, Any] = {}
        for p in result.pauses:
            assert isinstance(p, ToolConfirmationPause) and p.request is not None
            r = p.request
            yes = ask(f"Approve {r.tool_name} {r.args}? [y/N] ").strip().lower() in ("y", "yes")
            no = Decision.deny(by=USER, reason="the user said no")
            decisions[r.function_call_id] = Decision.approve(by=USER) if yes else no
        result = graph.invoke(None, thread_id=thread, decisions=decisions)
    for m in result.state.messages:
        if (
            m.role == "tool" and m.name == "delete_file"
        ):  # the tool results the model read, a denial included
            print(f"  the model was told: {m.content}")
    print("assistant:", result.state.messages[-1].content)
    print("sandbox now:", sorted(p.name for p in root.iterdir()))


def main() -> None:
    ask = answer_source(sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="file_manager_sandbox-", dir=".") as root:
        run(Path(root), ask)


if __name__ == "__main__":
    main()
