"""Damage every cell of a real store, one at a time: no read may return another result.

A store holds a paused thread (a list channel whose first value lives in ``gf_blobs``, an
int channel, a step of two tasks, one completed and one paused after a memoized step, a
subgraph namespace with its own checkpoints, task and memo, two answers, two decisions, a
completed dispatch) and a finished thread. For every table, row and column, a copy of the
file gets one damage: a flipped byte (two positions of each value, chosen the same way every
run), NULL, text, or the value of another row of the table, swapped. Then every read of
the protocol runs on the copy; each must return exactly what it returns on the undamaged
file, or raise ``CorruptCheckpointError`` saying what to do (``RESTORE``). Any other
outcome is counted and reported: there must be none.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import sqlite3
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from checkpoints import (
    AnswerRecord,
    ChannelWrite,
    CheckpointRecord,
    CommitBatch,
    CorruptCheckpointError,
    DecisionRecord,
    DispatchRecord,
    MemoRecord,
    PauseRecord,
    SqliteCheckpointer,
    TaskRecord,
    TaskSpec,
    ThreadUpdate,
)
from checkpoints.blocking import inline_io
from checkpoints.errors import RESTORE
from checkpoints.models import (
    CallId,
    CheckpointId,
    PauseId,
    TaskId,
    ThreadId,
    new_checkpoint_id,
    next_version,
)

T1, T2 = ThreadId("t1"), ThreadId("t2")
NS = "review:task-c"
BIG = "start " * 200  # over 900 bytes serialized: stored in gf_blobs
P1 = PauseId("task-c:i0")
CALL = CallId("call-1")


def ck(
    thread: ThreadId,
    ns: str,
    parent: CheckpointId | None,
    step: int,
    versions: dict[str, int],
    frontier: tuple[TaskSpec, ...],
    bases: dict[str, tuple[int, int]] | None = None,
) -> CheckpointRecord:
    return CheckpointRecord(
        id=new_checkpoint_id(), thread_id=thread, ns=ns, parent_id=parent, step=step,
        source="loop" if parent else "input", channel_versions=versions, frontier=frontier,
        metadata={"step": step}, channel_bases=bases or {},
    )  # fmt: skip


async def build(path: Path) -> dict[str, Any]:
    """Write the store (as the engine does, commit by commit); return the ids to read."""
    cp = SqliteCheckpointer(path)
    owner = "host:1:writer"
    v0, v1 = next_version(), next_version()
    c0 = ck(T1, "", None, -1, {"log": v0, "count": v0}, (TaskSpec(TaskId("task-a"), "a"),))
    await cp.commit(T1, owner, CommitBatch(
        checkpoint=c0, acquire_ttl=60.0, check_head=True, durable=False,
        channels=[ChannelWrite("log", v0, "set", [BIG]), ChannelWrite("count", v0, "set", 0)],
        thread=ThreadUpdate("running", (), "sweep"),
    ))  # fmt: skip
    spec_b, spec_c = TaskSpec(TaskId("task-b"), "b"), TaskSpec(TaskId("task-c"), "c")
    c1 = ck(T1, "", c0.id, 0, {"log": v1, "count": v1}, (spec_b, spec_c), {"log": (v0, 1)})
    await cp.commit(T1, owner, CommitBatch(
        tasks=[TaskRecord(c0.id, TaskId("task-a"), "a", "completed", 1, 1.0, 2.0)],
        checkpoint=c1, expected_head=c0.id, check_head=True,
        channels=[ChannelWrite("log", v1, "append", ["a"], base=v0),
                  ChannelWrite("count", v1, "set", 1)],
    ))  # fmt: skip
    # The parallel step: b completes, c runs a subgraph that memoizes a step and pauses.
    await cp.commit(T1, owner, CommitBatch(tasks=[TaskRecord(
        c1.id, TaskId("task-b"), "b", "completed", 1, 3.0, 4.0,
        writes=[("log", ["b"])], routes=["END"],
    )]))  # fmt: skip
    s_v = next_version()
    s0 = ck(T1, NS, None, -1, {"x": s_v}, (TaskSpec(TaskId("sub-1"), "check"),))
    await cp.commit(T1, owner, CommitBatch(ns=NS, checkpoint=s0,
                    channels=[ChannelWrite("x", s_v, "set", 7)]))  # fmt: skip
    s_v2 = next_version()
    s1 = ck(T1, NS, s0.id, 0, {"x": s_v2}, (TaskSpec(TaskId("sub-2"), "ask"),))
    await cp.commit(T1, owner, CommitBatch(
        ns=NS, checkpoint=s1, channels=[ChannelWrite("x", s_v2, "set", 8)],
        tasks=[TaskRecord(s0.id, TaskId("sub-1"), "check", "completed", 1, 5.0, 6.0)],
    ))  # fmt: skip
    await cp.commit(T1, owner, CommitBatch(ns=NS, memos=[
        MemoRecord(s1.id, TaskId("sub-2"), "lookup", {"found": (1, "x")}, 7.0)]))  # fmt: skip
    await cp.commit(T1, owner, CommitBatch(
        memos=[MemoRecord(c1.id, TaskId("task-c"), "prep", [1.5, "é"], 7.5)]))  # fmt: skip
    pause = PauseRecord(P1, T1, "", c1.id, TaskId("task-c"), "c", "interrupt", {"q": "ok?"}, 8.0)
    await cp.commit(T1, owner, CommitBatch(
        tasks=[TaskRecord(c1.id, TaskId("task-c"), "c", "paused", 1, 7.0, 8.0)],
        pauses=[pause], thread=ThreadUpdate("paused", (P1,), "sweep"), release=True,
    ))  # fmt: skip
    await cp.put_answers([AnswerRecord(P1, T1, "first", by="ann", reason="r", created_at=9.0)])
    await cp.put_answers([AnswerRecord(P1, T1, ("second", 2), by="bob", created_at=10.0)])
    await cp.put_decisions([
        DecisionRecord(T1, CALL, "approve", "fp-1", by="ann", created_at=11.0, pause_id=P1,
                       extra={"principal": "ann", "digest": "sha256:00"}),
        DecisionRecord(T1, CallId("call-2"), "deny", None, reason="no", applied=False,
                       note="mismatch", created_at=12.0),
    ])  # fmt: skip
    await cp.acquire_lease(T1, "w", 60.0)  # (a call is claimed by the lease's holder)
    assert await cp.claim_dispatch(DispatchRecord(T1, CALL, "send", "fp-1", "w", claimed_at=13.0))
    await cp.complete_dispatch(T1, CALL, status="succeeded", result={"sent": 1})
    await cp.release_lease(T1, "w")
    t2_v = next_version()
    d0 = ck(T2, "", None, -1, {"count": t2_v}, ())
    await cp.commit(T2, "host:1:other", CommitBatch(
        checkpoint=d0, acquire_ttl=60.0, check_head=True, release=True,
        channels=[ChannelWrite("count", t2_v, "set", 5)],
        thread=ThreadUpdate("done", (), "sweep-done"),
    ))  # fmt: skip
    await cp.close()
    return {"root": [c0, c1], "ns": [s0, s1], "t2": [d0]}


async def read_everything(path: Path, ids: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """Every read of the protocol on the store at ``path``: (what, result or exception)."""
    cp = SqliteCheckpointer(path)
    out: list[tuple[str, Any]] = []

    async def read(what: str, fn: Callable[[], Any]) -> None:
        try:
            out.append((what, await fn()))
        except Exception as e:
            out.append((what, e))

    try:
        await read("get_thread t1", lambda: cp.get_thread(T1))
        await read("get_thread t2", lambda: cp.get_thread(T2))
        for status in (None, "paused", "done", "running"):
            await read(f"list_threads {status}", lambda s=status: cp.list_threads(s))
            await read(f"count_threads {status}", lambda s=status: cp.count_threads(s))
            # A page of the whole range, which is counted. (A page of part of it is checked
            # row by row: a row whose key was damaged has left it, and only a read of the
            # whole range, counted, can tell.)
            await read(f"page {status}", lambda s=status: cp.list_threads(s, limit=10))
        await read("head", lambda: cp.get_checkpoint(T1))
        await read("head t2", lambda: cp.get_checkpoint(T2))
        await read("newest of ns", lambda: cp.get_checkpoint(T1, NS))
        await read("list root", lambda: cp.list_checkpoints(T1))
        await read("list ns", lambda: cp.list_checkpoints(T1, NS))
        await read("list t2", lambda: cp.list_checkpoints(T2))
        for key, thread, ns in (("root", T1, ""), ("ns", T1, NS), ("t2", T2, "")):
            for c in ids[key]:
                name = f"{key} {c.step}"
                await read(f"get {name}", lambda t=thread, n=ns, c=c: cp.get_checkpoint(t, n, c.id))
                await read(f"channels {name}", lambda t=thread, n=ns, c=c: cp.load_channels(
                    t, n, c.channel_versions, c.channel_bases))  # fmt: skip
                await read(f"tasks {name}", lambda t=thread, n=ns, c=c: cp.load_tasks(t, n, c.id))
                await read(f"memos {name}", lambda t=thread, n=ns, c=c: cp.load_memos(t, n, c.id))
        await read("get_pauses", lambda: cp.get_pauses(T1, [P1]))
        await read("list_pauses", lambda: cp.list_pauses(T1))
        await read("load_answers", lambda: cp.load_answers(T1))
        await read("load_answers p1", lambda: cp.load_answers(T1, [P1]))
        await read("list_decisions", lambda: cp.list_decisions(T1))
        await read("list_decisions call", lambda: cp.list_decisions(T1, CALL))
        await read("get_dispatch", lambda: cp.get_dispatch(T1, CALL))
        await read("resume_thread", lambda: cp.resume_thread(T1, "host:2:sweeper", 60.0))
    finally:
        await cp.close()
    return iter(out)


def comparable(value: Any) -> Any:
    """A read's result with what differs between runs (the lease taken now) left out."""
    if hasattr(value, "thread") and hasattr(value, "checkpoint"):  # a ResumePoint
        return dataclasses.replace(
            value, thread=dataclasses.replace(value.thread, lease_expires_at=None)
        )
    return value


