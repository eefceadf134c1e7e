"""A long list channel is stored in chunks, never rewritten whole (``checkpoints.chunks``):
a chat loop's history reads back at every step, and what a step stores stays bounded as the
history grows."""

from __future__ import annotations

import operator
import sqlite3
from pathlib import Path
from typing import Annotated, Any, TypedDict

import anyio

from checkpoints import SqliteCheckpointer
from graphflow import END, START, StateGraph
from graphflow.engine.apply import CHUNK_EVERY

STEPS = 600  # past where the list was rewritten whole (every 512 appends), and 4 chunks
ITEM = 100  # bytes of text per message


class Chat(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]


def _message(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"{i:06d}" + "x" * (ITEM - 6)}


def chat_loop(steps: int) -> StateGraph:
    b = StateGraph(Chat)
    b.add_node("chat", lambda s: {"messages": [_message(len(s["messages"]))]})
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


def test_what_a_step_stores_stays_bounded_as_the_history_grows(tmp_path: Path) -> None:
    """No step stores more than a chunk's worth of messages, however long the history: the
    bytes written per step do not grow with it (the list used to be rewritten whole every
    512 appends), and the stored total stays within twice the messages' own size."""
    path = tmp_path / "chat.db"
    cp = SqliteCheckpointer(path)
    try:
        graph = chat_loop(STEPS).compile(checkpointer=cp, evidence=False)
        graph.invoke({"messages": []}, thread_id="t", recursion_limit=STEPS + 10)
    finally:
        anyio.run(cp.close)
    sizes = _bytes_per_version(path)
    one = len(_bytes_of_one())
    assert max(sizes.values()) <= (CHUNK_EVERY + 1) * one * 1.1  # a chunk at most
    early = max(s for v, s in sorted(sizes.items())[: STEPS // 2])
    late = max(s for v, s in sorted(sizes.items())[STEPS // 2 :])
    assert late <= early * 1.1  # the same bound late as early: nothing grows with history
    assert sum(sizes.values()) <= 2.2 * STEPS * one  # each message in an append and a chunk


def _bytes_of_one() -> bytes:
    from checkpoints import serde

    return serde.dumps([_message(1)])
