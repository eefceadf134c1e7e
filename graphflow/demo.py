"""The approval demo: a workflow pauses for a human, then resumes in a NEW process.

``graphflow demo`` runs it on the embedded SQLite store: a refund request is drafted, the
``approve`` node pauses with ``interrupt()``, the process stops; a fresh Python process
opens the same file, resumes the thread by id with the human's answer, and the run finishes
without re-running the drafting node.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel

from checkpoints import SqliteCheckpointer
from graphflow import END, START, CompiledGraph, InvalidArgumentError, StateGraph, interrupt
from graphflow.reducers import append


class Refund(BaseModel):
    """State of the demo workflow."""

    customer: str = ""
    amount: int = 0
    decision: str = ""
    log: Annotated[list[str], append] = []


def draft(state: Refund) -> dict[str, Any]:
    """Prepare the refund (runs once, even across the restart)."""
    return {"log": [f"drafted refund of {state.amount} for {state.customer} (pid {os.getpid()})"]}


def approve(state: Refund) -> dict[str, Any]:
    """Ask a human; the answer is "approve" or "deny"."""
    answer = interrupt({"question": f"Refund {state.amount} to {state.customer}?"})
    return {"decision": str(answer), "log": [f"human said {answer!r} (pid {os.getpid()})"]}


def execute(state: Refund) -> dict[str, Any]:
    """Carry out the decision."""
    verb = "paid" if state.decision == "approve" else "refused"
    return {"log": [f"{verb} refund of {state.amount} (pid {os.getpid()})"]}


def build(db: str) -> CompiledGraph:
    """The demo graph on a SQLite file."""
    g = StateGraph(Refund)
    g.add_node(draft).add_node(approve).add_node(execute)
    g.add_edge(START, "draft").add_edge("draft", "approve").add_edge("approve", "execute")
    g.add_edge("execute", END)
    return g.compile(checkpointer=SqliteCheckpointer(db), name="refund-demo")


def start(db: str, thread_id: str) -> None:
    """Run until the pause and print it."""
    graph = build(db)
    result = graph.invoke({"customer": "ACME", "amount": 120}, thread_id=thread_id)
    print(f"[start pid {os.getpid()}] thread {thread_id}: {result.status}")
    for p in result.pauses:
        print(f"  pause {p.id} at node {p.node!r}: {p.value}")


def resume(db: str, thread_id: str, answer: str) -> None:
    """Resume the thread by id with the answer and print the outcome."""
    graph = build(db)
    result = graph.invoke(None, thread_id=thread_id, resume=answer)
    print(f"[resume pid {os.getpid()}] thread {thread_id}: {result.status}")
    for line in result.state.log:
        print(f"  {line}")


def check_db_path(db: str) -> None:
    """Refuse, naming the path, a database file whose directory does not exist (SQLite
    creates the file, not its directory)."""
    folder = os.path.dirname(os.path.abspath(db))
    if not os.path.isdir(folder):
        raise InvalidArgumentError(
            f"cannot create the database {db!r}: directory {os.path.dirname(db)!r} does not "
            "exist; create it first or pass --db with a file in an existing directory"
        )
    if os.path.isdir(db):
        raise InvalidArgumentError(
            f"cannot use the database {db!r}: it is a directory; pass --db with a file path"
        )


def main(db: str | None = None, answer: str | Callable[[], str] = "approve") -> int:
    """Start in this process, resume in a fresh one; return the exit code. ``answer`` may
    be a function, asked for the answer once the run paused."""
    db = db or os.environ.get("GRAPHFLOW_DB") or "graphflow.db"
    check_db_path(db)
    thread_id = f"refund-{uuid.uuid4().hex[:8]}"
    start(db, thread_id)
    if callable(answer):
        answer = answer()
    code = (
        "import sys; from graphflow.cli import fail; from graphflow.demo import resume\n"
        "try:\n    resume(*sys.argv[1:4])\n"
        "except Exception as e:\n    sys.exit(fail(e))"
    )
    proc = subprocess.run([sys.executable, "-c", code, db, thread_id, answer], check=False)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