# -- damage -----------------------------------------------------------------------------------


def flips(value: object) -> list[object]:
    """A value with one byte changed, at up to two positions (middle and last: a change of
    the first, a type or length header, is the easiest to see), one bit, or two."""
    if type(value) is bytes or type(value) is str:
        data = value if type(value) is bytes else value.encode()  # type: ignore[union-attr]
        spots = sorted({len(data) // 2, len(data) - 1}) if data else []
        out: list[object] = []
        for i in spots:
            flipped = bytearray(data)  # type: ignore[arg-type]
            flipped[i] ^= 0x01
            out.append(bytes(flipped) if type(value) is bytes else ("text", bytes(flipped)))
        return out
    if type(value) is int:
        return [value ^ 1, value ^ (1 << 33)]
    if type(value) is float:
        raw = struct.pack(">d", value)
        return [struct.unpack(">d", raw[:i] + bytes([raw[i] ^ 1]) + raw[i + 1 :])[0]
                for i in (7, 3)]  # fmt: skip
    return []


Cell = tuple[str, str, dict[str, Any], str, object]
"""(table, where-SQL, where-params, column, value)."""


def cells(path: Path) -> list[Cell]:
    """(table, where-SQL, where-params, column, value) for every cell of every table."""
    conn = sqlite3.connect(path)
    try:
        out = []
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " ORDER BY name"
        )]  # fmt: skip
        for table in tables:
            sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
            info = conn.execute(f"PRAGMA table_info({table})").fetchall()
            columns = [c[1] for c in info]
            if "WITHOUT ROWID" in sql[0].upper():
                keys = [c[1] for c in sorted(info, key=lambda c: c[5]) if c[5]]
            else:
                keys = ["rowid"]
            for row in conn.execute(f"SELECT {', '.join(keys)}, * FROM {table}").fetchall():
                where = " AND ".join(f"{k} IS :k{i}" for i, k in enumerate(keys))
                params = {f"k{i}": v for i, v in enumerate(row[: len(keys)])}
                for column, value in zip(columns, row[len(keys) :], strict=True):
                    out.append((table, where, params, column, value))
        return out
    finally:
        conn.close()


