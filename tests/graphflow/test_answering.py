"""Answering pauses through ``invoke`` and ``submit`` alike (``graphflow.engine.answers``)."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel

from checkpoints import Checkpointer, SerializationError, ThreadChangedError
from checkpoints.lease import new_owner
from checkpoints.models import ThreadId
from graphflow import (
    END,
    START,
    InvalidArgumentError,
    StateGraph,
    ThreadBusyError,
    ThreadPausedError,
    UnknownPauseError,
    interrupt,
)
from graphflow.agents import (
    Agent,
    AgentNode,
    MessagesState,
    ModelResponse,
    ScriptedModel,
    ToolCall,
    tool,
)
from graphflow.auth import Decision
from graphflow.reducers import append


def _agent_graph(store: Checkpointer, ran: list[str]) -> Any:
    @tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "deleted"

    model = ScriptedModel(
        [
            ModelResponse(
                tool_calls=[ToolCall(id="call_1", name="delete_file", args={"path": "/a"})]
            ),
            ModelResponse(text="done"),
        ]
    )
    agent = Agent(name="files", model=model, tools=[delete_file], require_confirmation=True)
    b = StateGraph(MessagesState).add_node(AgentNode(agent))
    b.add_edge(START, "files").add_edge("files", END)
    g = b.compile(checkpointer=store)
    g.invoke({"messages": [{"role": "user", "content": "rm /a"}]}, thread_id="t")
    return g


def test_submit_with_a_bare_resume_never_approves_a_tool_call(store: Checkpointer) -> None:
    ran: list[str] = []
    g = _agent_graph(store, ran)
    with pytest.raises(InvalidArgumentError, match="decisions="):
        g.submit("t", resume="approve")
    assert g.invoke(None, thread_id="t").status == "paused" and ran == []
    assert g.list_decisions("t") == []


def test_ignored_decisions_are_reported_by_the_run_and_recorded(store: Checkpointer) -> None:
    ran: list[str] = []
    g = _agent_graph(store, ran)
    res = g.invoke(None, thread_id="t", decisions={"call_9": "approve", "delete_file": "deny"})
    assert res.status == "paused" and ran == []
    assert [(d.call_id, d.applied) for d in res.ignored_decisions] == [
        ("call_9", False),
        ("delete_file", False),
    ]
    assert all(d.note for d in res.ignored_decisions)
    assert [d.call_id for d in g.list_decisions("t")] == ["call_9", "delete_file"]
    bad_fp = Decision.approve(fingerprint="sha256:" + "1" * 64)
    (ignored,) = g.submit("t", decisions={"call_1": bad_fp})
    assert ignored.note is not None and ignored.note.startswith("fingerprint")
    done = g.invoke(None, thread_id="t", decisions={"call_1": "approve"})
    assert done.status == "done" and done.ignored_decisions == () and ran == ["/a"]


def test_list_decisions_async_and_of_an_unknown_thread(store: Checkpointer) -> None:
    g = _agent_graph(store, [])
    g.submit("t", decisions={"call_1": "deny"}, by="bob")

    async def go() -> Any:
        return await g.alist_decisions("t")

    assert [(d.by, d.verdict) for d in anyio.run(go)] == [("bob", "deny")]
    from graphflow import ThreadNotFoundError

    with pytest.raises(ThreadNotFoundError):
        g.list_decisions("nope")


def test_conflicting_decisions_say_which_took_effect(store: Checkpointer) -> None:
    ran: list[str] = []
    g = _agent_graph(store, ran)
    g.submit("t", decisions={"call_1": "approve"}, by="alice")
    g.submit("t", decisions={"call_1": "deny"}, by="bob")
    assert g.invoke(None, thread_id="t").status == "done" and ran == []  # bob's deny won
    recs = g.list_decisions("t")
    assert [(r.by, r.verdict, r.applied) for r in recs] == [
        ("alice", "approve", False),
        ("bob", "deny", True),
    ]
    assert recs[0].note == "superseded by the deny of bob"
    trail = [e for e in g.audit("t") if e.stage == "decision"]  # (the trail says the same)
    assert [(e.actor, e.applied) for e in trail] == [("alice", False), ("bob", True)]
    assert trail[0].detail == "superseded by the deny of bob"


class Log(BaseModel):
    log: Annotated[list[str], append] = []


def _ask_graph(store: Checkpointer, effects: list[str]) -> Any:
    def ask(state: Log) -> dict[str, Any]:
        effects.append("before")
        answer = interrupt("ok?")
        effects.append(f"after {answer!r}")
        return {"log": [str(answer)]}

    b = StateGraph(Log).add_node("ask", ask).add_edge(START, "ask").add_edge("ask", END)
    return b.compile(checkpointer=store)


def test_an_unstorable_answer_is_refused_before_the_node_runs_again(store: Checkpointer) -> None:
    effects: list[str] = []
    g = _ask_graph(store, effects)
    g.invoke({}, thread_id="q")
    with pytest.raises(SerializationError, match="answer to pause"):
        g.invoke(None, thread_id="q", resume=threading.Lock())
    with pytest.raises(SerializationError):
        g.submit("q", resume=threading.Lock())
    assert effects == ["before"]  # the node did not run with the answer
    assert g.get_state("q").next == ("ask",)
    assert g.invoke(None, thread_id="q", resume="yes").state.log == ["yes"]


def test_a_resume_mapping_keyed_by_node_name_is_refused(store: Checkpointer) -> None:
    effects: list[str] = []
    g = _ask_graph(store, effects)
    pause = g.invoke({}, thread_id="q").pauses[0]
    with pytest.raises(UnknownPauseError) as err:
        g.invoke(None, thread_id="q", resume={"ask": "yes"})
    assert pause.id in str(err.value)
    assert effects == ["before"]
    res = g.invoke(None, thread_id="q", resume={"answer": "yes"})  # a plain dict answer
    assert res.state.log == ["{'answer': 'yes'}"]


@pytest.mark.parametrize("bad", ["approve", ["approve"], {"call_1": "maybe"}])
def test_decisions_of_the_wrong_shape_fail_before_anything_runs(
    store: Checkpointer, bad: Any
) -> None:
    ran: list[str] = []
    g = _agent_graph(store, ran)
    with pytest.raises(InvalidArgumentError):
        g.invoke(None, thread_id="t", decisions=bad)
    with pytest.raises(InvalidArgumentError):
        g.submit("t", decisions=bad)
    assert g.list_decisions("t") == [] and ran == []


def test_a_decision_the_store_refuses_is_marked_not_taken_in_the_trail(tmp_path: Any) -> None:
    import sqlite3

    from checkpoints import SqliteCheckpointer, StoreLockedError

    store = SqliteCheckpointer(tmp_path / "x.db", busy_timeout=0.05)
    ran: list[str] = []
    g = _agent_graph(store, ran)
    holder = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer (a backup, the sqlite3 shell)
    with pytest.raises(StoreLockedError):
        g.submit("t", decisions={"call_1": "approve"}, by="alice")
    holder.execute("ROLLBACK")
    decisions = [e for e in g.audit("t") if e.stage == "decision"]
    assert [(e.actor, e.applied) for e in decisions] == [("alice", False), ("alice", False)]
    assert "not recorded" in (decisions[1].detail or "") and g.list_decisions("t") == []
    g.submit("t", decisions={"call_1": "approve"}, by="alice")  # the retry: its own event
    assert g.invoke(None, thread_id="t").status == "done" and ran == ["/a"]
    decisions = [e for e in g.audit("t") if e.stage == "decision"]
    assert [e.applied for e in decisions] == [False, False, True]  # (as they took effect)
    assert (decisions[0].detail or "").startswith("not recorded")
    holder.close()
    anyio.run(store.close)


def test_a_submitted_answer_shows_in_pending_pauses_as_in_get_state(store: Checkpointer) -> None:
    effects: list[str] = []
    g = _ask_graph(store, effects)
    g.invoke({}, thread_id="q")
    (before,) = g.pending_pauses("q")
    assert not before.answered
    g.submit("q", resume="yes", by="carol")
    (pending,) = g.pending_pauses("q")  # (stored; the next run applies it)
    (shown,) = g.get_state("q").tasks[0].pauses
    assert pending.answered and (pending.answer, pending.answered_by) == ("yes", "carol")
    assert pending == shown and pending.answered_at is not None
    assert g.invoke(None, thread_id="q").state.log == ["yes"] and g.pending_pauses("q") == []


def test_an_interrupt_answer_the_store_refuses_is_marked_not_taken(tmp_path: Any) -> None:
    import sqlite3

    from checkpoints import SqliteCheckpointer, StoreLockedError

    store = SqliteCheckpointer(tmp_path / "x.db", busy_timeout=0.05)
    effects: list[str] = []
    g = _ask_graph(store, effects)
    g.invoke({}, thread_id="q")
    holder = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(StoreLockedError):
        g.submit("q", resume="yes", by="carol")
    holder.execute("ROLLBACK")
    holder.close()
    answers = [e for e in g.audit("q") if e.stage == "resume"]
    assert [(e.actor, e.applied) for e in answers] == [("carol", False), ("carol", False)]
    assert all((e.detail or "").startswith("not recorded") for e in answers)
    assert not g.pending_pauses("q")[0].answered
    g.submit("q", resume="yes", by="carol")  # the retry: its own event
    assert g.invoke(None, thread_id="q").state.log == ["yes"]
    assert [e.applied for e in g.audit("q") if e.stage == "resume"] == [False, False, True]
    anyio.run(store.close)


def test_two_answers_to_one_interrupt_are_in_the_trail_and_the_latest_wins(
    store: Checkpointer,
) -> None:
    effects: list[str] = []
    g = _ask_graph(store, effects)
    g.invoke({}, thread_id="q")
    g.submit("q", resume="publish", by="alice")
    g.submit("q", resume="reject", by="mallory")
    assert g.invoke(None, thread_id="q").state.log == ["reject"]
    answers = [e for e in g.audit("q") if e.stage == "resume"]
    assert [(e.actor, e.applied) for e in answers] == [("alice", False), ("mallory", True)]
    assert answers[0].detail == "superseded by the answer of mallory"
    # Each answer's event carries its record's time: the audit matches them by it.
    from datetime import UTC, datetime

    from checkpoints.models import ThreadId
    from graphflow.evidence.events import rfc3339

    (latest,) = anyio.run(store.load_answers, ThreadId("q")).values()
    assert g.evidence is not None
    exts = [e.event["extensions"]["graphflow"] for e in g.evidence.events("q")]
    stamps = [x.get("answered_at") for x in exts if x.get("stage") == "interrupt_resumed"]
    assert stamps[-1] == rfc3339(datetime.fromtimestamp(latest.created_at, UTC)) != stamps[0]


def test_an_answer_while_a_run_holds_the_thread_is_refused(store: Checkpointer) -> None:
    """A run holds the thread (it may be running the approved call): a decision or answer
    given now could not take effect, so it is refused, not recorded as applied."""
    from checkpoints.lease import new_owner
    from checkpoints.models import ThreadId
    from graphflow import ThreadBusyError

    ran: list[str] = []
    g = _agent_graph(store, ran)
    owner = new_owner()  # (this process: a live owner)
    anyio.run(store.acquire_lease, ThreadId("t"), owner, 60.0)
    with pytest.raises(ThreadBusyError, match="being run"):
        g.submit("t", decisions={"call_1": "deny"}, by="bob")
    assert g.list_decisions("t") == []
    assert not [e for e in g.audit("t") if e.stage == "decision"]
    anyio.run(store.release_lease, ThreadId("t"), owner)
    g.submit("t", decisions={"call_1": "approve"}, by="alice")
    assert g.invoke(None, thread_id="t").status == "done" and ran == ["/a"]


# -- answering while a run takes the thread -------------------------------------------------
# An outside tester found that a deny submitted while another process resumed the thread with
# an earlier approval was accepted, recorded as the latest decision (so the trail said "denied,
# the approval superseded"), while the run dispatched the approved call. The interleaving is
# made here deterministically: the store's ``get_pauses``, which submit calls between reading
# the thread and writing the answer, first lets "another process" act on the thread.

T = ThreadId("t")


def between_read_and_write(
    store: Checkpointer, monkeypatch: pytest.MonkeyPatch, act: Callable[[], Awaitable[None]]
) -> list[int]:
    """Run ``act`` once, inside submit's next ``get_pauses`` (after its read of the thread,
    before its write); returns a list counting the calls of ``get_pauses``."""
    calls: list[int] = []
    original = store.get_pauses

    async def get_pauses(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            await act()
        return await original(*args, **kwargs)

    monkeypatch.setattr(store, "get_pauses", get_pauses)
    return calls


def test_a_deny_while_a_run_takes_the_thread_is_refused_not_recorded(
    store: Checkpointer, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    g = _agent_graph(store, ran)
    g.submit("t", decisions={"call_1": Decision.approve(by="alice")})
    runner = new_owner()

    async def a_run_resumes_it() -> None:  # (as another process's resume_thread would)
        await store.acquire_lease(T, runner, 60.0)

    between_read_and_write(store, monkeypatch, a_run_resumes_it)
    with pytest.raises(ThreadBusyError):
        g.submit("t", decisions={"call_1": Decision.deny(reason="no", by="bob")})
    records = g.list_decisions("t")
    assert [(d.verdict, d.by, d.applied) for d in records] == [("approve", "alice", True)]
    bobs = [e for e in g.audit("t") if e.stage == "decision" and e.actor == "bob"]
    assert [e.applied for e in bobs] == [False, False]  # its event, then "not recorded"
    assert "not recorded" in (bobs[1].detail or "")
    anyio.run(store.release_lease, T, runner)
    assert g.invoke(None, thread_id="t").status == "done" and ran == ["/a"]


def test_a_submit_whose_pauses_went_meanwhile_records_nothing(
    store: Checkpointer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run came and went between submit's read and its write: the pauses submit answered
    are gone, so nothing is recorded (its answers are never given to pauses that came
    after, which its caller never saw): ``ThreadChangedError``."""
    ran: list[str] = []
    g = _agent_graph(store, ran)

    async def a_run_comes_and_goes() -> None:  # approved and run to the end, lease released
        await g.ainvoke(None, thread_id="t", decisions={"call_1": Decision.approve(by="al")})

    calls = between_read_and_write(store, monkeypatch, a_run_comes_and_goes)
    with pytest.raises(ThreadChangedError, match="read its pauses again"):
        g.submit("t", decisions={"call_1": Decision.deny(reason="no", by="bob")})
    assert calls  # (the run happened inside submit's first try)
    assert ran == ["/a"] and g.get_state("t").values.messages[-1].content == "done"
    assert [(d.verdict, d.by) for d in g.list_decisions("t")] == [("approve", "al")]
    bobs = [e for e in g.audit("t") if e.stage == "decision" and e.actor == "bob"]
    assert [e.applied for e in bobs] == [False, False]


