"""Listing and counting paused threads at 100,000 threads in one SQLite file.

    python benchmarks/paused_threads.py [--threads 100000] [--reps 7]

Setup, not timed: a one-node graph that interrupts runs one thread; what it stored (the
thread row, its input checkpoint, the paused task, the pause) is then written for
``--threads`` threads through the store's own commit path, one ``CommitBatch`` a thread as
the engine commits a pause, at ``synchronous=OFF`` (durability is not measured here).

Timed, on a new ``SqliteCheckpointer`` of the file (the async protocol with its I/O inline,
as the sync API and the CLI call it), the median of ``--reps`` repetitions of:

- the first page of 100: ``list_threads("paused", limit=100)`` (target < 2 ms);
- counting them: ``count_threads("paused")`` (target < 20 ms);
- the full listing, unpaged (``list_threads("paused")``) and paged (pages of 1,000 and of
  100, each page's cursor its last thread id) (target < 50 ms);

and the bytes per paused thread (the file's size, its WAL folded in, over ``--threads``).
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypedDict

import anyio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _results import emit, row

from checkpoints import CommitBatch, SqliteCheckpointer, ThreadInfo, ThreadUpdate
from checkpoints.blocking import inline_io
from checkpoints.lease import new_owner
from checkpoints.models import ThreadId, new_checkpoint_id
from graphflow import END, START, StateGraph, interrupt

PAGE = 100


class State(TypedDict, total=False):
    answer: str


def ask(state: State) -> State:
    return {"answer": str(interrupt("ok?"))}


def build(path: str, count: int) -> None:
    """``count`` paused threads on ``path``, each what the one-node graph stores."""
    store = SqliteCheckpointer(path, synchronous="OFF")
    graph = StateGraph(State).add_node(ask).add_edge(START, "ask").add_edge("ask", END)
    model = ThreadId(f"thread-{count - 1:06d}")  # the last one: the others copy it
    graph.compile(checkpointer=store, name="ask").invoke({}, thread_id=model)

    async def copies() -> None:
        inline_io.set(True)
        thread = await store.get_thread(model)
        head = await store.get_checkpoint(model)
        assert thread is not None and head is not None and thread.status == "paused"
        tasks = list((await store.load_tasks(model, "", head.id)).values())
        pauses = await store.list_pauses(model)
        owner = new_owner()
        for i in range(count - 1):
            tid = ThreadId(f"thread-{i:06d}")
            ck = dataclasses.replace(head, thread_id=tid, id=new_checkpoint_id())
            batch = CommitBatch(
                checkpoint=ck,
                tasks=[dataclasses.replace(t, checkpoint_id=ck.id) for t in tasks],
                pauses=[dataclasses.replace(p, thread_id=tid, checkpoint_id=ck.id) for p in pauses],
                thread=ThreadUpdate("paused", thread.pending_pause_ids, thread.graph_name),
                check_head=True,
                acquire_ttl=60.0,
                release=True,
            )
            await store.commit(tid, owner, batch)
        await store.close()

    anyio.run(copies)
    conn = sqlite3.connect(path)  # fold the WAL into the file (a close at OFF leaves it)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


async def median_ms(reps: int, fn: Callable[[], Awaitable[Any]]) -> tuple[float, float, Any]:
    """Median and best wall time in ms of ``reps`` calls of ``fn`` (after one warm-up),
    and what the last call returned."""
    got = await fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        got = await fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), min(times), got


async def measure(path: str, count: int, reps: int) -> list[tuple[str, float, float, float]]:
    """(what, median ms, best ms, target ms) of each read."""
    inline_io.set(True)
    cp = SqliteCheckpointer(path)
    try:

        async def paged(size: int) -> list[ThreadInfo]:
            seen: list[ThreadInfo] = []
            after: str | None = None
            while True:
                page = await cp.list_threads("paused", limit=size, after=after)
                seen += page
                if len(page) < size:
                    return seen
                after = page[-1].thread_id

        out = []
        med, best, first = await median_ms(reps, lambda: cp.list_threads("paused", limit=PAGE))
        assert [t.thread_id for t in first] == [f"thread-{i:06d}" for i in range(PAGE)]
        out.append((f"first page of {PAGE}", med, best, 2.0))
        med, best, n = await median_ms(reps, lambda: cp.count_threads("paused"))
        assert n == count, n
        out.append(("count_threads('paused')", med, best, 20.0))
        med, best, full = await median_ms(reps, lambda: cp.list_threads("paused"))
        assert len(full) == count and {t.pending_pauses for t in full} == {1}
        out.append(("full listing, unpaged", med, best, 50.0))
        for size in (1000, PAGE):
            med, best, seen = await median_ms(reps, lambda s=size: paged(s))  # type: ignore[misc]
            assert [t.thread_id for t in seen] == sorted(t.thread_id for t in full)
            out.append((f"full listing, pages of {size:,}", med, best, 50.0))
        return out
    finally:
        await cp.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "paused.db")
        start = time.perf_counter()
        build(path, args.threads)
        took = time.perf_counter() - start
        per_thread = os.path.getsize(path) / args.threads
        print(f"{args.threads:,} paused threads written in {took:.1f} s (not timed below)")
        results = anyio.run(measure, path, args.threads, args.reps)
    print(f"{'read':<32} {'median ms':>10} {'best ms':>8} {'target':>8}  met")
    rows = []
    for what, med, best, target in results:
        met = "yes" if med < target else "no"
        print(f"{what:<32} {med:>10.2f} {best:>8.2f} {'< ' + f'{target:g}':>8}  {met}")
        rows.append(row(what, round(med, 3), "ms", f"< {target:g}",
                        f"median of {args.reps}, best {best:.2f}; {args.threads:,} threads"
                        f"; target {'met' if med < target else 'not met'}"))  # fmt: skip
    print(f"{'bytes per paused thread':<32} {per_thread:>10.0f}")
    rows.append(row("bytes per paused thread", round(per_thread), "B", None,
                    "file size / threads, WAL folded in"))  # fmt: skip
    emit("paused_threads", rows)


if __name__ == "__main__":
    main()
