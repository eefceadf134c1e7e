"""Checks of listing threads (most recently updated first) and the statuses refused."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast, get_args

import anyio
import pytest

from checkpoints import CommitBatch, ThreadUpdate
from checkpoints.lease import new_owner
from checkpoints.models import PauseId, ThreadId, ThreadStatus
from checkpoints.testing.support import T1, Factory

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