def test_a_submit_whose_thread_changed_but_waits_on_the_same_pauses_tries_again(
    store: Checkpointer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Frozen and unfrozen between submit's read and its write: the thread changed, and it
    waits on the pauses submit answered, so the next try records the answer."""
    ran: list[str] = []
    g = _agent_graph(store, ran)

    async def frozen_and_unfrozen() -> None:
        await g.afreeze("t", by="secops", reason="incident")
        await g.aunfreeze("t", by="secops", reason="cleared")

    calls = between_read_and_write(store, monkeypatch, frozen_and_unfrozen)
    assert g.submit("t", decisions={"call_1": Decision.approve(by="alice")}) == ()
    assert calls
    alices = [e for e in g.audit("t") if e.stage == "decision" and e.actor == "alice"]
    assert [e.applied for e in alices] == [False, False, True]  # a try not recorded, then one
    records = g.list_decisions("t")
    assert [(d.verdict, d.by, d.applied) for d in records] == [("approve", "alice", True)]
    assert g.invoke(None, thread_id="t").status == "done" and ran == ["/a"]


def test_a_new_input_while_a_run_resumes_the_paused_thread_is_busy_not_paused(
    store: Checkpointer,
) -> None:
    """A run resuming a paused thread (running the approved call, say) leaves it ``paused``
    until its first commit: a new input meanwhile is refused as busy (the run holds it),
    not told to answer the pauses the run is applying."""
    ran: list[str] = []
    g = _agent_graph(store, ran)
    runner = new_owner()
    anyio.run(store.acquire_lease, T, runner, 60.0)  # (as another process's resume does)
    with pytest.raises(ThreadBusyError):
        g.invoke({"messages": [{"role": "user", "content": "and /b"}]}, thread_id="t")
    anyio.run(store.release_lease, T, runner)
    with pytest.raises(ThreadPausedError):  # free again: the pauses wait for answers
        g.invoke({"messages": [{"role": "user", "content": "and /b"}]}, thread_id="t")


def test_an_answer_stored_with_an_approver_id_taken_before_is_still_applied(
    store: Checkpointer,
) -> None:
    """Approver ids are checked as they are given: an approval stored by an earlier version,
    whose id holds a newline, still lets the thread resume (it failed every resume)."""
    from checkpoints.models import AnswerRecord

    ran: list[str] = []
    g = _agent_graph(store, ran)
    (p,) = g.pending_pauses("t")
    value = {"verdict": "approve", "fingerprint": p.request.fingerprint, "by": "ops\nteam",
             "reason": None, "expires_at": None, "roles": []}  # fmt: skip
    anyio.run(store.record_answers, T, [], [AnswerRecord(p.id, T, value, "ops\nteam", None)])
    assert g.invoke(None, thread_id="t").status == "done" and ran == ["/a"]
