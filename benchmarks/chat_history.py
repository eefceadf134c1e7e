"""A long chat loop on SQLite: file size, step latency and reading the latest state.

    python benchmarks/chat_history.py [--steps 10000] [--bytes 1024]

One thread of a one-node graph that appends a ``--bytes`` chat message to a list channel
per step, for ``--steps`` steps, on a new SQLite file (``durability="fsync"``, evidence
off: no event is written anyway), against the raw "append only the new message" store: one
``INSERT`` of the message and ``COMMIT`` per step in a WAL-mode file at
``synchronous=FULL``. Reported: the file size of each and their ratio (target: graphflow
within 1.5x of the raw store), the median and the longest step of graphflow and their
ratio (target: no step over 10x the median), and the time to read the latest state from a
fresh store (median of 5; target: under 3 ms), beside the raw store reading its messages
back (a new connection, every row, decoded), and the raw store's own longest step against
its median (the disk's fsync spikes, which both pay). Each step's duration is the time
between two node entries, so it includes the step's commit. Each store starts on a settled
disk (``settle``): the writeback of files written before (by earlier benchmarks, or the other
store) would otherwise stall random steps of its run.
"""

from __future__ import annotations

import argparse
import operator
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent))


class Chat(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]


def messages(steps: int, size: int) -> list[dict[str, Any]]:
    rnd = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz "
    return [
        {"role": "user" if i % 2 else "assistant",
         "content": "".join(rnd.choice(letters) for _ in range(size))}
        for i in range(steps)
    ]  # fmt: skip


def settle() -> None:
    """Write back what the system holds unwritten, then let the disk go idle."""
    os.sync()
    time.sleep(1.0)


def file_bytes(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def graphflow_run(folder: str, msgs: list[dict[str, Any]]) -> dict[str, Any]:
    import anyio

    from checkpoints import SqliteCheckpointer
    from graphflow import END, START, StateGraph

    steps = len(msgs)
    entries: list[float] = []

    def chat(state: Chat) -> dict[str, Any]:
        entries.append(time.perf_counter())
        return {"messages": [msgs[len(state["messages"])]]}

    b = StateGraph(Chat)
    b.add_node("chat", chat)
    b.add_edge(START, "chat")
    b.add_conditional_edges("chat", lambda s: END if len(s["messages"]) >= steps else "chat")
    path = os.path.join(folder, "gf.db")
    cp = SqliteCheckpointer(path)
    graph = b.compile(checkpointer=cp, evidence=False)
    out = graph.invoke({"messages": []}, thread_id="chat", recursion_limit=steps + 10)
    end = time.perf_counter()
    anyio.run(cp.close)
    assert len(out.state["messages"]) == steps
    bounds = [*entries, end]
    step_s = [bounds[i + 1] - bounds[i] for i in range(len(entries))]
    reads = []
    for _ in range(5):
        cp2 = SqliteCheckpointer(path)
        g2 = b.compile(checkpointer=cp2, evidence=False)
        t0 = time.perf_counter()
        snap = g2.get_state("chat")
        reads.append(time.perf_counter() - t0)
        assert snap is not None and len(snap.values["messages"]) == steps
        anyio.run(cp2.close)
    return {"bytes": file_bytes(path), "steps": step_s, "read_s": statistics.median(reads)}


def raw_run(folder: str, msgs: list[dict[str, Any]]) -> tuple[int, float, list[float]]:
    """The raw store's file size, its latest read (every message, decoded) from a new
    connection (median of 5), and the duration of each of its steps."""
    import msgpack

    path = os.path.join(folder, "raw.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE messages (thread_id TEXT, step INTEGER, blob BLOB,"
                 " PRIMARY KEY (thread_id, step))")  # fmt: skip
    step_s = []
    for step, m in enumerate(msgs):
        t0 = time.perf_counter()
        conn.execute("BEGIN")
        conn.execute("INSERT INTO messages VALUES (?, ?, ?)", ("chat", step, msgpack.packb(m)))
        conn.execute("COMMIT")
        step_s.append(time.perf_counter() - t0)
    conn.close()
    reads = []
    for _ in range(5):
        t0 = time.perf_counter()
        conn = sqlite3.connect(path)
        rows = conn.execute("SELECT blob FROM messages WHERE thread_id = ? ORDER BY step",
                            ("chat",)).fetchall()  # fmt: skip
        value = [msgpack.unpackb(blob) for (blob,) in rows]
        conn.close()
        reads.append(time.perf_counter() - t0)
        assert len(value) == len(msgs)
    return file_bytes(path), statistics.median(reads), step_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--bytes", type=int, default=1024)
    a = p.parse_args()
    msgs = messages(a.steps, a.bytes)
    with tempfile.TemporaryDirectory() as d:
        settle()
        gf = graphflow_run(d, msgs)
        settle()
        raw, raw_read, raw_steps = raw_run(d, msgs)
    median = statistics.median(gf["steps"])
    longest = max(gf["steps"])
    from graphflow.engine.apply import CHUNK_EVERY

    # The steps whose commit writes a chunk (the CHUNK_EVERY-th append of the list): the
    # median of their ratios, which the disk's random stalls do not move as they move the max
    chunk_steps = gf["steps"][CHUNK_EVERY - 1 :: CHUNK_EVERY]
    chunk_ratio = statistics.median(chunk_steps) / median
    size_ratio = gf["bytes"] / raw
    print(f"chat loop: {a.steps} steps of {a.bytes} B messages, SQLite")
    print(f"  file: graphflow {gf['bytes']:,} B, raw delta store {raw:,} B,"
          f" ratio {size_ratio:.2f} (target <= 1.5)")  # fmt: skip
    raw_median, raw_longest = statistics.median(raw_steps), max(raw_steps)
    print(f"  step: median {median * 1e3:.3f} ms, longest {longest * 1e3:.3f} ms,"
          f" longest/median {longest / median:.1f} (target <= 10); the raw store's:"
          f" median {raw_median * 1e3:.3f} ms, longest/median"
          f" {raw_longest / raw_median:.1f}")  # fmt: skip
    print(f"  a step that writes a chunk (every {CHUNK_EVERY}th): {chunk_ratio:.1f}x the median"
          f" (median over its {len(chunk_steps)})")  # fmt: skip
    print(f"  latest state read from a fresh store: {gf['read_s'] * 1e3:.2f} ms (target < 3);"
          f" the raw store reading its messages: {raw_read * 1e3:.2f} ms"
          f" (ratio {gf['read_s'] / raw_read:.2f})")  # fmt: skip
    from _results import emit, row

    emit(
        "chat_history",
        [
            row(f"file bytes / raw delta store ({a.steps} steps)", size_ratio, "x", "<= 1.5"),
            row("longest step / median step", longest / median, "x", "<= 10"),
            row(
                "chunk step / median step",
                chunk_ratio,
                "x",
                None,
                f"median over the {len(chunk_steps)} steps that write a chunk",
            ),
            row(
                "longest step / median step, raw store",
                raw_longest / raw_median,
                "x",
                None,
                "its INSERT and COMMIT of each message",
            ),
            row("latest state read", gf["read_s"] * 1e3, "ms", "< 3"),
            row(
                "latest state read, raw store",
                raw_read * 1e3,
                "ms",
                None,
                "every message from a new connection, decoded",
            ),
            row("latest state read / raw store", gf["read_s"] / raw_read, "x"),
        ],
    )


if __name__ == "__main__":
    main()