def set_cell(cell: Cell, new: object, conn: sqlite3.Connection) -> None:
    """Give one cell a new value (a ``("text", bytes)`` pair: those bytes, stored as text)."""
    table, where, params, column, _ = cell
    value = new
    target = ":v"
    if type(new) is tuple and new[0] == "text":  # (possibly not UTF-8: as damage makes it)
        value, target = new[1], "CAST(:v AS TEXT)"
    conn.execute(f"UPDATE {table} SET {column} = {target} WHERE {where}", {**params, "v": value})


def swap_cells(cell: Cell, other: Cell, conn: sqlite3.Connection) -> None:
    """Exchange the values of two cells of one column (through a temporary value: the
    column may belong to a unique key)."""
    table, where, params, column, value = cell
    o_where = other[1].replace(":k", ":ok")
    both = {**params, **{f"o{k}": v for k, v in other[2].items()}}
    both |= {"v": value, "o": other[4], "tmp": "swap-tmp"}
    conn.execute(f"UPDATE {table} SET {column} = :tmp WHERE {where}", both)
    conn.execute(f"UPDATE {table} SET {column} = :v WHERE {o_where}", both)
    conn.execute(f"UPDATE {table} SET {column} = :o WHERE {column} IS :tmp", both)


def damages(all_cells: list[Cell]) -> Iterator[tuple[str, Callable[[sqlite3.Connection], None]]]:
    """(description, damage to apply on a connection) for every cell and kind of damage."""
    for n, cell in enumerate(all_cells):
        table, _, params, column, value = cell
        name = f"{table}.{column} {params}"
        for i, new in enumerate(flips(value)):
            yield f"{name}: flip {i}", functools.partial(set_cell, cell, new)
        if value is not None:
            yield f"{name}: NULL", functools.partial(set_cell, cell, None)
        if value != "text":
            yield f"{name}: text", functools.partial(set_cell, cell, "text")
        other = next(
            (c for c in all_cells[n + 1 :] + all_cells[:n]
             if c[0] == table and c[3] == column and c[4] != value),
            None,
        )  # fmt: skip
        if other is not None:
            yield f"{name}: swapped", functools.partial(swap_cells, cell, other)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("sweep") / "store.db"
    ids = anyio.run(build, path)
    assert not Path(f"{path}-wal").exists()  # the WAL is folded in: the file is everything
    return path, ids


