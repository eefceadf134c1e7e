"""Whether a backend may do blocking I/O on the event loop thread.

graphflow's sync API (``invoke``, ``stream``, ...) runs each call on a private event loop
that nothing else shares. There a thread hop per database call costs more than it saves
(on this class of machine a hop costs as much as an fsync'd commit), so the sync wrappers
set ``inline_io`` and backends do their I/O directly. Under the async API, on the caller's
event loop, ``inline_io`` is false and backends run I/O in a worker thread so that the loop
never waits for the disk.
"""

from __future__ import annotations

from contextvars import ContextVar

inline_io: ContextVar[bool] = ContextVar("checkpoints_inline_io", default=False)
"""True while the current event loop is private to one graphflow sync call."""
