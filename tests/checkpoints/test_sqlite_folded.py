"""A closed chain of a list channel is folded into its chunk in the SQLite store (migration
``0007_folded_chains``, ``checkpoints.chunks``): its appends are deleted in the chunk's
transaction and a ``closed`` row points at the chunk, from which every checkpoint inside the
chain reads its value. Damage to either is reported, never guessed."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from checkpoints import CommitBatch, CorruptCheckpointError, SqliteCheckpointer, serde
from checkpoints.models import ChannelWrite, next_version
from checkpoints.sqlite.rows import checks
from checkpoints.testing.support import T1, leased

pytestmark = pytest.mark.anyio

Expected = dict[int, tuple[list[Any], tuple[int, int]]]


async def chains(path: Path, *, old_chunk: bool = False) -> Expected:
    """A ``log`` channel: a set, then 3 appends and a chunk, twice, then 2 appends; what
    each version reads as. ``old_chunk``: the first chunk as schema 6 stored it (no
    lengths, its chain's appends kept), written in SQL."""
    cp, owner = await leased(lambda: SqliteCheckpointer(path))

    async def write(w: ChannelWrite) -> None:
        await cp.commit(T1, owner, CommitBatch(channels=[w]))

    start = next_version()
    await write(ChannelWrite("log", start, "set", ["s"]))
    expected: Expected = {start: (["s"], (start, 0))}
    value, base, count = ["s"], start, 0
    for i in range(10):
        v = next_version()
        items: list[Any] = [f"i{i}"] * (i % 3 + 1)  # (appends of 1 to 3 items)
        if count == 3 and old_chunk and i == 3:  # (the first chain: value[1:] its items)
            blob = serde.dumps([base, [*value[1:], *items]], key="log")
            crc = checks.channel_crc(T1, "", "log", v, "chunk", v, blob)
            sql(path, "INSERT INTO gf_channels VALUES (?, '', 'log', ?, 'chunk', ?, ?, NULL, ?)",
                (T1, v, v, blob, crc))  # fmt: skip
            base, count = v, 0
        elif count == 3:
            await write(ChannelWrite("log", v, "chunk", items, base, count))
            base, count = v, 0
        else:
            await write(ChannelWrite("log", v, "append", items, base))
            count += 1
        value = [*value, *items]
        expected[v] = (value, (base, count))
    await cp.close()
    return expected


async def read_all(path: Path, expected: Expected) -> None:
    cp = SqliteCheckpointer(path)
    try:
        for v, (want, chain) in expected.items():
            assert await cp.load_channels(T1, "", {"log": v}, {"log": chain}) == {"log": want}
    finally:
        await cp.close()


def sql(path: Path, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.close()


async def test_every_version_of_a_folded_chain_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    expected = await chains(path)
    kinds = sql(path, "SELECT kind, count(*) FROM gf_channels GROUP BY kind ORDER BY kind")
    assert kinds == [("append", 2), ("chunk", 2), ("closed", 2), ("set", 1)]
    await read_all(path, expected)


async def test_a_chain_closed_by_a_chunk_of_schema_6_reads_as_before(tmp_path: Path) -> None:
    """Its appends were kept and its chunk holds no lengths: read from the appends."""
    path = tmp_path / "x.db"
    expected = await chains(path, old_chunk=True)
    assert sql(path, "SELECT count(*) FROM gf_channels WHERE kind = 'append'") == [(5,)]
    await read_all(path, expected)


async def test_the_same_chunk_committed_again_is_the_same(tmp_path: Path) -> None:
    """A chunk whose chain was folded already (its commit made twice) keeps its items."""
    path = tmp_path / "x.db"
    cp, owner = await leased(lambda: SqliteCheckpointer(path))
    start, a, c = next_version(), next_version(), next_version()
    batches = [
        ChannelWrite("log", start, "set", ["s"]),
        ChannelWrite("log", a, "append", ["a"], start),
        ChannelWrite("log", c, "chunk", ["c"], start, 1),
    ]
    for w in batches:
        await cp.commit(T1, owner, CommitBatch(channels=[w]))
    await cp.commit(T1, owner, CommitBatch(channels=[batches[-1]]))
    got = await cp.load_channels(T1, "", {"log": c}, {"log": (c, 0)})
    assert got == {"log": ["s", "a", "c"]}
    assert await cp.load_channels(T1, "", {"log": a}, {"log": (start, 1)}) == {"log": ["s", "a"]}
    await cp.close()


DAMAGE = {
    "closed row deleted": "DELETE FROM gf_channels WHERE kind = 'closed'",
    "closed row moved": "UPDATE gf_channels SET version = version + 1 WHERE kind = 'closed'",
    "closed row's checksum": "UPDATE gf_channels SET crc = crc + 1 WHERE kind = 'closed'",
    "closed row doubled": "INSERT INTO gf_channels SELECT thread_id, ns, channel, version + 1,"
    " kind, base, blob, blob_id, crc FROM gf_channels WHERE kind = 'closed'",
}


@pytest.mark.parametrize("damage", list(DAMAGE))
async def test_damage_to_a_closed_row_is_reported(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "x.db"
    expected = await chains(path)
    sql(path, DAMAGE[damage])
    inside = next(v for v, (_, chain) in expected.items() if chain[1] > 0)  # in chain 1
    cp = SqliteCheckpointer(path)
    try:
        with pytest.raises(CorruptCheckpointError, match="'log'") as err:
            await cp.load_channels(T1, "", {"log": inside}, {"log": expected[inside][1]})
        assert err.value.thread_id == T1
    finally:
        await cp.close()


@pytest.mark.parametrize(
    "lengths", [[1, 2], [1, 2, 3, 9], [-1, 2, 3, 2], "123", [1.0, 2, 3, 2]], ids=repr
)
async def test_a_chunk_with_damaged_lengths_is_reported(tmp_path: Path, lengths: Any) -> None:
    """Even with its checksum made again (a foreign writer): the lengths must count the
    chunk's items, one for each write of the chain it folded."""
    path = tmp_path / "x.db"
    expected = await chains(path)
    [(version, blob)] = sql(
        path, "SELECT c.version, coalesce(c.blob, b.data) FROM gf_channels c LEFT JOIN"
        " gf_blobs b ON b.id = c.blob_id WHERE kind = 'chunk' ORDER BY version LIMIT 1"
    )  # fmt: skip
    assert isinstance(blob, bytes) and isinstance(version, int)
    start, items, _ = serde.loads(blob)
    bad = serde.dumps([start, items, lengths], key="log")
    crc = checks.channel_crc(T1, "", "log", version, "chunk", version, bad)
    sql(path, "UPDATE gf_channels SET blob = ?, blob_id = NULL, crc = ? WHERE version = ?",
        (bad, crc, version))  # fmt: skip
    inside = next(v for v, (_, chain) in expected.items() if chain == (start, 2))
    cp = SqliteCheckpointer(path)
    try:
        with pytest.raises(CorruptCheckpointError, match="'log'"):
            await cp.load_channels(T1, "", {"log": inside}, {"log": (start, 2)})
    finally:
        await cp.close()
