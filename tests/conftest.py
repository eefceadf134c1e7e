"""Shared fixtures: the anyio backend, a detector of blocking calls on the event loop, and
``read_only`` (a file or directory made read-only for a block, as root too).

Tests of async paths (marked ``anyio``) run under blockbuster (as anyio's own suite does):
a blocking call (sleep, file or socket I/O, SQLite, a lock wait) made on an event loop's
thread by code that graphflow or checkpoints called raises ``blockbuster.BlockingError``, so
the test fails. A test body's own blocking calls are its business. graphflow's sync API
runs each call on a private loop where blocking I/O is allowed
(``checkpoints.blocking.inline_io``, also set on the lease keeper's loop): not reported.

Every evidence event any test writes is validated against the AAEF schema (``EvidenceLog``
reads ``GRAPHFLOW_EVIDENCE_VALIDATE``; child processes inherit it): an event that does not
fit fails the test that wrote it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

os.environ["GRAPHFLOW_EVIDENCE_VALIDATE"] = "1"

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from blockbuster import BlockBuster

from checkpoints.blocking import inline_io


def _allowing_inline_io(predicate: Callable[..., bool]) -> Callable[..., bool]:
    def can_block(*args: Any, **kwargs: Any) -> bool:
        return inline_io.get() or predicate(*args, **kwargs)

    return can_block


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True, scope="session")
def _evidence_schema_loaded() -> None:
    """The validation the suite turns on (``GRAPHFLOW_EVIDENCE_VALIDATE``) reads the schema
    files when a process's first log is made: a blocking read that the first async test to
    compile a graph would make on its loop, whichever test runs first. Read it once here."""
    from graphflow.evidence import EvidenceLog

    EvidenceLog(":memory:")


@pytest.fixture(autouse=True)
def no_blocking_on_the_loop(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail an async test whose library code blocked the event loop's thread."""
    node = request.node
    if node.get_closest_marker("anyio") is None or node.get_closest_marker("blocking_ok"):
        yield
        return
    # (The conformance checks are test code: they may block, as tests do.)
    bb = BlockBuster(["graphflow", "checkpoints"], excluded_modules=["checkpoints.testing"])
    for fn in bb.functions.values():
        fn.can_block_predicate = _allowing_inline_io(fn.can_block_predicate)
        # Resolving a store's path when it is made (a stat, no wait): accepted.
        fn.can_block_in("checkpoints/sqlite/durability.py", "__init__")
    bb.activate()
    try:
        yield
    finally:
        bb.deactivate()


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    """A checkpointer of each kind: in memory, and a SQLite file (closed at teardown)."""
    import anyio

    from checkpoints import MemoryCheckpointer, SqliteCheckpointer

    if request.param == "memory":
        yield MemoryCheckpointer()
        return
    cp = SqliteCheckpointer(tmp_path / "store.db")
    yield cp
    anyio.run(cp.close)


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[None]:
    """``path`` (a file or a directory) made read-only: by its mode, or (root ignores
    modes) as an immutable file."""
    if os.geteuid() != 0:
        mode, back = (0o555, "755") if path.is_dir() else (0o444, "644")
        os.chmod(path, mode)
        undo = ["chmod", back, str(path)]
    else:
        try:
            made = subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode
        except FileNotFoundError:
            made = 1
        if made != 0:
            pytest.skip("cannot make a file read-only for root here (no chattr +i)")
        undo = ["chattr", "-i", str(path)]
    try:
        assert not os.access(path, os.W_OK)
        yield
    finally:
        subprocess.run(undo, check=True)


@pytest.fixture
def read_only() -> Callable[[Path], contextlib.AbstractContextManager[None]]:
    """``with read_only(path):`` a file or directory read-only for the block."""
    return _read_only