def test_every_damaged_cell_is_detected_or_harmless(
    store: tuple[Path, dict[str, Any]], tmp_path: Path, record_property: Callable[..., None]
) -> None:
    path, ids = store

    async def sweep() -> tuple[int, int, int, list[str]]:
        token = inline_io.set(True)  # one private loop: no thread hop per read
        try:
            copy = tmp_path / "copy.db"
            shutil.copyfile(path, copy)
            expected = [(w, comparable(v)) for w, v in await read_everything(copy, ids)]
            bad = [f"{w}: {v!r}" for w, v in expected if isinstance(v, Exception)]
            assert not bad, bad  # the undamaged store reads without error
            cases = detected = 0
            problems: list[str] = []
            for what, damage in damages(cells(path)):
                shutil.copyfile(path, copy)
                conn = sqlite3.connect(copy, isolation_level=None)
                try:
                    conn.execute("BEGIN")
                    damage(conn)
                    conn.execute("COMMIT")
                except sqlite3.Error:  # a constraint refuses it: not a damage this can make
                    continue
                finally:
                    conn.close()
                cases += 1
                seen = False
                for (read, got), (_, want) in zip(
                    await read_everything(copy, ids), expected, strict=True
                ):
                    if isinstance(got, CorruptCheckpointError):
                        seen = True
                        if RESTORE not in str(got):
                            problems.append(f"{what} -> {read}: says not what to do: {got}")
                    elif isinstance(got, Exception):
                        problems.append(f"{what} -> {read}: {type(got).__name__}: {got}")
                    elif comparable(got) != want:
                        problems.append(f"{what} -> {read}: undetected, another result")
                detected += seen
            return cases, detected, cases - detected, problems
        finally:
            inline_io.reset(token)

    t0 = time.perf_counter()
    cases, detected, harmless, problems = anyio.run(sweep)
    elapsed = time.perf_counter() - t0
    print(f"\n{cases} damaged copies: {detected} detected, {harmless} harmless (read the same),"
          f" {len(problems)} problems, in {elapsed:.1f} s")  # fmt: skip
    record_property("sweep_cases", cases)
    assert cases > 1000
    assert not problems, "\n".join(problems[:50]) + f"\n... {len(problems)} in all"
