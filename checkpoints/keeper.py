"""Keeping the leases of this process's runs alive, from one thread.

A run holds its thread's lease for as long as it executes; the lease expires ``ttl``
seconds after its last renewal. Renewals come from a thread of their own, not from a task of
the run: a sync node runs on the event loop's thread (graphflow's sync API calls it inline),
and a task on that loop could not renew while the node works, however long it takes. A run
that ends before a third of its TTL has passed (most do) costs a dictionary insert and delete.

The keeper calls ``store.renew_lease`` on an event loop of its own, so a checkpointer must
accept calls from another thread (ours do: the SQLite store serializes them on its connection
lock, the memory store runs each method under its own lock).
A checkpointer that opens files starts the keeper's thread as it opens them (``start``), so
that the thread gets going while the process waits for the disk, not while it computes. It
imports asyncio when a first lease is due (logging when a renewal fails): a process that
only reads a store, such as ``graphflow threads``, imports neither.
"""

from __future__ import annotations

import _thread
import itertools
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from checkpoints.blocking import inline_io
from checkpoints.errors import LeaseLostError
from checkpoints.models import ThreadId

if TYPE_CHECKING:
    import asyncio  # noqa: TID251 - the keeper thread's private loop

    from checkpoints import Checkpointer


@dataclass(slots=True)
class _Lease:
    store: Checkpointer
    thread_id: str
    owner: str
    ttl: float
    due: float  # monotonic time of the next renewal


class LeaseKeeper:
    """Renews registered leases every third of their TTL until they are dropped."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._leases: dict[int, _Lease] = {}
        self._ids = itertools.count()
        self._started = False
        self._wake_at = float("inf")  # when the keeper thread next looks (at most 1 s ahead)

    def hold(self, store: Checkpointer, thread_id: str, owner: str, ttl: float) -> int:
        """Keep ``owner``'s lease on ``thread_id`` alive; return a key for ``drop``."""
        due = time.monotonic() + ttl / 3
        self.start()
        with self._cond:
            key = next(self._ids)
            self._leases[key] = _Lease(store, thread_id, owner, ttl, due)
            if due < self._wake_at:
                self._cond.notify()
        return key

    def start(self) -> None:
        """Start the keeper's thread if it is not running yet.

        Called as a store opens its files and as a run starts: the new thread then gets
        going while the process waits for the disk, not while it computes. A bare thread:
        ``threading.Thread.start()`` waits until the thread runs (~0.2 ms of a resumed
        run); it dies with the process, like a daemon thread.
        """
        if not self._started:
            with self._cond:
                if not self._started:
                    _thread.start_new_thread(self._main, ())
                    self._started = True

    def drop(self, key: int) -> None:
        """Stop renewing (the run ended; its last commit or ``release_lease`` freed it)."""
        with self._cond:
            self._leases.pop(key, None)

    def held(self) -> int:
        """How many leases are being kept (for tests)."""
        with self._cond:
            return len(self._leases)

    def _main(self) -> None:
        inline_io.set(True)  # this thread's loop is private: stores may block it
        loop: asyncio.AbstractEventLoop | None = None  # made when a first lease is due
        while True:
            with self._cond:
                now = time.monotonic()
                due = [(k, x) for k, x in self._leases.items() if x.due <= now]
                if not due:
                    # Look at least every second: a lease due later (a TTL of 3 s or more,
                    # the usual) is then added without waking this thread.
                    self._wake_at = min((x.due for x in self._leases.values()), default=now + 1)
                    self._wake_at = min(self._wake_at, now + 1)
                    self._cond.wait(self._wake_at - now)
                    continue
                for _, x in due:
                    x.due = now + x.ttl / 3
            if loop is None:
                import asyncio  # noqa: TID251 - a private loop (stores' methods are async)

                loop = asyncio.new_event_loop()
            for key, x in due:
                try:
                    loop.run_until_complete(
                        x.store.renew_lease(ThreadId(x.thread_id), x.owner, x.ttl)
                    )
                except LeaseLostError:
                    self.drop(key)  # released or taken over: the run's next commit says so
                except Exception:  # a busy or broken store: try again at the next due time
                    import logging

                    logging.getLogger("checkpoints.leases").warning(
                        "renewing thread %r's lease failed", x.thread_id, exc_info=True
                    )


_KEEPER = [LeaseKeeper()]


def keeper() -> LeaseKeeper:
    """This process's keeper (a forked child gets a new one)."""
    return _KEEPER[0]


def _forget_in_child() -> None:
    # The parent's keeper thread does not exist in a forked child, and its lock may have been
    # held at the fork: start afresh.
    _KEEPER[0] = LeaseKeeper()


os.register_at_fork(after_in_child=_forget_in_child)
