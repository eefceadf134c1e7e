"""``graph.freeze`` / ``graph.unfreeze``: a frozen thread runs nothing and takes no
decision, and unfreezing gives it back exactly as it was, its pending step included."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from checkpoints import Checkpointer, CommitBatch, SerializationError, SqliteCheckpointer
from graphflow import (
    END,
    START,
    InvalidArgumentError,
    StateGraph,
    ThreadFinishedError,
    ThreadFrozenError,
    ThreadNotFoundError,
    interrupt,
)
from graphflow.compiled import CompiledGraph
from graphflow.evidence import EvidenceLog


class S(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def fan(store: Checkpointer, calls: list[str]) -> Any:
    """``START -> (quick, review) -> END``: quick finishes in the step where review pauses."""

    def quick(s: S) -> S:
        calls.append("quick")
        return {"log": ["quick"]}

    def review(s: S) -> S:
        calls.append("review")
        return {"log": [f"review:{interrupt('ok?')}"]}

    b = StateGraph(S).add_node("quick", quick).add_node("review", review)
    b.add_edge(START, "quick").add_edge(START, "review")
    b.add_edge("quick", END).add_edge("review", END)
    return b.compile(checkpointer=store)


def status(g: Any) -> str:
    [info] = g.list_threads()
    return str(info.status)


def test_a_frozen_thread_runs_nothing_and_unfreezes_as_it_was(store: Checkpointer) -> None:
    calls: list[str] = []
    g = fan(store, calls)
    g.invoke({}, thread_id="t")
    assert sorted(calls) == ["quick", "review"]
    before = g.get_state("t")
    g.freeze("t", by="secops", reason="incident 42")
    assert status(g) == "frozen"
    with pytest.raises(ThreadFrozenError, match="'t'"):
        g.invoke(None, thread_id="t", resume="yes")
    with pytest.raises(ThreadFrozenError):
        g.submit("t", resume="yes")
    with pytest.raises(ThreadFrozenError):
        g.update_state("t", {"log": ["x"]})
    with pytest.raises(ThreadFrozenError):
        g.freeze("t", by="secops", reason="again")
    assert sorted(calls) == ["quick", "review"]  # nothing ran
    assert g.get_state("t").values == before.values  # reads still work
    g.unfreeze("t", by="secops", reason="resolved")
    assert status(g) == "paused"
    assert [p.value for p in g.pending_pauses("t")] == ["ok?"]
    res = g.invoke(None, thread_id="t", resume="yes")
    assert res.status == "done"
    # quick's write of the paused step was kept through freeze and unfreeze; it never reran
    assert sorted(res.state["log"]) == ["quick", "review:yes"]
    assert sorted(calls) == ["quick", "review", "review"]


def test_freeze_and_unfreeze_are_kept_in_the_history(store: Checkpointer) -> None:
    g = fan(store, [])
    g.invoke({}, thread_id="t")
    g.freeze("t", by="secops", reason="incident 42")
    g.unfreeze("t", by="lead", reason="resolved")
    metas = [h.metadata for h in g.get_state_history("t")]
    assert metas[0]["unfrozen"] == {"reason": "resolved", "by": "lead"}
    assert metas[1]["frozen"] == {"reason": "incident 42", "by": "secops", "previous": "paused"}
    # Each says what made it (not "update": no state was updated).
    assert [m["source"] for m in metas[:3]] == ["unfreeze", "freeze", "input"]
    g.cancel("t", reason="dropped", by="lead")
    newest = g.get_state_history("t", limit=1)[0]
    assert newest.metadata["source"] == "cancel" and newest.metadata["cancelled"]["by"] == "lead"


def test_a_freeze_and_an_unfreeze_by_no_one_name_the_same_actor(store: Checkpointer) -> None:
    """Neither names who acted: both are graphflow's own, a system principal (the freeze
    was recorded as 'graphflow', the unfreeze as 'system')."""
    g = fan(store, [])
    g.invoke({}, thread_id="t")
    g.freeze("t", reason="incident 42")
    g.unfreeze("t", reason="resolved")
    trail = [(e.stage, e.actor) for e in g.audit("t") if e.stage in ("freeze", "unfreeze")]
    assert trail == [("freeze", "graphflow"), ("unfreeze", "graphflow")]


def test_a_done_thread_unfreezes_done(store: Checkpointer) -> None:
    g = fan(store, [])
    g.invoke({}, thread_id="t")
    g.invoke(None, thread_id="t", resume="yes")
    g.freeze("t", by="secops", reason="audit")
    assert status(g) == "frozen"
    with pytest.raises(ThreadFinishedError):  # (frozen, it is done all the same)
        g.cancel("t", reason="late", by="secops")
    g.unfreeze("t", by="secops", reason="done auditing")
    assert status(g) == "done"


def test_bad_freeze_calls_are_refused(store: Checkpointer) -> None:
    g = fan(store, [])
    with pytest.raises(ThreadNotFoundError):
        g.freeze("nope", by="secops", reason="x")
    g.invoke({}, thread_id="t")
    with pytest.raises(InvalidArgumentError, match="not frozen"):
        g.unfreeze("t", by="secops", reason="x")


class Refusing(SqliteCheckpointer):
    """A store that refuses the commit that would mark the thread (a full disk, say)."""

    async def commit(self, thread_id: Any, owner: str, batch: CommitBatch) -> None:
        if batch.checkpoint is not None and batch.checkpoint.source in ("cancel", "freeze"):
            raise SerializationError("the disk is full (a refusal of this test)")
        await super().commit(thread_id, owner, batch)


def on_log(store: Checkpointer, log: EvidenceLog) -> Any:
    """``fan`` on ``store``, writing its evidence to ``log``."""
    g = fan(store, [])
    return CompiledGraph(g.spec, g.checkpointer, evidence=log)


def stages(log: EvidenceLog, thread: str) -> list[str]:
    return [str(r.event["extensions"]["graphflow"]["stage"]) for r in log.events(thread)]


@pytest.mark.parametrize("verb", ["cancel", "freeze"])
def test_a_mark_the_store_refuses_leaves_no_event(tmp_path: Path, verb: str) -> None:
    log = EvidenceLog(tmp_path / "x.evidence.db")
    graph = on_log(Refusing(tmp_path / "x.db"), log)
    assert graph.invoke({}, thread_id="t").status == "paused"
    before = stages(log, "t")
    with pytest.raises(SerializationError):
        getattr(graph, verb)("t", reason="incident", by="secops")
    assert stages(log, "t") == before  # no event of a change that did not happen
    assert status(graph) == "paused"


def test_a_freeze_while_the_log_is_read_only_is_written_when_audited(
    tmp_path: Path, read_only: Any
) -> None:
    log = EvidenceLog(tmp_path / "x.evidence.db")
    graph = on_log(SqliteCheckpointer(tmp_path / "x.db"), log)
    assert graph.invoke({}, thread_id="t").status == "paused"
    with read_only(tmp_path / "x.evidence.db"):
        graph.freeze("t", reason="incident", by="secops")  # never waits on the log
        assert status(graph) == "frozen" and "frozen" not in stages(log, "t")
    graph.audit("t")  # what the outbox kept is written now
    assert stages(log, "t")[-1] == "frozen" and log.verify().ok
