"""How a backend does blocking I/O: on the event loop thread, or in a thread hop.

graphflow's sync API (``invoke``, ``stream``, ...) runs each call on a private event loop
that nothing else shares. There a thread hop per database call costs more than it saves
(on this class of machine a hop costs as much as an fsync'd commit), so the sync wrappers
set ``inline_io`` and backends do their I/O directly. Under the async API, on the caller's
event loop, ``inline_io`` is false and backends run I/O in a worker thread so that the loop
never waits for the disk.

The limiters of those hops belong to one event loop (anyio's primitives wake their waiters
on the loop they run on), while one store may serve the event loops of several threads at
once. So each object keeps what its hops share once per running loop (``per_loop``); its
own threading lock is what orders its calls across loops.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from anyio.lowlevel import RunVar

T = TypeVar("T")

inline_io: ContextVar[bool] = ContextVar("checkpoints_inline_io", default=False)
"""True while the current event loop is private to one graphflow sync call."""


@functools.cache
def _kept() -> RunVar[weakref.WeakKeyDictionary[Any, Any]]:
    # Imported at the first hop, not with this module: the sync API never needs it (W4).
    from anyio.lowlevel import RunVar

    return RunVar("checkpoints_per_loop")


def per_loop(owner: object, make: Callable[[], T]) -> T:
    """What ``owner`` keeps for the running event loop: made by ``make`` at the loop's first
    call, dropped with the loop (or with ``owner``). Call it on the event loop."""
    var = _kept()
    try:
        kept = var.get()
    except LookupError:
        kept = weakref.WeakKeyDictionary()
        var.set(kept)
    value: T | None = kept.get(owner)
    if value is None:
        value = kept[owner] = make()
    return value
