"""A thread row stores its newest root checkpoint only where it is not the head (migration
``0006_newest``): NULL is read as the head, and history still checks its newest row."""

from __future__ import annotations

import operator
import sqlite3
from pathlib import Path
from typing import Annotated, TypedDict

import anyio
import pytest

from checkpoints import CorruptCheckpointError, SqliteCheckpointer
from graphflow import END, START, StateGraph, interrupt


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def build(path: Path):  # type: ignore[no-untyped-def]
    """a -> z (asks) -> END."""
    g = StateGraph(State)
    g.add_node("a", lambda s: {"log": ["a"]})
    g.add_node("z", lambda s: {"log": [str(interrupt("ok?"))]})
    g.add_edge(START, "a")
    g.add_edge("a", "z")
    g.add_edge("z", END)
    return g.compile(checkpointer=SqliteCheckpointer(path), evidence=False)


def sql(path: Path, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.close()


def first_of_history(path: Path, thread_id: str) -> list[str]:
    """The store's newest root checkpoint, read with a limit (checked against ``newest``)."""

    async def go() -> list[str]:
        store = SqliteCheckpointer(path)
        try:
            return [c.id for c in await store.list_checkpoints(thread_id, "", limit=1)]
        finally:
            await store.close()

    return anyio.run(go)


def newest(path: Path, thread_id: str) -> list[tuple[object, ...]]:
    return sql(path, "SELECT newest, head FROM gf_threads WHERE thread_id = ?", (thread_id,))


def test_a_thread_whose_head_is_its_newest_checkpoint_stores_no_second_copy(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.db"
    graph = build(path)
    graph.invoke({}, thread_id="t")  # paused
    [(stored, head)] = newest(path, "t")
    assert stored is None and head == graph.get_state("t").checkpoint_id
    graph.invoke(None, thread_id="t", resume="yes")  # done
    [(stored, head)] = newest(path, "t")
    assert stored is None and head == graph.get_state("t").checkpoint_id
    history = list(graph.get_state_history("t"))
    assert first_of_history(path, "t") == [head]
    assert history[0].checkpoint_id == head and history[0].values == {"log": ["a", "yes"]}


def test_a_fork_from_an_older_checkpoint_keeps_the_rule(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    graph = build(path)
    graph.invoke({}, thread_id="t")
    graph.invoke(None, thread_id="t", resume="yes")
    old = next(s for s in graph.get_state_history("t") if s.next == ("z",))
    graph.invoke(None, thread_id="t", checkpoint_id=old.checkpoint_id)  # pauses again
    [(stored, head)] = newest(path, "t")
    assert stored is None
    assert first_of_history(path, "t") == [head]
    assert graph.get_state("t").next == ("z",)


def test_a_deleted_head_checkpoint_is_still_damage_to_history(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    graph = build(path)
    graph.invoke({}, thread_id="t")
    head = graph.get_state("t").checkpoint_id
    sql(path, "DELETE FROM gf_checkpoints WHERE id = ?", (head,))
    with pytest.raises(CorruptCheckpointError, match="the newest is not the one recorded"):
        first_of_history(path, "t")
    with pytest.raises(CorruptCheckpointError, match="1 rows found where the count says 2"):
        list(graph.get_state_history("t"))


def test_a_file_of_schema_5_is_migrated_and_reads_the_same(tmp_path: Path) -> None:
    """Version 5 stored the head again in ``newest``; the migration clears such copies and
    leaves a ``newest`` that is not the head as it was."""
    path = tmp_path / "x.db"
    graph = build(path)
    for t in ("t", "u"):
        graph.invoke({}, thread_id=t)
    before = {t: list(graph.get_state_history(t)) for t in ("t", "u")}
    older = before["u"][-1].checkpoint_id
    sql(path, "UPDATE gf_threads SET newest = head WHERE thread_id = 't'")
    sql(path, "UPDATE gf_threads SET newest = ? WHERE thread_id = 'u'", ("~" + older,))
    sql(path, "DELETE FROM _graphflow_migrations WHERE name >= '0006'")  # (and later ones)
    again = build(path)
    again.invoke({}, thread_id="v")  # a write access migrates the file
    assert ("0006_newest",) in sql(path, "SELECT name FROM _graphflow_migrations")
    assert newest(path, "t")[0][0] is None
    assert newest(path, "u")[0][0] == "~" + older  # not the head: kept
    assert list(again.get_state_history("t")) == before["t"]
    with pytest.raises(CorruptCheckpointError, match="the newest is not the one recorded"):
        first_of_history(path, "u")
