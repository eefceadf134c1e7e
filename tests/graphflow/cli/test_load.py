"""``load.call``: one call of the SQLite store, its I/O inline, run without an event loop."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from checkpoints.blocking import inline_io
from graphflow.cli import load


def test_a_call_that_never_suspends_runs_inline_without_leaking_inline_io() -> None:
    seen: list[bool] = []

    async def read(x: int) -> int:
        seen.append(inline_io.get())
        return x + 1

    assert load.call(read, 1) == 2
    assert seen == [True]
    assert inline_io.get() is False  # set inside the call's own context only


def test_a_call_that_suspends_is_refused() -> None:
    """Only store calls that never wait are passed (a SQLite store's, its I/O inline)."""

    class Later:
        def __await__(self) -> Generator[None, None, None]:
            yield  # what an event loop would resume

    async def wait() -> None:
        await Later()

    with pytest.raises(RuntimeError, match="wait waited for an event loop"):
        load.call(wait)


def test_what_the_call_raises_is_raised() -> None:
    async def broken() -> None:
        raise LookupError("no such row")

    with pytest.raises(LookupError, match="no such row"):
        load.call(broken)
