"""``submit`` racing a run of the thread: the answer is recorded only if no run took the
thread between submit's read and its write (``record_answers(if_idle_at=...)``).

An outside tester found that a deny submitted while another process resumed the thread with
an earlier approval was accepted, recorded as the latest decision (so the trail said "denied,
the approval superseded"), while the run dispatched the approved call. The interleaving is
made here deterministically: the store's ``get_pauses``, which submit calls between reading
the thread and writing the answer, first lets "another process" act on the thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from checkpoints import Checkpointer
from checkpoints.lease import new_owner
from checkpoints.models import ThreadId
from graphflow import (
    END,
    START,
    NothingToResumeError,
    StateGraph,
    ThreadBusyError,
    ThreadPausedError,
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

T = ThreadId("t")


def agent_graph(store: Checkpointer, ran: list[str]) -> Any:
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
    return b.add_edge(START, "files").add_edge("files", END).compile(checkpointer=store)


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
    g = agent_graph(store, ran)
    g.invoke({"messages": [{"role": "user", "content": "rm /a"}]}, thread_id="t")
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


def test_a_submit_whose_thread_changed_meanwhile_tries_again_on_it_as_it_is(
    store: Checkpointer, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    g = agent_graph(store, ran)
    g.invoke({"messages": [{"role": "user", "content": "rm /a"}]}, thread_id="t")

    async def a_run_comes_and_goes() -> None:  # approved and run to the end, lease released
        await g.ainvoke(None, thread_id="t", decisions={"call_1": Decision.approve(by="al")})

    calls = between_read_and_write(store, monkeypatch, a_run_comes_and_goes)
    with pytest.raises(NothingToResumeError):  # as a submit made after that run
        g.submit("t", decisions={"call_1": Decision.deny(reason="no", by="bob")})
    assert calls  # (the run happened inside submit's first try)
    assert ran == ["/a"] and g.get_state("t").values.messages[-1].content == "done"
    assert [(d.verdict, d.by) for d in g.list_decisions("t")] == [("approve", "al")]
    bobs = [e for e in g.audit("t") if e.stage == "decision" and e.actor == "bob"]
    assert [e.applied for e in bobs] == [False, False]


def test_a_new_input_while_a_run_resumes_the_paused_thread_is_busy_not_paused(
    store: Checkpointer,
) -> None:
    """A run resuming a paused thread (running the approved call, say) leaves it ``paused``
    until its first commit: a new input meanwhile is refused as busy (the run holds it),
    not told to answer the pauses the run is applying."""
    ran: list[str] = []
    g = agent_graph(store, ran)
    g.invoke({"messages": [{"role": "user", "content": "rm /a"}]}, thread_id="t")
    runner = new_owner()
    anyio.run(store.acquire_lease, T, runner, 60.0)  # (as another process's resume does)
    with pytest.raises(ThreadBusyError):
        g.invoke({"messages": [{"role": "user", "content": "and /b"}]}, thread_id="t")
    anyio.run(store.release_lease, T, runner)
    with pytest.raises(ThreadPausedError):  # free again: the pauses wait for answers
        g.invoke({"messages": [{"role": "user", "content": "and /b"}]}, thread_id="t")
