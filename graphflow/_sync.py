"""Running the async implementation from sync code (one implementation, thin wrappers)."""

from __future__ import annotations

import asyncio  # noqa: TID251 - a reusable loop runner for the sync API (anyio runs on it)
import atexit
import contextlib
import contextvars
import importlib
import os
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

import sniffio
from anyio.from_thread import start_blocking_portal

from checkpoints.blocking import inline_io
from checkpoints.keeper import on_start

T = TypeVar("T")

# anyio loads its asyncio backend on first use, inside the first run: load it with graphflow
# instead, so that a process resuming a thread reaches its first node sooner.
importlib.import_module("anyio._backends._asyncio")


def _check_no_loop(what: str) -> None:
    # What anyio.lowlevel.current_token() tells, without raising (~2 us) when no loop runs.
    running = (
        asyncio._get_running_loop() is not None
        or sniffio.thread_local.name is not None
        or sniffio.current_async_library_cvar.get() is not None
    )
    if not running:
        return
    raise RuntimeError(
        f"{what}() cannot be called inside a running event loop; use a{what}() instead"
    )


_local = threading.local()

_spare: list[asyncio.AbstractEventLoop] = []
"""One event loop made ahead by the lease keeper's thread, for the first sync call."""
_forked: list[asyncio.AbstractEventLoop] = []
"""Spare loops inherited by a forked child: never used, never closed (closing would
deregister the parent's descriptors from the epoll instance both share)."""


def _make_spare_loop() -> None:
    # Run by the lease keeper's thread as it starts, while the process waits for a store's
    # files to open: making a loop costs ~0.2 ms in a new process, about a tenth of a short
    # resumed run. Loops have no thread of their own until they run.
    if not _spare:
        _spare.append(asyncio.new_event_loop())


def _take_spare_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return _spare.pop()
    except IndexError:
        return None


def _close_spare() -> None:
    while _spare:
        _spare.pop().close()


def _forget_spare_in_child() -> None:
    _forked.extend(_spare)
    _spare.clear()


on_start(_make_spare_loop)
atexit.register(_close_spare)
os.register_at_fork(after_in_child=_forget_spare_in_child)


class _Loop:
    """This thread's event loop, kept between sync calls, which run on it one at a time.

    Making and closing an event loop costs about four times what a short run of a graph
    does. ``asyncio.Runner`` would serve too, but it swaps the SIGINT handler on every call
    (~20 us, a tenth of a small graph's run); here Ctrl-C interrupts the loop and the call's
    task is then cancelled and run to its end, so its cleanup (giving up a lease) happens.
    """

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def run(self, coro: Coroutine[Any, Any, T], context: contextvars.Context) -> T:
        if self.loop is None:
            self.loop = _take_spare_loop() or asyncio.new_event_loop()
        loop = self.loop
        task = loop.create_task(coro, context=context)
        try:
            return loop.run_until_complete(task)
        except BaseException:
            if not task.done():  # interrupted while the task waited
                task.cancel()
                with contextlib.suppress(BaseException):
                    loop.run_until_complete(task)
            raise

    def close(self) -> None:
        loop, self.loop = self.loop, None
        if loop is None or loop.is_closed():
            return
        try:
            pending = asyncio.all_tasks(loop)
            for t in pending:
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


def _runner() -> _Loop:
    """This thread's loop runner (closed when the interpreter exits)."""
    runner: _Loop | None = getattr(_local, "runner", None)
    if runner is None:
        runner = _local.runner = _Loop()
        atexit.register(runner.close)
    return runner


def run_sync(what: str, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run ``fn(*args)`` on this thread's private event loop; refuse inside a running one."""
    _check_no_loop(what)
    token = inline_io.set(True)  # this loop is private to the call: stores may block it
    try:
        ctx = contextvars.copy_context()  # each call starts from the caller's context
        return _runner().run(_call(fn, *args), ctx)
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
