"""A large durable commit (a list channel's chunk) leaves the automatic checkpoint it would
start to the next commit (``Durability.commit``): the pages a checkpoint copies and the
chunk's own are then written by two steps, not one.

In WAL mode only a checkpoint writes the database file itself, so a commit that changed the
file ran one. The WAL's limit is made small (``PAGES``), so that every chunk's commit takes
the WAL past it. Nothing here is timed.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from checkpoints import CommitBatch, SqliteCheckpointer
from checkpoints.sqlite import durability
from graphflow import END, START, StateGraph

STEPS = 700
PAGES = 30  # (a chunk's commit writes more pages than this; a message's, a few)
TEXT = "x" * 1000  # (a chunk of 128 such messages: over LARGE_COMMIT_BYTES)


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]


class Watched(SqliteCheckpointer):
    """Records, for each commit, whether it wrote a chunk and whether it changed the file."""

    seen: list[tuple[bool, bool]]

    async def commit(self, thread_id: Any, owner: str, batch: CommitBatch) -> None:
        before = digest(self.path)
        await super().commit(thread_id, owner, batch)
        chunk = any(c.kind == "chunk" for c in batch.channels)
        self.seen.append((chunk, digest(self.path) != before))


def digest(path: str) -> bytes:
    return hashlib.sha256(Path(path).read_bytes()).digest()


def run(tmp_path: Path, steps: int = STEPS) -> list[tuple[bool, bool]]:
    b = StateGraph(Chat)
    b.add_node("chat", lambda s: {"messages": [f"{len(s['messages'])} {TEXT}"]})
    b.add_edge(START, "chat")
    b.add_conditional_edges("chat", lambda s: END if len(s["messages"]) >= steps else "chat")
    tmp_path.mkdir(exist_ok=True)
    store = Watched(tmp_path / "chat.db")
    store.seen = []
    graph = b.compile(checkpointer=store, evidence=False)
    out = graph.invoke({"messages": []}, thread_id="chat", recursion_limit=steps + 10)
    assert len(out.state["messages"]) == steps
    return store.seen


@pytest.fixture(autouse=True)
def small_wal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(durability, "AUTOCHECKPOINT_PAGES", PAGES)


def test_a_chunk_commit_never_checkpoints_and_the_next_commit_does(tmp_path: Path) -> None:
    seen = run(tmp_path)
    chunks = [i for i, (chunk, _) in enumerate(seen) if chunk]
    checkpointed = [i for i, (_, changed) in enumerate(seen) if changed]
    assert len(chunks) == STEPS // 128 and len(checkpointed) > STEPS // 10
    assert not set(chunks) & set(checkpointed)  # no chunk commit copied the WAL
    assert all(i + 1 in checkpointed for i in chunks)  # the next commit did


def test_large_commits_in_a_row_still_checkpoint_as_often(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every commit large: the WAL is still checkpointed as often, one commit later at
    most (never left to grow)."""
    usual = [i for i, (_, changed) in enumerate(run(tmp_path / "usual", steps=300)) if changed]
    monkeypatch.setattr(durability, "LARGE_COMMIT_BYTES", 1)
    seen = run(tmp_path / "large", steps=300)
    made = [i for i, (_, changed) in enumerate(seen) if changed]
    assert len(usual) > 30 and len(made) >= 0.8 * len(usual)
    assert (
        max(b - a for a, b in itertools.pairwise(made))
        <= max(b - a for a, b in itertools.pairwise(usual)) + 1
    )
