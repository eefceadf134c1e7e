"""``RetryPolicy``: exponential backoff with jitter, ``retry_on``, sequences, durable attempts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, TypedDict

import pytest

from checkpoints import MemoryCheckpointer
from graphflow import END, START, InvalidArgumentError, NodeError, RetryPolicy, StateGraph
from graphflow.retry import wait_before_retry


class S(TypedDict, total=False):
    n: int


def test_waits_grow_exponentially_up_to_the_cap() -> None:
    p = RetryPolicy(initial_interval=0.5, backoff_factor=2.0, max_interval=3.0, jitter=False)
    assert [p.wait(i) for i in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_waits_stay_at_the_cap_after_thousands_of_retries() -> None:
    """``backoff_factor ** retry`` overflows a float after about a thousand retries (a
    policy with many short retries reaches them): the wait stays at ``max_interval`` (0 for
    a policy that never waits), never an ``OverflowError`` in the retry loop."""
    p = RetryPolicy(max_attempts=5000, initial_interval=0.001, max_interval=0.01, jitter=False)
    assert [p.wait(n) for n in (1, 1025, 5000)] == [0.001, 0.01, 0.01]
    never = RetryPolicy(max_attempts=5000, initial_interval=0.0, jitter=False)
    assert never.wait(5000) == 0.0


def test_jitter_draws_each_wait_between_half_of_it_and_all_of_it() -> None:
    p = RetryPolicy(initial_interval=1.0, backoff_factor=2.0, max_interval=100.0)
    waits = [p.wait(3) for _ in range(200)]
    assert all(2.0 <= w <= 4.0 for w in waits) and len(set(waits)) > 1


def test_retry_on_takes_types_a_tuple_or_a_predicate() -> None:
    assert RetryPolicy(retry_on=KeyError).matches(KeyError())
    assert not RetryPolicy(retry_on=(KeyError, OSError)).matches(ValueError())
    pred = RetryPolicy(retry_on=lambda e: "again" in str(e))
    assert pred.matches(RuntimeError("try again")) and not pred.matches(RuntimeError("no"))


def test_the_first_matching_policy_of_a_sequence_decides() -> None:
    policies = [
        RetryPolicy(max_attempts=5, retry_on=OSError, jitter=False, initial_interval=1),
        RetryPolicy(max_attempts=2, jitter=False, initial_interval=7),
    ]
    assert wait_before_retry(policies, OSError(), 4) == 8.0
    assert wait_before_retry(policies, OSError(), 5) is None
    assert wait_before_retry(policies, ValueError(), 1) == 7.0
    assert wait_before_retry(policies, ValueError(), 2) is None
    assert wait_before_retry(policies[:1], ValueError(), 1) is None  # no match: no retry


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"max_attempts": "3"},
        {"initial_interval": -1},
        {"backoff_factor": float("nan")},
        {"max_interval": float("inf")},
        {"retry_on": "ValueError"},
        {"retry_on": ()},
        {"retry_on": int},
    ],
)
def test_a_bad_policy_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError, match="RetryPolicy"):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize("bad", [3, "x", [RetryPolicy(), "x"]])
def test_add_node_refuses_a_retry_that_is_not_policies(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="node 'a'"):
        StateGraph(S).add_node("a", lambda s: {}, retry=bad)


def _flaky(fails: int, calls: list[int]) -> Any:
    def node(state: S) -> dict[str, Any]:
        calls.append(1)
        if len(calls) <= fails:
            raise OSError(f"flaky {len(calls)}")
        return {"n": len(calls)}

    return node


@pytest.mark.parametrize("parallel", [False, True], ids=["alone", "beside a sibling"])
def test_a_sequence_of_policies_retries_a_node(parallel: bool) -> None:
    calls: list[int] = []
    fast = RetryPolicy(max_attempts=4, initial_interval=0.001, retry_on=OSError)
    b = StateGraph(S).add_node("a", _flaky(2, calls), retry=[fast, RetryPolicy(max_attempts=1)])
    b.add_edge(START, "a").add_edge("a", END)
    if parallel:
        b.add_node("b", lambda s: {}).add_edge(START, "b").add_edge("b", END)
    g = b.compile(checkpointer=MemoryCheckpointer())
    assert g.invoke({}, thread_id="t").state["n"] == 3
    (info,) = [t for t in g.get_state_history("t")[-1].tasks if t.name == "a"]
    assert info.attempts == 3


def test_a_node_that_keeps_failing_stops_after_max_attempts() -> None:
    calls: list[int] = []
    policy = RetryPolicy(max_attempts=3, initial_interval=0.001)
    b = StateGraph(S).add_node("a", _flaky(10, calls), retry=policy)
    g = b.add_edge(START, "a").add_edge("a", END).compile(checkpointer=MemoryCheckpointer())
    with pytest.raises(NodeError, match="flaky 3"):
        g.invoke({}, thread_id="t")
    assert len(calls) == 3
    (info,) = g.get_state("t").tasks
    assert (info.status, info.attempts) == ("failed", 3)
    with pytest.raises(NodeError, match="flaky 6"):  # a new run of the thread: a new budget
        g.invoke(None, thread_id="t")
    assert len(calls) == 6


CHILD = textwrap.dedent(
    """
    import json, sys
    from typing import TypedDict
    from checkpoints import SqliteCheckpointer
    from graphflow import END, START, RetryPolicy, StateGraph

    db, log, interval = sys.argv[1], sys.argv[2], float(sys.argv[3])

    class S(TypedDict, total=False):
        n: int

    def node(state):
        with open(log, "a") as f:
            f.write("attempt\\n")
        raise OSError("down")

    policy = RetryPolicy(max_attempts=3, initial_interval=interval, jitter=False)
    g = StateGraph(S).add_node("a", node, retry=policy).add_edge(START, "a").add_edge("a", END)
    g = g.compile(checkpointer=SqliteCheckpointer(db))
    try:
        g.invoke({} if sys.argv[4] == "new" else None, thread_id="t")
    except Exception as e:
        print(json.dumps({"error": type(e).__name__}))
    """
)


@pytest.mark.slow
def test_attempts_survive_a_crash_during_the_wait_before_a_retry(tmp_path: Path) -> None:
    db, log = tmp_path / "r.db", tmp_path / "attempts.log"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, str(script), str(db), str(log), "60", "new"], env=env)
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and log.read_text().count("attempt") == 1):
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.01)
        import sqlite3

        # The attempt is committed before the wait: once it is, kill the process.
        while True:
            with sqlite3.connect(db) as conn:
                rows = conn.execute("SELECT status, attempts FROM gf_tasks").fetchall()
            if rows == [("running", 1)]:
                break
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    out = subprocess.run(
        [sys.executable, str(script), str(db), str(log), "0", "resume"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout) == {"error": "NodeError"}
    assert log.read_text().count("attempt") == 3  # 1 before the crash + 2 after, not 1 + 3
