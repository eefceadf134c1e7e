"""The fsyncs of an evidence log's appends (``graphflow.evidence.walsync``): a new WAL's
first append is synced once by us, every other at SQLite's ``FULL``; and the default log of
an existing file is opened at ``compile()``."""

from __future__ import annotations

import pathlib
import signal
import subprocess
import sys
import textwrap
from typing import Any, TypedDict

import anyio
import pytest

from checkpoints import SqliteCheckpointer
from graphflow import END, START, StateGraph
from graphflow.compiled import CompiledGraph
from graphflow.evidence import EvidenceError, EvidenceLog, stages, walsync
from graphflow.evidence.store import EvidenceStore
from graphflow.evidence.walsync import WalSync

from ._support import facts

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _levels(log: EvidenceLog) -> tuple[int, int]:
    """The connection's ``synchronous`` and ``wal_autocheckpoint`` between appends."""
    conn = log._store._conn
    assert conn is not None
    return (
        conn.execute("PRAGMA synchronous").fetchone()[0],
        conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0],
    )


@pytest.fixture
def room(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The appends that kept room in the WAL (by their number in the connection)."""
    made: list[int] = []
    real = walsync.wal.make_room

    def counted(fd: int | None) -> int:
        made.append(len(made))
        return real(fd)

    monkeypatch.setattr(walsync.wal, "make_room", counted)
    return made


def test_every_append_syncs_its_wal_and_a_new_wals_first_its_directory(
    tmp_path: pathlib.Path, syncs: list[bool], room: list[int]
) -> None:
    path = tmp_path / "x.evidence.db"
    EvidenceLog(path).close()  # (a new file's tables are its first write, at FULL)
    log = EvidenceLog(path)
    assert _levels(log) == (1, 1000)  # NORMAL: the commit's sync is ours
    log.append(stages.proposed(facts(call_id="c1")))
    assert syncs == [True] and _levels(log) == (1, 1000) and room == []
    for n in (2, 3, 4):
        log.append(stages.proposed(facts(call_id=f"c{n}")))
    assert syncs == [True, False, False, False]
    assert len(room) == 2  # (from the third append on)
    log.close()  # (the last connection: SQLite removes the WAL)
    again = EvidenceLog(path)
    again.append(stages.proposed(facts(call_id="c5")))
    assert syncs[4:] == [True]
    assert [r.seq for r in again.events()] == [1, 2, 3, 4, 5] and again.verify().ok
    again.close()


def test_a_wal_another_writer_started_meanwhile_is_appended_to_as_any_other(
    tmp_path: pathlib.Path, syncs: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = EvidenceLog(tmp_path / "x.evidence.db")
    looks: list[bool] = []
    real = WalSync.is_new

    def raced(self: WalSync) -> bool:
        looks.append(real(self))
        return len(looks) == 1  # empty at the first look, written by then under the lock

    monkeypatch.setattr(WalSync, "is_new", raced)
    log.append(stages.proposed(facts()))
    assert len(looks) == 2 and syncs == [False]
    assert _levels(log) == (1, 1000)
    assert [r.seq for r in log.events()] == [1]
    log.close()


def test_a_process_log_never_syncs(tmp_path: pathlib.Path, syncs: list[bool]) -> None:
    log = EvidenceLog(tmp_path / "x.evidence.db", durability="process")
    log.append(stages.proposed(facts()))
    assert syncs == [] and _levels(log) == (1, 1000)  # NORMAL
    log.close()


def test_without_a_descriptor_on_the_wal_sqlite_syncs_at_full(
    tmp_path: pathlib.Path, syncs: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(walsync.wal, "open_fd", lambda path: None)
    log = EvidenceLog(tmp_path / "x.evidence.db")
    log.append(stages.proposed(facts()))
    assert syncs == [] and _levels(log) == (2, 1000)  # FULL
    log.close()


def test_a_first_append_killed_right_after_it_returned_is_kept(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "x.evidence.db"
    EvidenceLog(path).close()
    code = textwrap.dedent(
        f"""
        import os, signal
        from graphflow.evidence import CallFacts, EvidenceLog, stages
        call = CallFacts(thread_id="t1", call_id="c1", tool="t", args={{}}, agent="a")
        log = EvidenceLog({str(path)!r})
        log.append(stages.proposed(call))
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    got = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True)
    assert got.returncode == -signal.SIGKILL, got.stderr
    log = EvidenceLog(path)
    assert [r.event_type for r in log.events()] == ["agentic_action_attempted"] and log.verify().ok
    log.close()


class S(TypedDict):
    x: int


def _graph(store: SqliteCheckpointer) -> CompiledGraph:
    b = StateGraph(S)
    b.add_node("a", lambda s: {"x": 1})
    b.add_edge(START, "a")
    b.add_edge("a", END)
    return b.compile(checkpointer=store)


def test_compile_opens_an_existing_default_log_and_makes_none(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    real = EvidenceStore._open

    def counted(self: EvidenceStore) -> Any:
        opened.append(self.path)
        return real(self)

    monkeypatch.setattr(EvidenceStore, "_open", counted)
    db = tmp_path / "x.db"
    store = SqliteCheckpointer(db)
    _graph(store)
    assert opened == [] and not (tmp_path / "x.evidence.db").exists()  # no file made
    EvidenceLog(tmp_path / "x.evidence.db").close()
    anyio.run(store.close)
    opened.clear()
    other = SqliteCheckpointer(db)
    graph = _graph(other)  # (a resumed run in a new process finds its log open)
    assert opened == [str(tmp_path / "x.evidence.db")]
    assert graph.evidence is not None and opened == [str(tmp_path / "x.evidence.db")]
    anyio.run(other.close)


def test_an_existing_log_that_cannot_be_opened_fails_when_first_needed(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "x.evidence.db").write_text("not a database, not a log")
    store = SqliteCheckpointer(tmp_path / "x.db")
    graph = _graph(store)  # (no error at compile: the log is not needed yet)
    with pytest.raises(EvidenceError, match=r"x\.evidence\.db"):
        _ = graph.evidence
    anyio.run(store.close)
