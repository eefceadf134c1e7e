"""A damaged SQLite store, read through the graph: the error names the thread and the
checkpoint, and says what to do (``checkpoints.errors.RESTORE``), from every entry point."""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from checkpoints import CorruptCheckpointError, SqliteCheckpointer
from checkpoints.errors import RESTORE
from graphflow import END, START, StateGraph, interrupt


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    answer: str


def build(path: Path) -> Any:
    """a -> ask (an interrupt) -> END."""
    g = StateGraph(State)
    g.add_node("a", lambda s: {"log": ["a"]})
    g.add_node("ask", lambda s: {"answer": str(interrupt("ok?"))})
    g.add_edge(START, "a").add_edge("a", "ask").add_edge("ask", END)
    return g.compile(checkpointer=SqliteCheckpointer(path), evidence=False)


DAMAGE = {  # what is deleted: (SQL, what the message says is missing or damaged)
    "a channel value": ("DELETE FROM gf_channels WHERE channel = 'log'", "channel 'log'"),
    "the head checkpoint": (
        "DELETE FROM gf_checkpoints WHERE id = (SELECT head FROM gf_threads)",
        "checkpoint",
    ),
    "the pause": ("DELETE FROM gf_pauses", "pauses"),
}
READS: dict[str, Callable[[Any], object]] = {
    "get_state": lambda g: g.get_state("t"),
    "get_state_history": lambda g: g.get_state_history("t"),
    "pending_pauses": lambda g: g.pending_pauses("t"),
    "invoke": lambda g: g.invoke(None, thread_id="t", resume="yes"),
}


CASES = [  # (pending_pauses reads no channel and no checkpoint)
    (damage, read) for damage in DAMAGE for read in READS
    if read != "pending_pauses" or damage == "the pause"
]  # fmt: skip


@pytest.mark.parametrize(("damage", "read"), CASES)
def test_damage_is_named_with_what_to_do(tmp_path: Path, damage: str, read: str) -> None:
    path = tmp_path / "x.db"
    build(path).invoke({"log": []}, thread_id="t")
    sql, named = DAMAGE[damage]
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(sql)
    conn.close()
    with pytest.raises(CorruptCheckpointError) as caught:
        READS[read](build(path))
    message = str(caught.value)
    assert "thread 't'" in message and named in message
    assert message.endswith(f"; {RESTORE}"), message  # (the checkpoint, if named, before it)
    assert caught.value.thread_id == "t"
