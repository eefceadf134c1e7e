"""``graph.freeze`` / ``graph.unfreeze``: a frozen thread runs nothing and takes no
decision, and unfreezing gives it back exactly as it was, its pending step included. A
thread a run holds is frozen at once: that run dispatches nothing more and ends frozen."""

from __future__ import annotations

import contextlib
import operator
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import anyio
import anyio.to_thread
import pytest

from checkpoints import (
    Checkpointer,
    CommitBatch,
    MemoryCheckpointer,
    SerializationError,
    SqliteCheckpointer,
)
from checkpoints.models import CallId, ThreadId
from graphflow import (
    END,
    START,
    InvalidArgumentError,
    NodeContext,
    StateGraph,
    ThreadFinishedError,
    ThreadFrozenError,
    ThreadNotFoundError,
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
from graphflow.compiled import CompiledGraph
from graphflow.evidence import EvidenceLog
from graphflow.worker import Worker


class S(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def fan(store: Checkpointer, calls: list[str]) -> Any:
    """``START -> (quick, review) -> END``: quick finishes in the step where review pauses."""

    def quick(s: S) -> S:
        calls.append("quick")
        return {"log": ["quick"]}

    def review(s: S) -> S:
        calls.append("review")
        return {"log": [f"review:{interrupt('ok?')}"]}

    b = StateGraph(S).add_node("quick", quick).add_node("review", review)
    b.add_edge(START, "quick").add_edge(START, "review")
    b.add_edge("quick", END).add_edge("review", END)
    return b.compile(checkpointer=store)


def status(g: Any) -> str:
    [info] = g.list_threads()
    return str(info.status)


def test_a_frozen_thread_runs_nothing_and_unfreezes_as_it_was(store: Checkpointer) -> None:
    calls: list[str] = []
    g = fan(store, calls)
    g.invoke({}, thread_id="t")
    assert sorted(calls) == ["quick", "review"]
    before = g.get_state("t")
    g.freeze("t", by="secops", reason="incident 42")
    assert status(g) == "frozen"
    with pytest.raises(ThreadFrozenError, match="'t'"):
        g.invoke(None, thread_id="t", resume="yes")
    with pytest.raises(ThreadFrozenError):
        g.submit("t", resume="yes")
    with pytest.raises(ThreadFrozenError):
        g.update_state("t", {"log": ["x"]})
    with pytest.raises(ThreadFrozenError):
        g.freeze("t", by="secops", reason="again")
    assert sorted(calls) == ["quick", "review"]  # nothing ran
    assert g.get_state("t").values == before.values  # reads still work
    g.unfreeze("t", by="secops", reason="resolved")
    assert status(g) == "paused"
    assert [p.value for p in g.pending_pauses("t")] == ["ok?"]
    res = g.invoke(None, thread_id="t", resume="yes")
    assert res.status == "done"
    # quick's write of the paused step was kept through freeze and unfreeze; it never reran
    assert sorted(res.state["log"]) == ["quick", "review:yes"]
    assert sorted(calls) == ["quick", "review", "review"]


def test_freeze_and_unfreeze_are_kept_in_the_history(store: Checkpointer) -> None:
    g = fan(store, [])
    g.invoke({}, thread_id="t")
    g.freeze("t", by="secops", reason="incident 42")
    g.unfreeze("t", by="lead", reason="resolved")
    metas = [h.metadata for h in g.get_state_history("t")]
    assert metas[0]["unfrozen"] == {"reason": "resolved", "by": "lead"}
    assert metas[1]["frozen"] == {"reason": "incident 42", "by": "secops", "previous": "paused"}
    # Each says what made it (not "update": no state was updated).
    assert [m["source"] for m in metas[:3]] == ["unfreeze", "freeze", "input"]
    g.cancel("t", reason="dropped", by="lead")
    newest = g.get_state_history("t", limit=1)[0]
    assert newest.metadata["source"] == "cancel" and newest.metadata["cancelled"]["by"] == "lead"


def test_a_freeze_and_an_unfreeze_by_no_one_name_the_same_actor(store: Checkpointer) -> None:
    """Neither names who acted: both are graphflow's own, a system principal (the freeze
    was recorded as 'graphflow', the unfreeze as 'system')."""
    g = fan(store, [])
    g.invoke({}, thread_id="t")
    g.freeze("t", reason="incident 42")
    g.unfreeze("t", reason="resolved")
    trail = [(e.stage, e.actor) for e in g.audit("t") if e.stage in ("freeze", "unfreeze")]
    assert trail == [("freeze", "graphflow"), ("unfreeze", "graphflow")]


def test_a_done_thread_unfreezes_done(store: Checkpointer) -> None:
    g = fan(store, [])
    g.invoke({}, thread_id="t")
    g.invoke(None, thread_id="t", resume="yes")
    g.freeze("t", by="secops", reason="audit")
    assert status(g) == "frozen"
    with pytest.raises(ThreadFinishedError):  # (frozen, it is done all the same)
        g.cancel("t", reason="late", by="secops")
    g.unfreeze("t", by="secops", reason="done auditing")
    assert status(g) == "done"


def test_bad_freeze_calls_are_refused(store: Checkpointer) -> None:
    g = fan(store, [])
    with pytest.raises(ThreadNotFoundError):
        g.freeze("nope", by="secops", reason="x")
    g.invoke({}, thread_id="t")
    with pytest.raises(InvalidArgumentError, match="not frozen"):
        g.unfreeze("t", by="secops", reason="x")


class Refusing(SqliteCheckpointer):
    """A store that refuses the commit that would mark the thread (a full disk, say)."""

    async def commit(self, thread_id: Any, owner: str, batch: CommitBatch) -> None:
        if batch.checkpoint is not None and batch.checkpoint.source in ("cancel", "freeze"):
            raise SerializationError("the disk is full (a refusal of this test)")
        await super().commit(thread_id, owner, batch)


def on_log(store: Checkpointer, log: EvidenceLog) -> Any:
    """``fan`` on ``store``, writing its evidence to ``log``."""
    g = fan(store, [])
    return CompiledGraph(g.spec, g.checkpointer, evidence=log)


def stages(log: EvidenceLog, thread: str) -> list[str]:
    return [str(r.event["extensions"]["graphflow"]["stage"]) for r in log.events(thread)]


@pytest.mark.parametrize("verb", ["cancel", "freeze"])
def test_a_mark_the_store_refuses_leaves_no_event(tmp_path: Path, verb: str) -> None:
    log = EvidenceLog(tmp_path / "x.evidence.db")
    graph = on_log(Refusing(tmp_path / "x.db"), log)
    assert graph.invoke({}, thread_id="t").status == "paused"
    before = stages(log, "t")
    with pytest.raises(SerializationError):
        getattr(graph, verb)("t", reason="incident", by="secops")
    assert stages(log, "t") == before  # no event of a change that did not happen
    assert status(graph) == "paused"


def test_a_freeze_while_the_log_is_read_only_is_written_when_audited(
    tmp_path: Path, read_only: Any
) -> None:
    log = EvidenceLog(tmp_path / "x.evidence.db")
    graph = on_log(SqliteCheckpointer(tmp_path / "x.db"), log)
    assert graph.invoke({}, thread_id="t").status == "paused"
    with read_only(tmp_path / "x.evidence.db"):
        graph.freeze("t", reason="incident", by="secops")  # never waits on the log
        assert status(graph) == "frozen" and "frozen" not in stages(log, "t")
    graph.audit("t")  # what the outbox kept is written now
    assert stages(log, "t")[-1] == "frozen" and log.verify().ok


@pytest.mark.parametrize("verb", ["freeze", "cancel"])
def test_events_the_outbox_kept_before_a_mark_are_written_with_its_own(
    tmp_path: Path, read_only: Any, verb: str
) -> None:
    log = EvidenceLog(tmp_path / "x.evidence.db")
    graph = on_log(SqliteCheckpointer(tmp_path / "x.db"), log)
    with read_only(tmp_path / "x.evidence.db"):  # the pause's event waits in the outbox
        assert graph.invoke({}, thread_id="t").status == "paused"
    before = stages(log, "t")
    getattr(graph, verb)("t", reason="incident", by="secops")
    graph.audit("t")  # (and anything still kept is written now)
    after = stages(log, "t")
    assert len(after) == len(before) + 2, (before, after)  # the pause's event, then the mark's
    assert after[-1] == ("frozen" if verb == "freeze" else "cancelled") and log.verify().ok


# -- a freeze while a run holds the thread (a runaway agent) ---------------------------------
TIMEOUT = 60.0  # seconds a wait may take; guards against hangs only, never asserted


@contextlib.contextmanager
def freezing(g: Any, started: threading.Event, frozen: threading.Event) -> Iterator[None]:
    """In another thread: once ``started`` is set (a run holds thread ``t``), freeze ``t``,
    then set ``frozen``. The block runs the run; the freeze must have succeeded after it."""
    errors: list[BaseException] = []

    def freeze() -> None:
        try:
            assert started.wait(TIMEOUT)
            g.freeze("t", by="secops", reason="runaway agent")
        except BaseException as e:
            errors.append(e)
        finally:
            frozen.set()

    other = threading.Thread(target=freeze)
    other.start()
    try:
        yield
    finally:
        started.set()  # (a run that failed before it started must not leave it waiting)
        other.join(TIMEOUT)
    assert errors == []


def lease_of(store: Checkpointer, thread_id: str = "t") -> str | None:
    th = anyio.run(store.get_thread, ThreadId(thread_id))
    assert th is not None
    return th.lease_owner


def agent_graph(store: Checkpointer, ran: list[str], started: Any, frozen: Any) -> Any:
    """An agent whose model proposes ``look`` then ``refund``; the freeze comes while
    ``look`` runs, so ``refund`` is the run's next tool call."""

    @tool(risk="low")
    def look(order: str) -> str:
        """Look an order up."""
        ran.append("look")
        started.set()
        assert frozen.wait(TIMEOUT)
        return f"found {order}"

    @tool(risk="low")
    def refund(order: str) -> str:
        """Refund an order."""
        ran.append("refund")
        return f"refunded {order}"

    calls = [ToolCall(id=f"call_{n}", name=n, args={"order": "A-1"}) for n in ("look", "refund")]
    model = ScriptedModel([ModelResponse(tool_calls=calls), "Refunded."])
    b = StateGraph(MessagesState).add_node(AgentNode(Agent("support", model, [look, refund])))
    b.add_edge(START, "support").add_edge("support", END)
    return b.compile(checkpointer=store)


ASK = {"messages": [{"role": "user", "content": "refund A-1"}]}


def test_a_running_agent_is_frozen_before_its_next_tool_call(store: Checkpointer) -> None:
    """A freeze while the agent's first call runs: the call in flight finishes (its outcome
    is kept), the next one is never dispatched (the trail says the freeze stopped it), and
    the run ends ``ThreadFrozenError``, leaving the thread frozen and its lease free. After
    the unfreeze, ``invoke(None)`` runs the step again: the first call's outcome is reused,
    the second runs, once each."""
    ran: list[str] = []
    started, frozen = threading.Event(), threading.Event()
    g = agent_graph(store, ran, started, frozen)
    with (
        freezing(g, started, frozen),
        pytest.raises(ThreadFrozenError, match="runaway agent") as stopped,
    ):
        g.invoke(ASK, thread_id="t")
    assert stopped.value.reason == "runaway agent"
    assert ran == ["look"]  # refund, proposed with it, never ran
    assert status(g) == "frozen"
    frozen_by = {"reason": "runaway agent", "by": "secops", "previous": "running"}
    assert g.get_state("t").metadata["frozen"] == frozen_by
    assert lease_of(store) is None  # the run gave its lease up
    trail = [(e.stage, e.actor, e.call_id) for e in g.audit("t")]
    assert ("freeze", "secops", None) in trail  # the operator's
    assert trail[-1] == ("freeze", None, "call_refund")  # the call it stopped, never run
    with pytest.raises(ThreadFrozenError):
        g.invoke(None, thread_id="t")
    g.unfreeze("t", by="secops", reason="contained")
    res = g.invoke(None, thread_id="t")
    assert res.status == "done" and res.state.messages[-1].content == "Refunded."
    assert ran == ["look", "refund"]


def test_a_node_dispatching_after_a_freeze_stops_without_running_the_call(
    store: Checkpointer,
) -> None:
    """``ctx.dispatch_once`` of a run whose thread was frozen since it started: the store
    refuses the claim, the call does not run and the task stops as a freeze does; the
    thread is frozen (never ``failed``) and runs the call once after the unfreeze."""
    ran: list[str] = []
    started, frozen = threading.Event(), threading.Event()

    async def act(s: S, ctx: NodeContext) -> S:
        started.set()
        assert await anyio.to_thread.run_sync(frozen.wait, TIMEOUT)

        async def send() -> str:
            ran.append("send")
            return "sent"

        out = await ctx.dispatch_once("send-1", "send", None, send)
        return {"log": [f"{out.status}:{out.result}"]}

    b = StateGraph(S).add_node("act", act).add_edge(START, "act").add_edge("act", END)
    g = b.compile(checkpointer=store)
    with freezing(g, started, frozen), pytest.raises(ThreadFrozenError, match="runaway agent"):
        g.invoke({}, thread_id="t")
    assert ran == [] and status(g) == "frozen" and lease_of(store) is None
    assert anyio.run(store.get_dispatch, ThreadId("t"), CallId("send-1")) is None
    g.unfreeze("t", by="secops", reason="contained")
    assert status(g) == "paused"
    res = g.invoke(None, thread_id="t")
    assert res.status == "done" and res.state["log"] == ["succeeded:sent"]
    assert ran == ["send"]


class Window:
    """Holds the freeze between its read of the head's step and its commit (the first
    ``load_memos`` once ``armed``): lets the run go on (``go``) until it has written
    (``wrote``), then lets the freeze commit what it read."""

    def __init__(self) -> None:
        self.armed, self.go, self.wrote = threading.Event(), threading.Event(), threading.Event()

    async def hold(self) -> None:
        if self.armed.is_set():
            self.armed.clear()
            self.go.set()
            assert await anyio.to_thread.run_sync(self.wrote.wait, TIMEOUT)


def windowed(kind: str, tmp_path: Path) -> tuple[Checkpointer, Window]:
    window = Window()
    base: type[Any] = MemoryCheckpointer if kind == "memory" else SqliteCheckpointer

    class Store(base):  # type: ignore[misc, valid-type]
        async def load_memos(self, *args: Any) -> Any:
            read = await super().load_memos(*args)
            await window.hold()
            return read

    return (Store() if kind == "memory" else Store(tmp_path / "x.db")), window


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("write", ["memo", "step"])
def test_what_a_run_writes_while_a_freeze_commits_is_kept(
    kind: str, write: str, tmp_path: Path
) -> None:
    """The run goes on between the freeze's read and its commit: a memoized step it then
    commits at the head is carried to the unfrozen thread (never run twice); a step it
    then finishes moves the head, and the freeze reads it again and freezes after it."""
    store, window = windowed(kind, tmp_path)
    ran: list[str] = []
    started, frozen = threading.Event(), threading.Event()

    def costly(name: str) -> str:
        ran.append(name)
        return name

    async def first(s: S, ctx: NodeContext) -> S:
        window.armed.set()
        started.set()
        assert await anyio.to_thread.run_sync(window.go.wait, TIMEOUT)
        if write == "memo":
            await ctx.step_once("costly", costly, "memo")
            window.wrote.set()
            assert await anyio.to_thread.run_sync(frozen.wait, TIMEOUT)
            await ctx.dispatch_once("send-1", "send", None, lambda: send("first"))
        return {"log": [costly("first")]}

    async def second(s: S, ctx: NodeContext) -> S:
        window.wrote.set()  # (the first step is committed: the head moved)
        assert await anyio.to_thread.run_sync(frozen.wait, TIMEOUT)
        await ctx.dispatch_once("send-2", "send", None, lambda: send("second"))
        return {"log": [costly("second")]}

    async def send(name: str) -> str:
        ran.append(f"send:{name}")
        return "sent"

    b = StateGraph(S).add_node("first", first).add_node("second", second)
    b.add_edge(START, "first").add_edge("first", "second").add_edge("second", END)
    g = b.compile(checkpointer=store)
    try:
        with freezing(g, started, frozen), pytest.raises(ThreadFrozenError):
            g.invoke({}, thread_id="t")
        frozen_at = g.get_state("t")
        assert status(g) == "frozen"
        g.unfreeze("t", by="secops", reason="contained")
        res = g.invoke(None, thread_id="t")
        assert res.status == "done"
    finally:
        if isinstance(store, SqliteCheckpointer):
            anyio.run(store.close)
    if write == "memo":
        assert frozen_at.next == ("first",)
        assert ran == ["memo", "send:first", "first", "send:second", "second"]  # memo: once
    else:
        assert frozen_at.next == ("second",) and frozen_at.values["log"] == ["first"]
        assert ran == ["first", "send:second", "second"]


def test_a_thread_frozen_under_a_workers_run_is_reported_and_not_retried(
    store: Checkpointer,
) -> None:
    """A worker's run of a thread frozen meanwhile fails, the error naming the freeze; the
    thread is not runnable again until it is unfrozen, and then runs the call once."""
    ran: list[str] = []
    started, frozen = threading.Event(), threading.Event()

    async def act(s: S, ctx: NodeContext) -> S:
        go = ctx.interrupt("go?")
        started.set()
        assert await anyio.to_thread.run_sync(frozen.wait, TIMEOUT)

        async def send() -> str:
            ran.append("send")
            return "sent"

        await ctx.dispatch_once("send-1", "send", None, send)
        return {"log": [go]}

    b = StateGraph(S).add_node("act", act).add_edge(START, "act").add_edge("act", END)
    g = b.compile(checkpointer=store, name="flow")
    assert g.invoke({}, thread_id="t").status == "paused"
    g.submit("t", resume="yes")
    with freezing(g, started, frozen):
        [r] = anyio.run(Worker(g).run_once)
    assert (r.thread_id, r.status) == ("t", "failed")
    assert r.error is not None and "ThreadFrozenError" in r.error and "runaway agent" in r.error
    assert ran == [] and status(g) == "frozen"
    assert anyio.run(Worker(g).run_once) == []  # not picked up again
    g.unfreeze("t", by="secops", reason="contained")
    [again] = anyio.run(Worker(g).run_once)  # (its answer is still there: runnable)
    assert again.status == "done" and ran == ["send"]
