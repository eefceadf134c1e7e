"""``graphflow demo``: a refund waits for a human, is approved elsewhere, runs once, is audited.

Each stage runs where it would in production, so the demo is the whole operating story:

1. this process runs the case (``graphflow.demo.workflow``) until the agent's
   ``issue_refund`` call pauses for someone from finance, and shows the pause's payload;
2. an approver process records the decision with ``graphflow approve ... --by carol``
   (nothing runs: the decision is stored);
3. a worker process (``graphflow worker --once``) finds the answered thread and resumes it:
   the refund runs once, then the customer is emailed;
4. this process prints the thread's evidence trail and verifies the log's hash chain.

Every line says what just happened and which command to try next. Each run is a new thread
of the same database, so running it twice in one directory works.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphflow.cli.encode import rfc3339
from graphflow.errors import InvalidArgumentError
from graphflow.types import ToolConfirmationPause

GRAPH_REF = "graphflow.demo.workflow:graph"
"""What the demo's worker and ``graphflow run`` are given as ``--graph``."""


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


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _say(stage: str, text: str) -> None:
    print(f"[{stage}] {text}", flush=True)


def _cli(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``graphflow --db DB ARGS...`` in a new process, as a person or a job would."""
    return subprocess.run(
        [sys.executable, "-m", "graphflow", "--db", db, *args],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _relay(proc: subprocess.CompletedProcess[str], what: str) -> None:
    for line in proc.stdout.splitlines():
        print(f"      {line}")
    if proc.returncode != 0:
        raise InvalidArgumentError(
            f"the demo's {what} failed (exit {proc.returncode}): {proc.stderr.strip()}"
        )


def _show_pause(pause: Any) -> None:
    r = pause.request
    print(f"      {r.agent} wants {r.tool_name} {r.args}  (call {r.function_call_id})")
    print(f"      risk {r.risk}/{r.category}; rule {r.policy_rule}: {r.policy_decision}, "
          f"needs the role {r.required_role!r}")  # fmt: skip
    print(f"      reason: {r.reason}")
    expires = rfc3339(r.expires_at) if r.expires_at is not None else "never"
    print(f"      action digest {r.action_digest}; expires {expires}")


def main(db: str | None = None, answer: str | Callable[[], str] = "approve") -> int:
    """Run the demo on ``db`` (default ``$GRAPHFLOW_DB``, else ``graphflow.db``); return the
    exit code. ``answer`` ("approve" or "deny") may be a function, asked once the run paused.
    """
    db = db or os.environ.get("GRAPHFLOW_DB") or "graphflow.db"
    check_db_path(db)
    from checkpoints import SqliteCheckpointer
    from graphflow.demo.workflow import EFFECTS_ENV, build

    effects = Path(f"{os.path.splitext(db)[0]}.effects.log")
    os.environ[EFFECTS_ENV] = str(effects.resolve())  # the worker process inherits it
    before = _lines(effects)
    graph = build(SqliteCheckpointer(db))
    thread = f"refund-{uuid.uuid4().hex[:8]}"
    case = {"order": "A-1001", "reason": "it arrived broken"}

    result = graph.invoke(case, thread_id=thread, principal="support-bot")
    _say("1 run", f"pid {os.getpid()}: case {thread} ran intake -> policy_check -> refunds "
                  f"and is {result.status}")  # fmt: skip
    if result.status != "paused":
        raise InvalidArgumentError(f"the demo's case ended {result.status}, not paused")
    pause = result.pauses[0]
    if not isinstance(pause, ToolConfirmationPause) or pause.request is None:
        raise InvalidArgumentError(f"the demo's case paused at {pause.id!r}, not at a tool call")
    _show_pause(pause)
    print(f"      try: graphflow pauses {thread} --db {db}")

    verdict = answer() if callable(answer) else answer
    call = pause.request.function_call_id
    if verdict == "approve":
        args = ["approve", thread, call, "--by", "carol", "--reason", "receipt checked"]
    else:
        args = ["deny", thread, call, "--by", "carol", "--reason", "no receipt"]
    _say("2 decide", f"an approver process records: graphflow {shlex.join(args)}")
    _relay(_cli(db, *args), "approval")
    print("      the decision is bound to the call's digest; the refund waits for a worker")

    _say("3 worker", f"a worker process resumes what is answered: graphflow worker "
                     f"--graph {GRAPH_REF} --once")  # fmt: skip
    _relay(_cli(db, "worker", "--graph", GRAPH_REF, "--once"), "worker")
    state = graph.get_state(thread)
    outcome = state.values.outcome if state is not None else ""
    print(f"      outcome: {outcome}")
    ran = _lines(effects)[len(before) :]
    for line in ran:
        print(f"      ran: {line}")

    _say("4 audit", f"the evidence trail of {thread} (graphflow audit {thread} --db {db}):")
    for e in graph.audit(thread):
        applied = "" if e.applied else "  NOT APPLIED"
        where = (e.checkpoint_id or "-")[:12]
        print(f"      {e.seq:>4}  {e.stage:<9} {e.call_id or '-':<9} {e.actor or '-':<12} "
              f"{e.decision or '-':<32} checkpoint {where}{applied}")  # fmt: skip
    log = graph.evidence
    assert log is not None  # a SQLite graph writes X.evidence.db by default
    report = log.verify()
    head = log.head()
    verdict_line = "intact" if report.ok else f"{len(report.problems)} problem(s)"
    _say("5 verify", f"evidence log {log.path}: {report.count} events, hash chain {verdict_line}")
    print(f"      head {head.count}:{head.hash}")
    print(f"      try: graphflow verify --db {db} --expect-head {head.count}:{head.hash}")
    return 0 if report.ok else 3


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
