"""The sync API's event loop: one per calling thread, the first made ahead in a new process.

The lease keeper's thread starts while a SQLite store opens its file and makes a spare event
loop there; the first sync call takes it instead of making one (a resumed run's head start).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def _run(code: str, tmp_path: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), str(tmp_path / "s.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


PRELUDE = """
    import os, sys, time
    from typing import TypedDict
    from checkpoints import SqliteCheckpointer
    from graphflow import END, START, StateGraph, _sync

    class S(TypedDict):
        n: int

    def graph(cp):
        b = StateGraph(S)
        b.add_node("inc", lambda s: {"n": s["n"] + 1})
        b.add_edge(START, "inc")
        b.add_edge("inc", END)
        return b.compile(checkpointer=cp)

    def wait_for_spare():
        deadline = time.time() + 10
        while not _sync._spare and time.time() < deadline:
            time.sleep(0.01)
        assert _sync._spare, "no spare loop was made"
        return _sync._spare[0]
"""


def test_the_first_sync_call_takes_the_loop_made_ahead(tmp_path: Path) -> None:
    out = _run(
        PRELUDE
        + """
    cp = SqliteCheckpointer(sys.argv[1])  # starts the keeper, which makes the spare
    spare = wait_for_spare()
    g = graph(cp)
    assert g.invoke({"n": 1}, thread_id="t").state["n"] == 2
    assert _sync._local.runner.loop is spare and not _sync._spare
    assert g.invoke({"n": 5}, thread_id="u").state["n"] == 6  # the same loop again
    assert _sync._local.runner.loop is spare
    print("ok")
    """,
        tmp_path,
    )
    assert out == "ok"


def test_a_forked_child_never_uses_its_parents_spare_loop(tmp_path: Path) -> None:
    out = _run(
        PRELUDE
        + """
    cp = SqliteCheckpointer(sys.argv[1])
    spare = wait_for_spare()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            assert not _sync._spare and _sync._forked == [spare]
            child = graph(SqliteCheckpointer(sys.argv[1]))
            assert child.invoke({"n": 1}, thread_id="c").state["n"] == 2
            assert _sync._local.runner.loop is not spare
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert graph(cp).invoke({"n": 1}, thread_id="p").state["n"] == 2  # the parent's is fine
    assert _sync._local.runner.loop is spare
    print("ok")
    """,
        tmp_path,
    )
    assert out == "ok"
