"""Stores written by older versions stay readable: ``tests/fixtures/golden``.

``v1_paused.sqlite`` was written by the code of schema 1 (``make_v1.py``), and
``v1_paused_reads.json`` is what that code read back. Today's code migrates a copy (once,
however many processes open it at the same time) and must read the same, then finish the
paused thread.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
import sys
from pathlib import Path
from types import ModuleType

import anyio
import pytest

from checkpoints import SqliteCheckpointer
from checkpoints.sqlite import migrations

GOLDEN = Path(__file__).parents[1] / "fixtures" / "golden"


def make_v1() -> ModuleType:
    """The fixture's script, as a module (its graphs and its ``reads``)."""
    spec = importlib.util.spec_from_file_location("golden_make_v1", GOLDEN / "make_v1.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (type hints of its state are looked up there)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    path = tmp_path / "v1.sqlite"
    shutil.copyfile(GOLDEN / "v1_paused.sqlite", path)
    return path


def applied(path: Path) -> list[tuple[str, int]]:
    """The migrations a file records, each with the file's schema version: the count of its
    ledger, or the ``schema_version`` of the record older versions also kept."""
    conn = sqlite3.connect(path)
    try:
        names = conn.execute("SELECT name FROM _graphflow_migrations ORDER BY name").fetchall()
        legacy = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = '_graphflow_meta'"
        ).fetchall()
        version = len(names)
        if legacy:
            [(version,)] = conn.execute(
                "SELECT value FROM _graphflow_meta WHERE key = 'schema_version'"
            ).fetchall()
        return [(name, version) for (name,) in names]
    finally:
        conn.close()


def test_the_fixture_is_of_schema_1() -> None:
    assert applied(GOLDEN / "v1_paused.sqlite") == [("0001_initial", 1)]


def test_a_schema_1_store_is_migrated_and_reads_the_same(copy: Path) -> None:
    expected = json.loads((GOLDEN / "v1_paused_reads.json").read_text())
    script = make_v1()
    cp = SqliteCheckpointer(copy)
    got = anyio.run(script.reads, cp)
    anyio.run(cp.close)
    assert got == expected
    n = migrations.SCHEMA_VERSION
    assert applied(copy) == [(name, n) for name, _ in migrations.MIGRATIONS]
    conn = sqlite3.connect(copy)
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "_graphflow_meta" not in tables  # the old record was folded into the ledger
    # Decisions written before pause_id and extra existed have neither.
    cp = SqliteCheckpointer(copy)
    [decision] = anyio.run(cp.list_decisions, script.ThreadId("t1"))
    assert (decision.pause_id, decision.extra) == (None, {})
    anyio.run(cp.close)


def test_the_migrated_thread_finishes(copy: Path) -> None:
    """The answer submitted under schema 1 is applied; finished work is not redone."""
    script = make_v1()
    cp = SqliteCheckpointer(copy)
    graph = script.graph(cp)
    result = graph.invoke(None, thread_id="t1")
    assert result.status == "done"
    assert result.state == {"log": [script.BIG, "a", "b"], "count": 1, "note": "c: yes"}
    anyio.run(cp.close)


OPENER = """
import sys, time, os
from checkpoints import SqliteCheckpointer
from checkpoints.models import ThreadId
import anyio
path = sys.argv[1]
print("ready", flush=True)
while not os.path.exists(path + ".go"):
    time.sleep(0.001)
cp = SqliteCheckpointer(path)
rec = anyio.run(cp.get_thread, ThreadId("t1"))
anyio.run(cp.close)
print(rec.status)
"""


@pytest.mark.slow
def test_concurrent_openers_migrate_once(copy: Path) -> None:
    """Four processes open the schema-1 file at once: each reads it, one migrated it (a
    second run of 0002 would fail on the columns it added, and say so)."""
    import subprocess

    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, str(copy)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        Path(f"{copy}.go").touch()
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [(p.returncode, out.split()[-1:]) for p, (out, _) in zip(procs, outs, strict=True)] == [
        (0, ["paused"])
    ] * 4, [err for _, err in outs]
    n = migrations.SCHEMA_VERSION
    assert applied(copy) == [(name, n) for name, _ in migrations.MIGRATIONS]
    expected = json.loads((GOLDEN / "v1_paused_reads.json").read_text())
    cp = SqliteCheckpointer(copy)
    assert anyio.run(make_v1().reads, cp) == expected
    anyio.run(cp.close)


# -- schema 2, the layout of checkpoints.sqlite ----------------------------------------------


def make_v2() -> ModuleType:
    """``make_v2.py`` as a module (it imports ``make_v1`` beside it)."""
    sys.path.insert(0, str(GOLDEN))
    try:
        spec = importlib.util.spec_from_file_location("golden_make_v2", GOLDEN / "make_v2.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(GOLDEN))


@pytest.fixture
def copy_v2(tmp_path: Path) -> Path:
    path = tmp_path / "v2.sqlite"
    shutil.copyfile(GOLDEN / "v2_paused.sqlite", path)
    return path


def test_the_v2_fixture_is_of_schema_2_with_one_ledger() -> None:
    assert applied(GOLDEN / "v2_paused.sqlite") == [("0001_initial", 2), ("0002_checksums", 2)]


def test_a_schema_2_store_reads_the_same(copy_v2: Path) -> None:
    """Every later version must read today's format as today's code read it."""
    expected = json.loads((GOLDEN / "v2_paused_reads.json").read_text())
    cp = SqliteCheckpointer(copy_v2)
    assert anyio.run(make_v2().reads, cp) == expected
    anyio.run(cp.close)
    n = migrations.SCHEMA_VERSION
    assert applied(copy_v2) == [(name, n) for name, _ in migrations.MIGRATIONS]


def test_the_schema_2_thread_finishes(copy_v2: Path) -> None:
    script = make_v1()
    cp = SqliteCheckpointer(copy_v2)
    result = script.graph(cp).invoke(None, thread_id="t1")
    assert result.status == "done"
    assert result.state == {"log": [script.BIG, "a", "b"], "count": 1, "note": "c: yes"}
    anyio.run(cp.close)


# -- every older schema ----------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["v1_paused.sqlite", "v2_paused.sqlite"])
def test_a_migrated_store_pages_and_counts(fixture: str, tmp_path: Path) -> None:
    """Files of older schemas gain the index of pages and the tallies of the counts: pages
    and counts read them, and finishing the paused thread moves its count."""
    path = tmp_path / fixture
    shutil.copyfile(GOLDEN / fixture, path)
    cp = SqliteCheckpointer(path)

    async def look() -> tuple[object, ...]:
        first = await cp.list_threads(limit=1)
        rest = await cp.list_threads(limit=1, after=first[-1].thread_id)
        counts = [await cp.count_threads(s) for s in (None, "paused", "done")]
        return [i.thread_id for i in first + rest], *counts

    assert anyio.run(look) == (["t1", "t2"], 2, 1, 1)
    assert make_v1().graph(cp).invoke(None, thread_id="t1").status == "done"
    assert anyio.run(look) == (["t1", "t2"], 2, 0, 2)
    anyio.run(cp.close)
