"""Checks of listing and counting threads: the listing (most recently updated first), its
pages in thread-id order and their cursor, the counts, and the arguments refused."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import cast, get_args

import anyio
import pytest

from checkpoints import Checkpointer, CommitBatch, ThreadInfo, ThreadUpdate
from checkpoints.lease import new_owner
from checkpoints.models import PauseId, ThreadId, ThreadStatus
from checkpoints.testing.support import T1, Factory

STATUSES: tuple[ThreadStatus, ...] = get_args(ThreadStatus)

IDS = [
    "b", "a", "ab", "B", "a b", "t-10", "t-9", "t-09", "é", "e", "z", "Z9", "日本", "ﬁ", "😀",
    "thread-2", "thread-10", "thread-1", "x" * 200, "", "0", "-", "~",
]  # fmt: skip
"""Thread ids whose code-point order is not their order of creation, nor their length's."""


async def _make_threads(
    cp: Checkpointer, owner: str, wanted: Iterable[tuple[str, ThreadStatus]]
) -> None:
    """Create each thread with its status (``owner`` keeps the leases)."""
    for tid, status in wanted:
        await cp.acquire_lease(ThreadId(tid), owner, 60.0, graph_name="g")
        await _set_status(cp, owner, tid, status)


async def _set_status(
    cp: Checkpointer, owner: str, tid: str, status: ThreadStatus, *, frozen: bool = False
) -> None:
    """Commit ``status``; a ``frozen`` thread takes only a commit that takes its lease
    expecting ``frozen`` (as ``unfreeze`` does)."""
    batch = CommitBatch(thread=ThreadUpdate(status))
    if frozen:
        batch.acquire_ttl, batch.expected_status = 60.0, "frozen"
    await cp.commit(ThreadId(tid), owner, batch)


async def _walk(cp: Checkpointer, status: ThreadStatus | None, limit: int) -> list[ThreadInfo]:
    """Every page of ``status`` in order, each at most ``limit`` long, concatenated."""
    seen: list[ThreadInfo] = []
    after: str | None = None
    while True:
        page = await cp.list_threads(status, limit=limit, after=after)
        assert len(page) <= limit
        seen += page
        if len(page) < limit:
            return seen
        after = page[-1].thread_id


# -- the listing ------------------------------------------------------------------------------


async def check_list_threads(make: Factory) -> None:
    """Threads by status, most recently updated first, with pending pause counts."""
    cp = make()
    assert await cp.list_threads() == []
    assert await cp.list_threads("paused") == []
    wanted = {
        ThreadId("a"): ("paused", 2),
        ThreadId("b"): ("done", 0),
        ThreadId("c"): ("paused", 1),
        ThreadId("d"): ("running", 0),
    }
    owner = new_owner()
    for tid, (status, n) in wanted.items():
        assert status in get_args(ThreadStatus)
        await cp.acquire_lease(tid, owner, 60.0, graph_name=f"graph-{tid}")
        ids = tuple(PauseId(f"{tid}-p{i}") for i in range(n))
        await cp.commit(
            tid, owner, CommitBatch(thread=ThreadUpdate(cast(ThreadStatus, status), ids))
        )
        await anyio.sleep(0.002)  # distinct updated_at
    infos = await cp.list_threads()
    assert [i.thread_id for i in infos] == ["d", "c", "b", "a"]  # most recently updated first
    paused = await cp.list_threads("paused")
    assert [(i.thread_id, i.pending_pauses) for i in paused] == [("c", 1), ("a", 2)]
    assert [i.thread_id for i in await cp.list_threads("done")] == ["b"]
    assert await cp.list_threads("failed") == []
    info = paused[0]
    rec = await cp.get_thread(ThreadId("c"))
    assert rec is not None
    assert (info.status, info.graph_name) == ("paused", "graph-c")
    assert info.updated_at == datetime.fromtimestamp(rec.updated_at, UTC)
    assert info.created_at == datetime.fromtimestamp(rec.created_at, UTC)

    # Answering "a" and moving it on changes its place and count.
    await cp.commit(ThreadId("a"), owner, CommitBatch(thread=ThreadUpdate("running")))
    assert [i.thread_id for i in await cp.list_threads("paused")] == ["c"]
    assert (await cp.list_threads())[0].thread_id == "a"


async def check_list_threads_refuses_an_unknown_status(make: Factory) -> None:
    """A status that is not a ``ThreadStatus`` is a ``ValueError`` naming it and the valid
    ones, never an empty list (a typo would otherwise look like "no such threads")."""
    cp = make()
    await cp.acquire_lease(T1, new_owner(), 60.0)
    for bad in ["Paused", "pending", "", 1, None.__class__]:
        with pytest.raises(ValueError, match="status") as err:
            await cp.list_threads(bad)  # type: ignore[arg-type]
        assert repr(bad) in str(err.value) and "'paused'" in str(err.value)
    assert [i.thread_id for i in await cp.list_threads("running")] == [T1]


# -- pages ------------------------------------------------------------------------------------


