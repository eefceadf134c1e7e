"""Checks of the append-only records: pauses, answers, decisions, tool dispatches."""

from __future__ import annotations

import dataclasses

import pytest

from checkpoints import (
    AnswerRecord,
    CommitBatch,
    CorruptCheckpointError,
    DecisionRecord,
    DispatchRecord,
    PauseRecord,
    SerializationError,
    ThreadUpdate,
)
from checkpoints.models import (
    CallId,
    PauseId,
    TaskId,
    new_checkpoint_id,
)
from checkpoints.testing.support import (
    T1,
    T2,
    Factory,
    assert_rich,
    leased,
    rich_value,
)

# -- pauses and answers -----------------------------------------------------------------------


async def check_pauses_and_answers(make: Factory) -> None:
    """Pauses by id and oldest first; the latest answer per pause wins."""
    cp, owner = await leased(make)
    cid = new_checkpoint_id()
    p1 = PauseRecord(
        PauseId("p1"), T1, "", cid, TaskId("t1"), "ask", "interrupt", rich_value(), 1.0
    )
    p2 = PauseRecord(
        PauseId("p2"), T1, "review:t9", cid, TaskId("t2"), "review.agent", "tool_confirmation",
        {"call": "c1"}, 2.0,
    )  # fmt: skip
    await cp.commit(
        T1, owner, CommitBatch(pauses=[p2, p1], thread=ThreadUpdate("paused", (p1.id, p2.id)))
    )
    assert await cp.list_pauses(T1) == [p1, p2]  # oldest first
    got = await cp.get_pauses(T1, [PauseId("p2"), PauseId("nope"), PauseId("p1")])
    assert got == [p2, p1]
    assert_rich(got[1].value)
    assert await cp.get_pauses(T1, []) == []
    assert await cp.get_pauses(T2, [PauseId("p1")]) == []
    assert await cp.list_pauses(T2) == []

    assert await cp.load_answers(T1) == {}
    a1 = AnswerRecord(PauseId("p1"), T1, "no", by="ann", reason="first look", created_at=3.0)
    a2 = AnswerRecord(PauseId("p2"), T1, {"approve": True}, created_at=4.0)
    a3 = AnswerRecord(PauseId("p1"), T1, rich_value(), by="bob", created_at=5.0)
    await cp.put_answers([a1, a2])
    await cp.put_answers([])
    await cp.commit(T1, owner, CommitBatch(answers=[a3]))  # answers can come with a commit
    latest = await cp.load_answers(T1)
    assert latest == {"p1": a3, "p2": a2}  # the latest answer per pause wins
    assert_rich(latest[PauseId("p1")].value)
    assert await cp.load_answers(T1, [PauseId("p2")]) == {"p2": a2}
    assert await cp.load_answers(T1, [PauseId("nope")]) == {}
    assert await cp.load_answers(T2) == {}
    other = AnswerRecord(PauseId("p1"), T2, "elsewhere")
    await cp.put_answers([other])  # no lease needed
    assert await cp.load_answers(T2) == {"p1": other}
    assert (await cp.load_answers(T1))[PauseId("p1")] == a3

    with pytest.raises(SerializationError) as err:
        await cp.put_answers([AnswerRecord(PauseId("p2"), T1, "fine"),
                              AnswerRecord(PauseId("p2"), T1, object())])  # fmt: skip
    assert err.value.key == "answer to 'p2'"
    assert await cp.load_answers(T1) == {"p1": a3, "p2": a2}  # none of them was stored


# -- decisions and dispatch ---------------------------------------------------------------------


async def check_decisions_append_only(make: Factory) -> None:
    """Decisions are appended and listed oldest first, per thread or call."""
    cp = make()
    assert await cp.list_decisions(T1) == []
    d1 = DecisionRecord(T1, CallId("c1"), "deny", "fp1", by="ann", reason="no", created_at=1.0)
    d2 = DecisionRecord(T1, CallId("c2"), "approve", created_at=2.0)
    d3 = DecisionRecord(
        T1, CallId("c1"), "approve", "fp2", by="bob", applied=False, note="fingerprint mismatch",
        created_at=3.0,
    )  # fmt: skip
    await cp.put_decisions([d1, d2])
    await cp.put_decisions([])
    await cp.put_decisions([d3, DecisionRecord(T2, CallId("c1"), "approve")])
    assert await cp.list_decisions(T1) == [d1, d2, d3]
    assert await cp.list_decisions(T1, CallId("c1")) == [d1, d3]
    assert await cp.list_decisions(T1, CallId("nope")) == []
    assert [d.thread_id for d in await cp.list_decisions(T2)] == [T2]
    assert (await cp.list_decisions(T1))[2].applied is False
    assert (await cp.list_decisions(T1))[0].pause_id is None
    assert (await cp.list_decisions(T1))[0].extra == {}


