"""Run the conformance suite (``conformance.py``) against every checkpointer backend."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from checkpoints import Checkpointer, MemoryCheckpointer, SqliteCheckpointer

try:  # tests/checkpoints is a package once tests/__init__.py exists
    from . import conformance, conformance_runnable
except ImportError:  # pytest's default rootdir-relative import
    import conformance  # type: ignore[no-redef]
    import conformance_runnable  # type: ignore[no-redef]

ALL_CHECKS = [*conformance.CHECKS, *conformance_runnable.CHECKS]

BACKENDS: dict[str, Callable[[Path], Checkpointer]] = {
    "memory": lambda path: MemoryCheckpointer(),
    "sqlite": lambda path: SqliteCheckpointer(path / "store.sqlite"),
    # "postgres": lambda path: PostgresCheckpointer(dsn_for(path)),  <- one line per backend
}
"""Backend name -> a checkpointer on a new, empty store in the given empty directory."""

KNOWN_BUGS: dict[tuple[str, str], str] = {}
"""(backend, check) pairs expected to fail until the named bug is fixed (strict xfail)."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=sorted(BACKENDS))
async def make(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[conformance.Factory]:
    """A factory of checkpointers on new stores of one backend; all closed afterwards."""
    build = BACKENDS[request.param]
    created: list[Checkpointer] = []
    counter = itertools.count()

    def factory() -> Checkpointer:
        directory = tmp_path / f"store-{next(counter)}"
        directory.mkdir()
        cp = build(directory)
        created.append(cp)
        return cp

    yield factory
    for cp in created:
        await cp.close()


@pytest.mark.anyio
@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
async def test_conformance(
    make: conformance.Factory, check: conformance.Check, request: pytest.FixtureRequest
) -> None:
    backend = request.node.callspec.params["make"]
    bug = KNOWN_BUGS.get((backend, check.__name__))
    if bug is not None:
        request.applymarker(pytest.mark.xfail(reason=bug, strict=True))
    await check(make)


def test_checkpointers_satisfy_the_protocol(tmp_path: Path) -> None:
    for name, build in BACKENDS.items():
        directory = tmp_path / name
        directory.mkdir()
        assert isinstance(build(directory), Checkpointer), name
