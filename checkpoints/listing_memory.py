"""Listing, paging and counting the threads of ``MemoryCheckpointer`` (see
``Checkpointer.list_threads``).

A mixin over the store's ``_threads`` (thread rows), with an index of its own: every thread
id, and those of each status, in sorted lists, which give a page (a slice from the cursor,
found by bisection) and a count (a length). The store moves a thread in them (``_index``)
wherever it makes a thread or changes one's status.
"""

from __future__ import annotations

import bisect

from checkpoints.base import check_listing
from checkpoints.models import ThreadInfo, ThreadRecord, ThreadStatus


class MemoryListing:
    """The listing methods of ``MemoryCheckpointer``."""

    _threads: dict[str, ThreadRecord]
    _ids: list[str]
    _by_status: dict[str, list[str]]

    async def list_threads(
        self,
        status: ThreadStatus | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
    ) -> list[ThreadInfo]:
        if (bad := check_listing(status, limit, after)) is not None:
            raise bad
        if limit is None and after is None:
            recs = [r for r in self._threads.values() if status is None or r.status == status]
            recs.sort(key=lambda r: (r.updated_at, r.thread_id), reverse=True)
            return [ThreadInfo.from_record(r) for r in recs]
        ids = self._ids if status is None else self._by_status.get(status, [])
        start = 0 if after is None else bisect.bisect_right(ids, after)
        end = len(ids) if limit is None else start + limit
        return [ThreadInfo.from_record(self._threads[t]) for t in ids[start:end]]

    async def count_threads(self, status: ThreadStatus | None = None) -> int:
        if (bad := check_listing(status)) is not None:
            raise bad
        return len(self._ids if status is None else self._by_status.get(status, ()))

    def _index(self, thread_id: str, old: str | None, new: str) -> None:
        """Move a thread in the sorted id lists from status ``old`` (None: a new thread)
        to ``new``."""
        if old == new:
            return
        if old is None:
            bisect.insort(self._ids, thread_id)
        else:
            ids = self._by_status[old]
            del ids[bisect.bisect_left(ids, thread_id)]
        bisect.insort(self._by_status.setdefault(new, []), thread_id)