async def check_decision_pause_id_and_extra(make: Factory) -> None:
    """A decision's ``pause_id`` and ``extra`` round-trip (``extra`` as a copy, values of
    any storable type); an unstorable ``extra`` value is refused, naming it, and nothing of
    the batch is stored."""
    cp = make()
    extra = {"principal": {"id": "ann", "roles": ("admin",)}, "digest": "sha256:ab",
             "rich": rich_value()}  # fmt: skip
    d1 = DecisionRecord(
        T1, CallId("c1"), "approve", "fp", by="ann", created_at=1.0, pause_id=PauseId("p1"),
        extra=extra,
    )  # fmt: skip
    d2 = DecisionRecord(T1, CallId("c2"), "deny", reason="no", created_at=2.0)
    await cp.put_decisions([d1, d2])
    extra["digest"] = "changed after put"
    got = await cp.list_decisions(T1)
    assert [d.pause_id for d in got] == ["p1", None]
    assert got[0].extra["digest"] == "sha256:ab" and got[1].extra == {}
    assert type(got[0].extra["principal"]["roles"]) is tuple
    assert_rich(got[0].extra["rich"])
    assert got[0] == dataclasses.replace(d1, extra={**extra, "digest": "sha256:ab"})
    got[0].extra["digest"] = "changed after read"
    assert (await cp.list_decisions(T1, CallId("c1")))[0].extra["digest"] == "sha256:ab"
    bad = DecisionRecord(T1, CallId("c3"), "approve", extra={"when": object()})
    with pytest.raises(SerializationError) as err:
        await cp.put_decisions([DecisionRecord(T1, CallId("c4"), "approve"), bad])
    assert err.value.key == "extra of decision 'c3'" and err.value.type_name == "object"
    assert [d.call_id for d in await cp.list_decisions(T1)] == ["c1", "c2"]


async def check_dispatch_claim_once(make: Factory) -> None:
    """A tool call is claimed once; its outcome is recorded after the claim."""
    cp = make()
    assert await cp.get_dispatch(T1, CallId("c1")) is None
    claim = DispatchRecord(T1, CallId("c1"), "send_email", "fp", "worker-a", claimed_at=1.0)
    assert await cp.claim_dispatch(claim) is True
    assert await cp.claim_dispatch(dataclasses.replace(claim, owner="worker-b")) is False
    assert await cp.claim_dispatch(dataclasses.replace(claim, thread_id=T2)) is True
    assert await cp.get_dispatch(T1, CallId("c1")) == claim

    with pytest.raises(CorruptCheckpointError):
        await cp.complete_dispatch(T1, CallId("never"), status="succeeded")
    with pytest.raises(ValueError):
        await cp.complete_dispatch(T1, CallId("c1"), status="exploded")
    with pytest.raises(SerializationError):
        await cp.complete_dispatch(T1, CallId("c1"), status="succeeded", result=object())
    assert await cp.get_dispatch(T1, CallId("c1")) == claim  # failed calls changed nothing

    await cp.complete_dispatch(T1, CallId("c1"), status="succeeded", result=rich_value())
    done = await cp.get_dispatch(T1, CallId("c1"))
    assert done is not None
    assert (done.status, done.owner, done.tool, done.fingerprint) == (
        "succeeded", "worker-a", "send_email", "fp"
    )  # fmt: skip
    assert done.claimed_at == 1.0 and done.completed_at is not None and done.error is None
    assert_rich(done.result)
    assert await cp.claim_dispatch(claim) is False  # still claimed after completion

    await cp.complete_dispatch(T2, CallId("c1"), status="failed", error="timeout")
    failed = await cp.get_dispatch(T2, CallId("c1"))
    assert failed is not None
    assert (failed.status, failed.error, failed.result) == ("failed", "timeout", None)
