"""``engine.apply``: writes through reducers and the next checkpoint, tested on data."""

from __future__ import annotations

from typing import Annotated, TypedDict

from checkpoints.models import CheckpointId, CheckpointRecord, ThreadId
from graphflow.engine import apply, plan
from graphflow.reducers import append
from graphflow.state import StateSchema


class S(TypedDict, total=False):
    log: Annotated[list[str], append]
    n: int


SCHEMA = StateSchema(S)


def ck(**kw: object) -> CheckpointRecord:
    return CheckpointRecord(
        id=CheckpointId("c0"),
        thread_id=ThreadId("t"),
        ns="",
        parent_id=None,
        step=0,
        source="input",
        channel_versions=dict(kw),  # type: ignore[arg-type]
        frontier=(),
    )


def test_writes_apply_in_the_given_order_through_reducers() -> None:
    out = apply.apply_writes(
        SCHEMA,
        {"log": ["x"], "n": 1},
        {"log": 1, "n": 1},
        {},
        [("a", [("log", ["a"]), ("n", 2)]), ("b", [("log", "b"), ("n", 3)])],
        5,
    )
    assert out.values == {"log": ["x", "a", "b"], "n": 3}
    assert out.versions == {"log": 5, "n": 5}
    kinds = {w.channel: (w.kind, w.value) for w in out.writes}
    assert kinds == {"log": ("append", ["a", "b"]), "n": ("set", 3)}  # a list that grew: its items
    assert out.bases == {"log": (1, 1)}


def test_every_chunk_every_th_append_closes_its_chain_instead_of_rewriting_the_list() -> None:
    out = apply.apply_writes(
        SCHEMA,
        {"log": ["y"] * (apply.CHUNK_EVERY - 1)},
        {"log": 1},
        {"log": (1, apply.CHUNK_EVERY - 1)},
        [("a", [("log", "z")])],
        9,
    )
    [w] = out.writes
    assert (w.kind, w.value, w.base, w.count) == ("chunk", ["z"], 1, apply.CHUNK_EVERY - 1)
    assert out.bases == {"log": (9, 0)}  # the next appends chain from the chunk
    nxt = apply.apply_writes(
        SCHEMA, out.values, out.versions, out.bases, [("a", [("log", "w")])], 10
    )
    assert [(w.kind, w.value, w.base) for w in nxt.writes] == [("append", ["w"], 9)]
    assert nxt.bases == {"log": (9, 1)}


def test_an_unchanged_key_is_not_written() -> None:
    out = apply.apply_writes(
        SCHEMA, {"log": [], "n": 1}, {"log": 1, "n": 1}, {}, [("a", [("n", 2)])], 3
    )
    assert [w.channel for w in out.writes] == ["n"] and out.versions["log"] == 1


def test_next_checkpoint_routes_advances_joins_and_keeps_what_a_subgraph_wrote() -> None:
    start = ck(log=1, n=1)
    task_writes = [("a", [("log", ["a"]), ("n", 7)])]
    applied = apply.apply_writes(
        SCHEMA, {"log": [], "n": 1}, start.channel_versions, {}, task_writes, 4
    )
    nxt = apply.next_checkpoint(
        start,
        CheckpointId("c1"),
        applied,
        {},
        task_writes,
        ["b"],
        ((("a", "z"), "j"),),
        {"n": "count"},
        4,
    )
    rec = nxt.record
    assert (rec.id, rec.parent_id, rec.step, rec.source) == ("c1", "c0", 1, "loop")
    assert [t.node for t in rec.frontier] == ["b"]  # the join waits for z
    join = f"{plan.JOIN_PREFIX}0"
    assert nxt.hidden == {join: ["a"], plan.OUT_KEY: [["count", 7]]}
    assert {w.channel for w in nxt.writes} == {"log", "n", join, plan.OUT_KEY}
    assert rec.channel_versions[join] == rec.channel_versions[plan.OUT_KEY] == 4
    assert apply.user_values(applied) == {"log": ["a"], "n": 7}