async def check_pages_concatenate_to_the_listing(make: Factory) -> None:
    """Pages of every size, of each status and of all, are the listing in thread-id order
    (code points), each thread once; ``after`` may be any id, a thread's or not."""
    cp = make()
    assert await cp.list_threads(limit=3) == []
    assert await cp.list_threads("paused", after="a") == []
    owner = new_owner()
    await _make_threads(cp, owner, ((t, STATUSES[i % 3]) for i, t in enumerate(IDS)))
    for status in (None, *STATUSES):
        listing = await cp.list_threads(status)
        in_order = sorted(listing, key=lambda i: i.thread_id)
        for limit in (1, 2, 5, len(IDS), 1000, 2**70):
            seen = await _walk(cp, status, limit)
            assert seen == in_order, (status, limit)
        assert await cp.list_threads(status, after=None, limit=None) == listing
        ids = [i.thread_id for i in in_order]
        for after in ("", "a", "a0", "thread-1", "\U0010ffff", *ids[:2]):
            rest = await cp.list_threads(status, after=after)
            assert [i.thread_id for i in rest] == [t for t in ids if t > after], (status, after)
    assert [i.thread_id for i in await cp.list_threads(limit=len(IDS))] == sorted(IDS)
    assert len({i.thread_id for i in await cp.list_threads()}) == len(IDS)


async def check_paging_while_threads_change(make: Factory) -> None:
    """Between pages, threads are added (ahead of the cursor and behind it) and others
    change status (one seen already goes away and comes back): every thread that existed
    all along (and, with a status, kept it) is seen exactly once, no thread twice, and of
    those added, the ones ahead of the cursor only."""
    for status in (None, "paused"):
        cp = make()
        owner = new_owner()
        start: list[tuple[str, ThreadStatus]] = [
            (f"t-{i:03d}", "paused" if i % 3 else "done") for i in range(40)
        ]
        await _make_threads(cp, owner, start)
        keep = {t for t, s in start if status is None or s == status}
        ahead: set[str] = set()
        behind: set[str] = set()
        seen: list[str] = []
        after: str | None = None
        for n in range(100):
            page = await cp.list_threads(status, limit=4, after=after)
            seen += [i.thread_id for i in page]
            if len(page) < 4:
                break
            after = page[-1].thread_id
            added = [f"a-{n:03d}", f"{after}+{n}", f"u-{n:03d}"]  # behind, ahead, ahead
            await _make_threads(cp, owner, ((t, "paused") for t in added))
            for t in added:
                (ahead if t > after else behind).add(t)
            # One seen already leaves the status and comes back (an order by update time
            # would show it again); one ahead leaves it (with a status, it is not awaited).
            await _set_status(cp, owner, page[0].thread_id, "running")
            await _set_status(cp, owner, page[0].thread_id, "paused")
            gone = f"t-{min(39, 3 * n + 14):03d}"
            if gone > after:
                await _set_status(cp, owner, gone, "done")
                await _set_status(cp, owner, gone, "failed")
                if status is not None:
                    keep.discard(gone)
        else:
            raise AssertionError(f"paging did not end: {len(seen)} threads seen")
        assert len(seen) == len(set(seen)), "a thread was seen twice"
        assert keep <= set(seen), sorted(keep - set(seen))
        assert not behind & set(seen), sorted(behind & set(seen))
        assert ahead <= set(seen), sorted(ahead - set(seen))


# -- counts -----------------------------------------------------------------------------------


async def check_count_threads(make: Factory) -> None:
    """The count of each status, and of all, is the length of its listing, as threads are
    created and change status (and back)."""
    cp = make()

    async def counts_agree() -> None:
        for status in (None, *STATUSES):
            assert await cp.count_threads(status) == len(await cp.list_threads(status)), status

    assert await cp.count_threads() == 0
    await counts_agree()
    owner = new_owner()
    await _make_threads(cp, owner, ((f"t{i}", STATUSES[i % 4]) for i in range(14)))
    await counts_agree()
    assert await cp.count_threads() == 14 and await cp.count_threads("frozen") == 0
    assert await cp.count_threads("running") == 4
    moves: tuple[ThreadStatus, ...] = ("paused", "paused", "frozen", "cancelled", "done", "running")
    for was, status in zip(("running", *moves), moves, strict=False):
        await _set_status(cp, owner, "t0", status, frozen=was == "frozen")
        await counts_agree()
    await cp.acquire_lease(ThreadId("new"), owner, 60.0)  # a thread without a commit
    await counts_agree()
    assert await cp.count_threads() == 15


# -- bad arguments ----------------------------------------------------------------------------


async def check_listing_refuses_bad_arguments(make: Factory) -> None:
    """A ``limit`` that is not a positive int, an ``after`` that is not a cursor of the
    thread-id order (a thread's ``ThreadInfo`` instead of its id, say), and an unknown
    status to count are each a ``ValueError`` naming the argument and the value."""
    cp = make()
    await _make_threads(cp, new_owner(), [("a", "paused"), ("b", "done")])
    [info, _] = await cp.list_threads(limit=2)
    for bad in (0, -1, True, 1.5, "10"):
        for status in (None, "paused"):
            with pytest.raises(ValueError, match="limit") as err:
                await cp.list_threads(status, limit=bad)  # type: ignore[arg-type]
            assert repr(bad) in str(err.value)
    cursors: tuple[object, ...] = (3, b"a", info, "\udcff")
    for cursor in cursors:
        for limit in (None, 1):
            with pytest.raises(ValueError, match="after") as err:
                await cp.list_threads(limit=limit, after=cursor)  # type: ignore[arg-type]
            assert repr(cursor)[:20] in str(err.value)
    for bad_status in ["Paused", "", 1]:
        with pytest.raises(ValueError, match="status") as err:
            await cp.count_threads(bad_status)  # type: ignore[arg-type]
        assert repr(bad_status) in str(err.value)
    assert [i.thread_id for i in await cp.list_threads(limit=1, after="a")] == ["b"]
