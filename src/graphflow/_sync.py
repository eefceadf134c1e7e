"""Running the async implementation from sync code (one implementation, thin wrappers)."""

from __future__ import annotations

import queue
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
from anyio.from_thread import start_blocking_portal

from checkpoints.blocking import inline_io

T = TypeVar("T")


def _check_no_loop(what: str) -> None:
    try:
        anyio.lowlevel.current_token()
    except RuntimeError:
        return
    raise RuntimeError(
        f"{what}() cannot be called inside a running event loop; use a{what}() instead"
    )


def run_sync(what: str, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run ``fn(*args)`` in a new event loop; refuse inside a running one."""
    _check_no_loop(what)
    token = inline_io.set(True)  # this loop is private to the call: stores may block it
    try:
        return anyio.run(fn, *args)
    finally:
        inline_io.reset(token)


def iterate_sync(what: str, agen_factory: Callable[[], AsyncIterator[T]]) -> Iterator[T]:
    """Iterate an async generator from sync code.

    The generator runs to completion in one task of a blocking portal (its task groups must
    stay in one task) and hands items over through a queue; breaking out of the loop cancels it.
    """
    _check_no_loop(what)
    items: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()

    async def pump() -> None:
        inline_io.set(True)  # the portal's loop is private to this iteration
        try:
            async for item in agen_factory():
                items.put((True, item))
        except Exception as e:
            items.put((False, e))
        else:
            items.put((False, None))

    with start_blocking_portal() as portal:
        fut = portal.start_task_soon(pump)
        try:
            while True:
                ok, item = items.get()
                if not ok:
                    if item is not None:
                        raise item
                    return
                yield item
        finally:
            if not fut.done():
                fut.cancel()
