"""The sync API: thin wrappers that run the async implementation (STYLE.md 2).

``sync_method(amethod)`` makes ``invoke`` of ``ainvoke`` (and so on): one helper for every
method, keyword arguments passed through. ``sync_iter_method`` does the same for an async
generator (``stream`` of ``astream``). Both run on an event loop private to the calling
thread and kept between calls (a loop made and closed per call would cost more than a short
run: benchmark W5), where stores may do their I/O inline (``checkpoints.blocking.inline_io``); a
call from inside a running event loop is refused (use the async method there).

Ctrl-C interrupts the loop; the call's task is then cancelled and run to its end, so its
cleanup (giving up a lease) happens. ``asyncio.Runner`` would serve too, but it swaps the
SIGINT handler on every call (W5 measures the cost).
"""

from __future__ import annotations

import asyncio  # noqa: TID251 - a reusable loop runner for the sync API (anyio runs on it)
import atexit
import contextlib
import contextvars
import functools
import os
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar

from checkpoints.blocking import inline_io

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")


def _check_no_loop(what: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        f"{what}() cannot be called inside a running event loop; use a{what}() instead"
    )


class _Loop:
    """This thread's event loop, kept between sync calls, which run on it one at a time."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pid = os.getpid()

    def get(self) -> asyncio.AbstractEventLoop:
        if self.pid != os.getpid():
            # A forked child: the parent's loop shares its epoll instance with the parent;
            # it is dropped, never used or closed (closing would deregister the parent's).
            self.loop, self.pid = None, os.getpid()
        if self.loop is None or self.loop.is_closed():
            self.loop = asyncio.new_event_loop()
        return self.loop

    def run(self, coro: Coroutine[Any, Any, T], context: contextvars.Context) -> T:
        loop = self.get()
        if loop.is_running():  # a sync call from a node running inline (call_inline)
            return _on_new_loop(coro, context)
        task = loop.create_task(coro, context=context)
        try:
            return loop.run_until_complete(task)
        except BaseException:
            _finish(loop, task)
            raise

    def close(self) -> None:
        loop, self.loop = self.loop, None
        if loop is None or loop.is_closed() or self.pid != os.getpid():
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


def _on_new_loop(coro: Coroutine[Any, Any, T], context: contextvars.Context) -> T:
    """Run ``coro`` on a loop of its own, closed after it (a nested sync call)."""
    runner = _Loop()
    try:
        return runner.run(coro, context)
    finally:
        runner.close()


_running_loop = asyncio.events._get_running_loop
_set_running_loop = asyncio.events._set_running_loop


def call_inline(fn: Callable[..., T], *args: Any) -> T:
    """Call a sync node on the private loop's thread as if no loop ran there: so that the
    node may call ``asyncio.run``, or ``invoke`` another graph, as in a plain thread."""
    loop = _running_loop()
    _set_running_loop(None)
    try:
        return fn(*args)
    finally:
        _set_running_loop(loop)


def _finish(loop: asyncio.AbstractEventLoop, task: asyncio.Future[Any]) -> None:
    """Cancel a call's task that was interrupted while it waited, and run it to its end."""
    if not task.done():
        task.cancel()
        with contextlib.suppress(BaseException):
            loop.run_until_complete(task)


_local = threading.local()

nodes_inline: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "graphflow_nodes_inline", default=True
)
"""Whether a step's lone sync node may run inline on the private loop (``invoke``: a thread
hop would cost more than most nodes). Not while ``stream`` iterates: the loop must stay free
to hand each event over as it happens, so the node runs in a worker thread."""


def _runner() -> _Loop:
    """This thread's loop runner (closed when the interpreter exits)."""
    runner: _Loop | None = getattr(_local, "runner", None)
    if runner is None:
        runner = _local.runner = _Loop()
        atexit.register(runner.close)
    return runner


def _private_context(*, streaming: bool = False) -> contextvars.Context:
    """The caller's context, with ``inline_io`` set: the loop is private to this call (and,
    ``streaming``, ``nodes_inline`` unset)."""
    ctx = contextvars.copy_context()
    ctx.run(inline_io.set, True)
    if streaming:
        ctx.run(nodes_inline.set, False)
    return ctx


def run_sync(
    what: str, fn: Callable[P, Coroutine[Any, Any, T]], *args: P.args, **kwargs: P.kwargs
) -> T:
    """Run ``fn(*args, **kwargs)`` on this thread's private event loop."""
    _check_no_loop(what)
    return _runner().run(fn(*args, **kwargs), _private_context())


def iterate_sync(what: str, agen: AsyncIterator[T]) -> Iterator[T]:
    """Iterate an async generator from sync code, on this thread's private event loop.

    The generator runs in one task of the loop (its task groups stay in one task) and hands
    items over through a queue; the loop runs until the next item is there, and nothing
    blocks it meanwhile (``nodes_inline``). Breaking out of the loop cancels the generator's
    task and runs it to its end.
    """
    _check_no_loop(what)
    loop = _runner().get()
    own: _Loop | None = None
    if loop.is_running():  # a stream from a node running inline (call_inline)
        own = _Loop()
        loop = own.get()
    items: asyncio.Queue[tuple[bool, Any]] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for item in agen:
                items.put_nowait((True, item))
        except Exception as e:
            items.put_nowait((False, e))
        else:
            items.put_nowait((False, None))

    task = loop.create_task(pump(), context=_private_context(streaming=True))
    try:
        while True:
            getter = loop.create_task(items.get())
            try:
                ok, item = loop.run_until_complete(getter)
            except BaseException:
                _finish(loop, getter)
                raise
            if not ok:
                loop.run_until_complete(task)
                if item is not None:
                    raise item
                return
            yield item
    finally:
        _finish(loop, task)
        if own is not None:
            own.close()


def sync_method(
    amethod: Callable[Concatenate[S, P], Coroutine[Any, Any, T]], what: str
) -> Callable[Concatenate[S, P], T]:
    """The sync twin of an async method: same arguments, run by ``run_sync``."""

    def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(what, amethod, self, *args, **kwargs)

    return _named(method, amethod, what)


def sync_iter_method(
    amethod: Callable[Concatenate[S, P], AsyncIterator[T]], what: str
) -> Callable[Concatenate[S, P], Iterator[T]]:
    """The sync twin of an async generator method, iterated by ``iterate_sync``."""

    def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        _check_no_loop(what)  # (when called, not when first iterated)
        return iterate_sync(what, amethod(self, *args, **kwargs))

    return _named(method, amethod, what)


F = TypeVar("F", bound=Callable[..., Any])


def _named(method: F, amethod: Callable[..., Any], what: str) -> F:
    """Give a sync twin its name, its async twin's signature (``__wrapped__``) and a
    docstring pointing at it."""
    functools.update_wrapper(method, amethod)
    method.__name__ = what
    method.__qualname__ = amethod.__qualname__.rpartition(".")[0] + "." + what
    method.__doc__ = f"Sync ``{amethod.__name__}`` (same arguments)."
    return method
