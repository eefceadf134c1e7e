"""An interrupt's pause event is appended without a sync of its own: the pause record,
committed and synced with the step, vouches for it (``graphflow.engine.witness``). A power
loss that takes the log's unsynced tail is played here by putting back a copy of the log
made before the pause: the event is written again, before the answer's, when the pause is
answered or resumed."""

from __future__ import annotations

import os
import pathlib
import shutil
from typing import Any, TypedDict

import pytest

from checkpoints import SqliteCheckpointer
from graphflow import END, START, StateGraph, interrupt
from graphflow.evidence import EvidenceLog


class State(TypedDict, total=False):
    answer: str


def ask(state: State) -> State:
    return {"answer": str(interrupt("ok?"))}


def build(tmp: pathlib.Path) -> tuple[Any, EvidenceLog]:
    if not (tmp / "x.evidence.db").exists():
        EvidenceLog(tmp / "x.evidence.db").close()  # (its tables: the file's first write)
    log = EvidenceLog(tmp / "x.evidence.db")
    g = StateGraph(State).add_node(ask).add_edge(START, "ask").add_edge("ask", END)
    return g.compile(checkpointer=SqliteCheckpointer(tmp / "x.db"), evidence=log), log


def kinds(log: EvidenceLog, thread: str) -> list[str]:
    return [str(e.event["extensions"]["graphflow"]["stage"]) for e in log.events(thread)]


@pytest.fixture
def data_syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every ``fdatasync`` of the process, by descriptor."""
    fds: list[int] = []
    real = os.fdatasync

    def counted(fd: int) -> None:
        fds.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counted)
    return fds


def test_a_pause_event_waits_for_the_next_sync_or_the_close(
    tmp_path: pathlib.Path, syncs: list[bool], data_syncs: list[int]
) -> None:
    graph, log = build(tmp_path)
    graph.invoke({}, thread_id="first")  # (a new WAL's first append is synced all the same)
    assert syncs == [True] and kinds(log, "first") == ["interrupt_paused"]
    fd = log._store._wal.fd
    assert fd is not None
    before = len(data_syncs)
    graph.invoke({}, thread_id="t")
    assert graph.get_state("t").next == ("ask",)
    assert syncs == [True] and fd not in data_syncs[before:]  # the step's commit synced alone
    assert kinds(log, "t") == ["interrupt_paused"]  # (written: another reader sees it)
    # An answer's event is synced, and with it the pause's, written before it.
    graph.invoke(None, thread_id="t", resume="yes")
    assert syncs == [True, False] and kinds(log, "t") == ["interrupt_paused", "interrupt_resumed"]
    graph.invoke({}, thread_id="u")
    before = len(data_syncs)
    log.close()  # syncs what is not yet
    assert data_syncs[before:] == [fd]
    assert log.verify().ok


def lose_the_tail(tmp: pathlib.Path, run: Any) -> None:
    """Run ``run()``, then put back the log as it was before (its unsynced tail lost)."""
    saved = tmp / "saved"
    saved.mkdir()
    names = ("x.evidence.db", "x.evidence.db-wal", "x.evidence.db-shm")
    for name in names:
        if (tmp / name).exists():
            shutil.copyfile(tmp / name, saved / name)
    run()
    for name in names:
        (tmp / name).unlink(missing_ok=True)
        if (saved / name).exists():
            shutil.copyfile(saved / name, tmp / name)


@pytest.mark.parametrize("how", ["resume", "submit"])
def test_a_pause_event_lost_with_the_tail_is_written_again_before_the_answer(
    tmp_path: pathlib.Path, how: str
) -> None:
    graph, log = build(tmp_path)
    graph.invoke({}, thread_id="first")
    log.close()

    def pause() -> None:
        graph, log = build(tmp_path)
        graph.invoke({}, thread_id="t")
        assert kinds(log, "t") == ["interrupt_paused"]
        log._store._wal.unsynced = False  # (the "power loss": nothing synced at close)
        log.close()

    lose_the_tail(tmp_path, pause)
    graph, log = build(tmp_path)
    assert kinds(log, "t") == [] and graph.get_state("t").next == ("ask",)
    if how == "submit":
        graph.submit("t", resume="yes", by="alice")
        assert kinds(log, "t") == ["interrupt_paused", "interrupt_resumed"]
        done = graph.invoke(None, thread_id="t")
    else:
        done = graph.invoke(None, thread_id="t", resume="yes")
    assert done.status == "done" and done.state == {"answer": "yes"}
    assert kinds(log, "t") == ["interrupt_paused", "interrupt_resumed"]
    paused = log.events("t")[0].event["extensions"]["graphflow"]
    assert paused["pause_id"] == graph.get_state_history("t")[-1].tasks[0].pauses[0].id
    assert log.verify().ok
    assert [(e.stage, e.actor) for e in graph.audit("t")] == [
        ("interrupt", "graphflow"),
        ("resume", "alice" if how == "submit" else "graphflow"),
    ]
