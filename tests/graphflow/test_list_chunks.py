"""A long list channel is stored in chunks, never rewritten whole (``checkpoints.chunks``):
a chat loop's history reads back at every step, and what a step stores stays bounded as the
history grows."""

from __future__ import annotations

import operator
import sqlite3
from pathlib import Path
from typing import Annotated, Any, TypedDict

import anyio
import pytest

from checkpoints import SqliteCheckpointer
from graphflow import END, START, StateGraph
from graphflow.engine.apply import CHUNK_EVERY

STEPS = 600  # past where the list was rewritten whole (every 512 appends), and 4 chunks
ITEM = 100  # bytes of text per message


class Chat(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]


def _message(i: int, item: int = ITEM) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"{i:06d}" + "x" * (item - 6)}


def chat_loop(steps: int, item: int = ITEM) -> StateGraph:
    b = StateGraph(Chat)
    b.add_node("chat", lambda s: {"messages": [_message(len(s["messages"]), item)]})
    b.add_edge(START, "chat")
    b.add_conditional_edges("chat", lambda s: END if len(s["messages"]) >= steps else "chat")
    return b


def test_a_long_history_reads_back_at_every_step(store: Any) -> None:
    graph = chat_loop(STEPS).compile(checkpointer=store)
    out = graph.invoke({"messages": []}, thread_id="t", recursion_limit=STEPS + 10)
    assert out.state["messages"] == [_message(i) for i in range(STEPS)]
    history = graph.get_state_history("t")
    assert len(history) >= STEPS
    for snap in history:
        n = len(snap.values["messages"])
        assert snap.values["messages"] == [_message(i) for i in range(n)]


def _bytes_per_version(path: Path) -> dict[int, int]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT c.version, length(coalesce(c.blob, b.data)) FROM gf_channels c"
            " LEFT JOIN gf_blobs b ON b.id = c.blob_id WHERE c.channel = 'messages'"
        ).fetchall()
    finally:
        conn.close()
    out: dict[int, int] = {}
    for version, size in rows:
        out[version] = out.get(version, 0) + size
    return out


def _run_chat(path: Path, item: int = ITEM) -> None:
    cp = SqliteCheckpointer(path)
    try:
        graph = chat_loop(STEPS, item).compile(checkpointer=cp, evidence=False)
        graph.invoke({"messages": []}, thread_id="t", recursion_limit=STEPS + 10)
    finally:
        anyio.run(cp.close)


def _kinds(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT kind, count(*) FROM gf_channels WHERE channel = 'messages' GROUP BY kind"
        ).fetchall()
    finally:
        conn.close()
    return dict(rows)


def test_what_a_step_stores_stays_bounded_as_the_history_grows(tmp_path: Path) -> None:
    """No step stores more than a chunk's worth of messages, however long the history: the
    bytes written per step do not grow with it (the list used to be rewritten whole every
    512 appends), and each message is stored once (a closed chain is folded into its
    chunk)."""
    path = tmp_path / "chat.db"
    _run_chat(path)
    sizes = _bytes_per_version(path)
    one = len(_bytes_of_one())
    assert max(sizes.values()) <= (CHUNK_EVERY + 1) * one * 1.1  # a chunk at most
    chunks = [s for s in sizes.values() if s > 2 * one]
    assert len(chunks) == STEPS // CHUNK_EVERY
    assert max(chunks) <= min(chunks) * 1.1  # the same late as early: nothing grows
    assert sum(sizes.values()) <= 1.1 * STEPS * one  # each message once


@pytest.mark.parametrize("item", [ITEM, 1000])  # (1000: each value in gf_blobs)
def test_a_closed_chain_keeps_no_append_rows(tmp_path: Path, item: int) -> None:
    """Only the open chain's appends are stored; each closed one left a ``closed`` row, and
    the large values of its appends went with them."""
    path = tmp_path / "chat.db"
    _run_chat(path, item)
    n_chunks = STEPS // CHUNK_EVERY
    assert _kinds(path) == {  # (the input sets the list; each step appends a message)
        "set": 1, "chunk": n_chunks, "closed": n_chunks,
        "append": STEPS - n_chunks * CHUNK_EVERY,
    }  # fmt: skip
    conn = sqlite3.connect(path)
    try:
        [(blobs,)] = conn.execute("SELECT count(*) FROM gf_blobs").fetchall()
        [(used,)] = conn.execute(
            "SELECT count(*) FROM gf_channels WHERE blob_id IS NOT NULL"
        ).fetchall()
    finally:
        conn.close()
    appends = STEPS - n_chunks * CHUNK_EVERY
    assert blobs == used == n_chunks + (appends if item > 900 else 0)
    cp = SqliteCheckpointer(path)
    try:
        graph = chat_loop(STEPS, item).compile(checkpointer=cp, evidence=False)
        for snap in graph.get_state_history("t"):  # folded chains read from their chunk
            n = len(snap.values["messages"])
            assert snap.values["messages"] == [_message(i, item) for i in range(n)]
    finally:
        anyio.run(cp.close)


def _bytes_of_one() -> bytes:
    from checkpoints import serde

    return serde.dumps([_message(1)])
