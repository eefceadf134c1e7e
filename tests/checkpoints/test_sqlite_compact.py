"""Threads, tasks and pauses stored in their key's b-tree (migration ``0005_compact``).

Files written before it are migrated (``test_golden`` reads them back as their own code
did, tasks in the order first written); these tests pin the new layout and its one stored
order, a checkpoint's tasks' ``ord``.
"""

from __future__ import annotations

import operator
import sqlite3
from pathlib import Path
from typing import Annotated, TypedDict

import anyio
import pytest

from checkpoints import CorruptCheckpointError, SqliteCheckpointer
from checkpoints.models import ThreadId
from graphflow import END, START, StateGraph, interrupt

TABLES = ("gf_threads", "gf_tasks", "gf_pauses")


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def build(path: Path):  # type: ignore[no-untyped-def]
    """a -> (b, z) in one step, z asks."""
    g = StateGraph(State)
    g.add_node("a", lambda s: {"log": ["a"]})
    g.add_node("z", lambda s: {"log": [str(interrupt("ok?"))]})
    g.add_node("b", lambda s: {"log": ["b"]})
    g.add_edge(START, "a")
    g.add_edge("a", "z")
    g.add_edge("a", "b")
    g.add_edge("z", END)
    g.add_edge("b", END)
    return g.compile(checkpointer=SqliteCheckpointer(path), evidence=False)


def sql(path: Path, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.close()


def test_the_tables_of_a_paused_thread_keep_no_second_key_index(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    build(path).invoke({}, thread_id="t")
    schema = dict(sql(path, "SELECT name, sql FROM sqlite_master WHERE name IN (?, ?, ?)", TABLES))
    assert sorted(schema) == sorted(TABLES)
    assert all(text.endswith("WITHOUT ROWID") for text in schema.values())
    autoindexes = sql(path, "SELECT name FROM sqlite_master WHERE tbl_name IN (?, ?, ?)"
                      " AND name LIKE 'sqlite_autoindex%'", TABLES)  # fmt: skip
    assert autoindexes == []
    # What listing and paging read, and the counts the triggers keep, came through.
    indexes = {n for (n,) in sql(path, "SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"threads_by_status", "threads_by_id"} <= indexes
    triggers = {n for (n,) in sql(path, "SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert {"gf_count_thread", "gf_count_status", "gf_count_tasks", "gf_count_pauses"} <= triggers
    assert sql(path, "SELECT status, n FROM gf_thread_counts WHERE n > 0") == [("paused", 1)]


def test_tasks_are_read_in_the_order_first_written(tmp_path: Path) -> None:
    """In ``ord`` order, which is the step's (its frontier's); the conformance suite has
    tasks whose ids sort the other way."""
    path = tmp_path / "x.db"
    graph = build(path)
    graph.invoke({}, thread_id="t")
    head = graph.get_state("t")
    frontier = [t.name for t in head.tasks]
    assert sorted(frontier) == ["b", "z"]
    stored = sql(path, "SELECT ord, node FROM gf_tasks WHERE checkpoint_id = ? ORDER BY ord",
                 (head.checkpoint_id,))  # fmt: skip
    assert stored == list(enumerate(frontier))

    async def order() -> list[str]:
        store = SqliteCheckpointer(path)
        try:
            tasks = await store.load_tasks(ThreadId("t"), "", head.checkpoint_id)
            return [rec.node for rec in tasks.values()]
        finally:
            await store.close()

    assert anyio.run(order) == frontier
    # A later commit of those tasks (the resume) keeps their places; the thread finishes.
    done = graph.invoke(None, thread_id="t", resume="yes")
    assert done.status == "done" and sorted(done.state["log"]) == ["a", "b", "yes"]
    again = sql(path, "SELECT ord, node FROM gf_tasks WHERE checkpoint_id = ? ORDER BY ord",
                (head.checkpoint_id,))  # fmt: skip
    assert again == stored


@pytest.mark.parametrize("value", [5, "the other's", "0"])
def test_a_damaged_task_order_is_damage(tmp_path: Path, value: object) -> None:
    """An ``ord`` that is not the task's place (out of range, another's, another type)."""
    path = tmp_path / "x.db"
    graph = build(path)
    graph.invoke({}, thread_id="t")
    head = graph.get_state("t")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        if value == "the other's":
            [(value,)] = conn.execute("SELECT ord FROM gf_tasks WHERE checkpoint_id = ? AND"
                                      " node = 'b'", (head.checkpoint_id,)).fetchall()  # fmt: skip
        conn.execute("UPDATE gf_tasks SET ord = ? WHERE checkpoint_id = ? AND node = 'z'",
                     (value, head.checkpoint_id))  # fmt: skip
    finally:
        conn.close()
    fresh = build(path)
    with pytest.raises(CorruptCheckpointError, match="order is not 0, 1"):
        fresh.get_state("t")
    with pytest.raises(CorruptCheckpointError, match="order is not 0, 1"):
        fresh.invoke(None, thread_id="t", resume="yes")
