"""Holding a thread's lease for the length of an operation: one async context manager.

A run (or ``update_state``, ``cancel``) takes the lease in its first transaction; while it
works, the process's lease keeper renews it every third of its TTL; when it ends, its last
commit has given the lease up, or, after an error, the lease is released here (shielded from
cancellation). A released lease is free at once; a crash leaves it to expire, or to be taken
over as soon as its owner is known dead (DESIGN.md promise 3).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio

from checkpoints.base import Checkpointer
from checkpoints.keeper import keeper
from checkpoints.models import ThreadId


@asynccontextmanager
async def held(
    store: Checkpointer,
    thread_id: ThreadId,
    owner: str,
    ttl: float,
    released: Callable[[], bool] = lambda: False,
) -> AsyncIterator[None]:
    """Keep ``owner``'s lease of ``thread_id`` renewed inside the block; release it at the
    end unless ``released()`` says a commit gave it up (a release of a lease this owner
    does not hold, or never took, changes nothing)."""
    key = keeper().hold(store, thread_id, owner, ttl)
    try:
        yield
    finally:
        keeper().drop(key)
        if not released():
            with anyio.CancelScope(shield=True):
                await store.release_lease(thread_id, owner)
