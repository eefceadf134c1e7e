"""Running the async implementation from sync code (one implementation, thin wrappers)."""

from __future__ import annotations

import asyncio  # noqa: TID251 - a reusable loop runner for the sync API (anyio runs on it)
import atexit
import contextvars
import importlib
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
from anyio.from_thread import start_blocking_portal

from checkpoints.blocking import inline_io

T = TypeVar("T")

# anyio loads its asyncio backend on first use, inside the first run: load it with graphflow
# instead, so that a process resuming a thread reaches its first node sooner.
importlib.import_module("anyio._backends._asyncio")


def _check_no_loop(what: str) -> None:
    try:
        anyio.lowlevel.current_token()
    except RuntimeError:
        return
    raise RuntimeError(
        f"{what}() cannot be called inside a running event loop; use a{what}() instead"
    )


_local = threading.local()


def _runner() -> asyncio.Runner:
    """This thread's event loop runner, kept between calls.

    Making and closing an event loop costs about four times what a short run of a graph
    does; one loop per thread serves every sync call made from that thread, one at a time.
    """
    runner: asyncio.Runner | None = getattr(_local, "runner", None)
    if runner is None:
        runner = _local.runner = asyncio.Runner()
        atexit.register(runner.close)
    return runner


def run_sync(what: str, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run ``fn(*args)`` on this thread's private event loop; refuse inside a running one."""
    _check_no_loop(what)
    token = inline_io.set(True)  # this loop is private to the call: stores may block it
    try:
        ctx = contextvars.copy_context()  # each call starts from the caller's context
        return _runner().run(_call(fn, *args), context=ctx)
    finally:
        inline_io.reset(token)


async def _call(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    return await fn(*args)


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
