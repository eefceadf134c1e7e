"""``update_state`` as a LangGraph user expects it (API.md "State and history"):

- the update counts as a write of ``as_node``, or of the node that wrote the checkpoint's
  step (the input for a run's first checkpoint), whose edges are evaluated again;
- pending tasks whose frontier comes out the same are kept (records, memoized steps,
  pauses: a committed model answer is never asked again), otherwise replaced;
- ``as_node=END`` ends the pending work; ``checkpoint_id`` forks, also in a subgraph;
- a cancelled thread refuses it; no thread is ever left ``running`` by it.

Every test runs on ``MemoryCheckpointer`` and on a ``SqliteCheckpointer`` file; on SQLite
each call uses a new checkpointer object, as a new process would.
"""

import pathlib
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel

from checkpoints import MemoryCheckpointer, SerializationError, SqliteCheckpointer
from graphflow import (
    END,
    START,
    CompiledGraph,
    InvalidUpdateError,
    NodeContext,
    Send,
    StateGraph,
    ThreadCancelledError,
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
from graphflow.reducers import append


class State(BaseModel):
    log: Annotated[list[str], append] = []
    mode: str = ""
    n: int = 0


class Backend:
    def __init__(self, kind: str, path: pathlib.Path):
        self.kind = kind
        self.path = path
        self._memory = MemoryCheckpointer()
        self._opened: list[SqliteCheckpointer] = []

    def graph(self, make: Callable[[], StateGraph], **kwargs: Any) -> CompiledGraph:
        if self.kind == "memory":
            return make().compile(checkpointer=self._memory, **kwargs)
        cp = SqliteCheckpointer(self.path)
        self._opened.append(cp)
        return make().compile(checkpointer=cp, **kwargs)

    def close(self) -> None:
        for cp in self._opened:
            anyio.run(cp.close)


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    b = Backend(request.param, tmp_path / "u.db")
    yield b
    b.close()


def logger(name: str, calls: Counter[str]) -> Callable[[State], dict[str, Any]]:
    def fn(state: State) -> dict[str, Any]:
        calls[name] += 1
        return {"log": [name]}

    return fn


def status(graph: CompiledGraph) -> dict[str, str]:
    return {t.thread_id: t.status for t in graph.list_threads()}


# -- the writer's edges are evaluated again ------------------------------------------------------
def routed(calls: Counter[str]) -> Callable[[], StateGraph]:
    """a -> (mode == "go": b | else END); b -> END."""

    def make() -> StateGraph:
        g = StateGraph(State).add_node("a", logger("a", calls)).add_node("b", logger("b", calls))
        g.add_edge(START, "a").add_conditional_edges("a", lambda s: "b" if s.mode == "go" else END)
        return g.add_edge("b", END)

    return make


def test_an_update_that_routes_to_end_stops_the_run(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = routed(calls)
    paused = backend.graph(make, interrupt_before=["b"]).invoke({"mode": "go"}, thread_id="t")
    assert paused.status == "paused"
    # No as_node: the update counts as a's (the writer of the head's step); a's edge now
    # leads to END.
    backend.graph(make, interrupt_before=["b"]).update_state("t", {"mode": "stop"})
    graph = backend.graph(make, interrupt_before=["b"])
    snap = graph.get_state("t")
    assert snap.next == ()
    assert snap.metadata["source"] == "update"
    assert status(graph) == {"t": "done"}
    assert graph.pending_pauses("t") == []
    done = backend.graph(make, interrupt_before=["b"]).invoke(None, thread_id="t")
    assert done.status == "done"
    assert calls == {"a": 1}


def test_an_update_of_the_first_checkpoint_counts_as_the_input(backend: Backend) -> None:
    calls: Counter[str] = Counter()

    def make() -> StateGraph:
        g = StateGraph(State).add_node("x", logger("x", calls)).add_node("y", logger("y", calls))
        g.add_conditional_edges(START, lambda s: s.mode, ["x", "y"])
        return g.add_edge("x", END).add_edge("y", END)

    backend.graph(make, interrupt_before=["x", "y"]).invoke({"mode": "x"}, thread_id="t")
    assert backend.graph(make).get_state("t").next == ("x",)
    backend.graph(make).update_state("t", {"mode": "y"})
    assert backend.graph(make).get_state("t").next == ("y",)
    done = backend.graph(make, interrupt_before=["x", "y"]).invoke(None, thread_id="t")
    assert done.status == "paused"  # y's own gate: a new task, a new gate
    done = backend.graph(make, interrupt_before=["x", "y"]).invoke(None, thread_id="t")
    assert done.status == "done"
    assert done.state.log == ["y"]
    assert calls == {"y": 1}


def test_new_send_arguments_replace_the_pending_tasks(backend: Backend) -> None:
    calls: Counter[str] = Counter()

    def work(arg: dict[str, Any]) -> dict[str, Any]:
        calls[f"w{arg['i']}"] += 1
        return {"log": [f"w{arg['i']}"]}

    def make() -> StateGraph:
        g = StateGraph(State).add_node("a", logger("a", calls)).add_node("work", work)
        g.add_edge(START, "a")
        g.add_conditional_edges("a", lambda s: [Send("work", {"i": i}) for i in range(s.n)])
        return g.add_edge("work", END)

    backend.graph(make, interrupt_before=["work"]).invoke({"n": 2}, thread_id="t")
    before = backend.graph(make).get_state("t")
    assert before.next == ("work", "work")
    backend.graph(make).update_state("t", {"log": ["note"]})  # same Sends: tasks kept
    kept = backend.graph(make).get_state("t")
    assert [t.id for t in kept.tasks] == [t.id for t in before.tasks]
    assert [p.id for p in kept.pauses] == [p.id for p in before.pauses]

    backend.graph(make).update_state("t", {"n": 3})  # other Sends: a new frontier
    new = backend.graph(make).get_state("t")
    assert new.next == ("work", "work", "work")
    assert not {t.id for t in new.tasks} & {t.id for t in before.tasks}
    assert new.pauses == ()
    graph = backend.graph(make, interrupt_before=["work"])
    assert status(graph) == {"t": "paused"}
    assert graph.invoke(None, thread_id="t").status == "paused"  # their own gate
    done = backend.graph(make, interrupt_before=["work"]).invoke(None, thread_id="t")
    assert sorted(done.state.log) == ["a", "note", "w0", "w1", "w2"]
    assert calls == {"a": 1, "w0": 1, "w1": 1, "w2": 1}


def test_several_writers_make_the_update_ambiguous(backend: Backend) -> None:
    calls: Counter[str] = Counter()

    def make() -> StateGraph:
        g = StateGraph(State)
        for n in ("a", "b", "c"):
            g.add_node(n, logger(n, calls))
        g.add_edge(START, "a").add_edge(START, "b").add_edge(["a", "b"], "c")
        return g.add_edge("c", END)

    backend.graph(make, interrupt_before=["c"]).invoke({}, thread_id="t")
    head = backend.graph(make).get_state("t").checkpoint_id
    with pytest.raises(InvalidUpdateError, match="as_node"):
        backend.graph(make).update_state("t", {"n": 1})
    assert backend.graph(make).get_state("t").checkpoint_id == head
    # Named, the update counts as that node's: b alone does not fire the join again.
    backend.graph(make).update_state("t", {"n": 1}, as_node="b")
    assert backend.graph(make).get_state("t").next == ()
    backend.graph(make).update_state("t", {"n": 2}, as_node="a")
    snap = backend.graph(make).get_state("t")
    assert (snap.next, snap.values.n) == (("c",), 2)  # a and b are both in: the join fires


# -- pending tasks are kept when the frontier is the same ------------------------------------------
def prep_ask_help(calls: Counter[str]) -> Callable[[], StateGraph]:
    """prep -> (asker: a memoized step, then interrupt; helper)."""

    async def asker(state: State, ctx: NodeContext) -> dict[str, Any]:
        calls["asker"] += 1

        def costly() -> int:
            calls["costly"] += 1
            return 7

        seen = await ctx.step_once("costly", costly)
        return {"log": [f"asker:{seen}:{state.n}:{interrupt('why?')}"]}

    def make() -> StateGraph:
        g = StateGraph(State).add_node("prep", logger("prep", calls)).add_node(asker)
        g.add_node("helper", logger("helper", calls))
        g.add_edge(START, "prep").add_edge("prep", "asker").add_edge("prep", "helper")
        return g.add_edge("asker", END).add_edge("helper", END)

    return make


@pytest.mark.parametrize("as_node", [None, "prep"], ids=["no as_node", "as_node=prep"])
def test_same_frontier_keeps_records_memos_and_pauses(
    backend: Backend, as_node: str | None
) -> None:
    calls: Counter[str] = Counter()
    make = prep_ask_help(calls)
    [pause] = backend.graph(make).invoke({}, thread_id="t").pauses
    assert calls == {"prep": 1, "asker": 1, "costly": 1, "helper": 1}
    before = backend.graph(make).get_state("t")

    backend.graph(make).update_state("t", {"n": 5}, as_node=as_node)
    graph = backend.graph(make)
    snap = graph.get_state("t")
    assert [t.id for t in snap.tasks] == [t.id for t in before.tasks]
    assert {t.name: t.status for t in snap.tasks} == {"asker": "paused", "helper": "completed"}
    assert graph.pending_pauses("t") == [pause]
    assert status(graph) == {"t": "paused"}

    done = backend.graph(make).invoke(None, thread_id="t", resume="because")
    assert done.status == "done"
    assert done.state.log == ["prep", "asker:7:5:because", "helper"]
    assert calls == {"prep": 1, "asker": 2, "costly": 1, "helper": 1}


def test_an_agents_committed_answer_is_not_asked_again_after_an_update(
    backend: Backend,
) -> None:
    ran: list[str] = []

    @tool
    def delete_file(path: str) -> dict[str, str]:
        """Delete a file."""
        ran.append(path)
        return {"deleted": path}

    call = ToolCall(id="call_1", name="delete_file", args={"path": "/x"})
    model = ScriptedModel([ModelResponse(text="", tool_calls=[call]), "all done"])
    agent = Agent(name="fm", model=model, tools=[delete_file], require_confirmation=True)

    class S(MessagesState):
        note: str = ""

    def make() -> StateGraph:
        return StateGraph(S).add_node(AgentNode(agent)).add_edge(START, "fm").add_edge("fm", END)

    paused = backend.graph(make).invoke(
        {"messages": [{"role": "user", "content": "hi"}]}, thread_id="t"
    )
    assert paused.status == "paused" and len(model.calls) == 1
    backend.graph(make).update_state("t", {"note": "checked"})  # counts as the input
    assert backend.graph(make).pending_pauses("t") == paused.pauses
    done = backend.graph(make).invoke(None, thread_id="t", decisions={"call_1": "approve"})
    assert done.status == "done"
    assert len(model.calls) == 2  # the committed turn was not asked again
    assert ran == ["/x"]
    assert done.state.note == "checked"


# -- END, forks, subgraphs -----------------------------------------------------------------------
def test_as_node_end_ends_the_pending_work_without_cancelling(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = prep_ask_help(calls)
    backend.graph(make).invoke({}, thread_id="t")
    backend.graph(make).update_state("t", {"log": ["ended"]}, as_node=END)
    graph = backend.graph(make)
    snap = graph.get_state("t")
    assert (snap.next, snap.values.log) == ((), ["prep", "ended"])
    assert status(graph) == {"t": "done"}
    assert graph.pending_pauses("t") == []
    assert backend.graph(make).invoke(None, thread_id="t").status == "done"
    again = backend.graph(make).invoke({"n": 1}, thread_id="t")  # a new run, not refused
    assert again.status == "paused"


def test_update_at_an_older_checkpoint_forks_with_modified_state(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    seen: list[int] = []

    def make() -> StateGraph:
        def b(state: State) -> dict[str, Any]:
            seen.append(state.n)
            return {"log": ["b"]}

        g = StateGraph(State).add_node("a", logger("a", calls)).add_node("b", b)
        g.add_node("c", logger("c", calls))
        return g.add_edge(START, "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", END)

    backend.graph(make).invoke({"log": ["in"]}, thread_id="t")
    original = backend.graph(make).get_state_history("t")
    for old in original:  # every checkpoint, the first one included (list chains)
        new_id = backend.graph(make).update_state(
            "t", {"n": old.step + 10, "log": ["edit"]}, checkpoint_id=old.checkpoint_id
        )
        graph = backend.graph(make)
        head = graph.get_state("t")
        assert head.checkpoint_id == new_id
        assert head.parent_checkpoint_id == old.checkpoint_id
        assert head.next == old.next
        assert head.values.log == [*old.values.log, "edit"]
        history = {h.checkpoint_id: h.values for h in graph.get_state_history("t")}
        assert all(history[h.checkpoint_id] == h.values for h in original)
        done = backend.graph(make).invoke(None, thread_id="t")
        assert done.status == "done"
        assert done.state.log[-1] == "c" or old.next == ()
    assert seen == [0, 10, 9]  # b ran again in the forks from before it, on their state


def child_pair(calls: Counter[str], **compile_kwargs: Any) -> CompiledGraph:
    """s1 -> s2 (logs the n it sees)."""

    def s2(state: State) -> dict[str, Any]:
        calls["s2"] += 1
        return {"log": [f"s2:{state.n}"]}

    c = StateGraph(State).add_node("s1", logger("s1", calls)).add_node("s2", s2)
    c.add_edge(START, "s1").add_edge("s1", "s2").add_edge("s2", END)
    return c.compile(**compile_kwargs)


def test_update_at_a_subgraphs_checkpoint_is_continued_by_the_parent(backend: Backend) -> None:
    calls: Counter[str] = Counter()

    def make() -> StateGraph:
        p = StateGraph(State).add_node("sub", child_pair(calls, interrupt_before=["s2"]))
        p.add_node("z", logger("z", calls))
        return p.add_edge(START, "sub").add_edge("sub", "z").add_edge("z", END)

    paused = backend.graph(make).invoke({}, thread_id="t")
    assert [p.node for p in paused.pauses] == ["sub.s2"]
    [task] = backend.graph(make).get_state("t", subgraphs=True).tasks
    assert task.state is not None and task.state.next == ("s2",)

    new_id = backend.graph(make).update_state(
        "t", {"n": 4, "log": ["edit"]}, checkpoint_id=task.state.checkpoint_id
    )
    [task2] = backend.graph(make).get_state("t", subgraphs=True).tasks
    assert task2.id == task.id  # the parent's pending task goes on
    assert task2.state is not None and task2.state.checkpoint_id == new_id
    assert (task2.state.values.n, task2.state.next) == (4, ("s2",))
    assert [p.node for p in backend.graph(make).pending_pauses("t")] == ["sub.s2"]

    done = backend.graph(make).invoke(None, thread_id="t")
    assert done.status == "done"
    assert done.state.log == ["s1", "edit", "s2:4", "z"]  # the child's items once each
    assert done.state.n == 4
    assert calls == {"s1": 1, "s2": 1, "z": 1}


def test_update_at_a_finished_subgraph_of_a_pending_step_reaches_the_parent(
    backend: Backend,
) -> None:
    calls: Counter[str] = Counter()

    def asker(state: State) -> dict[str, Any]:
        calls["asker"] += 1
        return {"log": [f"asker:{interrupt('?')}"]}

    def make() -> StateGraph:
        p = StateGraph(State).add_node("sub", child_pair(calls)).add_node(asker)
        p.add_edge(START, "sub").add_edge(START, "asker")
        return p.add_edge("sub", END).add_edge("asker", END)

    backend.graph(make).invoke({}, thread_id="t")
    tasks = {t.name: t for t in backend.graph(make).get_state("t", subgraphs=True).tasks}
    assert tasks["sub"].status == "completed"
    child = tasks["sub"].state
    assert child is not None and child.next == ()
    backend.graph(make).update_state("t", {"n": 9}, checkpoint_id=child.checkpoint_id)
    done = backend.graph(make).invoke(None, thread_id="t", resume="x")
    assert done.status == "done"
    assert done.state.n == 9  # the parent's task finished its child again, with the edit
    assert sorted(done.state.log) == ["asker:x", "s1", "s2:0"]
    assert calls == {"s1": 1, "s2": 1, "asker": 2}


# -- thread status --------------------------------------------------------------------------------
def test_a_cancelled_thread_refuses_update_state(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = prep_ask_help(calls)
    backend.graph(make).invoke({}, thread_id="t")
    backend.graph(make).cancel("t", reason="no")
    history = len(backend.graph(make).get_state_history("t"))
    for as_node in (None, "prep", END):
        with pytest.raises(ThreadCancelledError) as info:
            backend.graph(make).update_state("t", {"n": 1}, as_node=as_node)
        assert info.value.thread_id == "t"
    graph = backend.graph(make)
    assert status(graph) == {"t": "cancelled"}
    assert len(graph.get_state_history("t")) == history
    with pytest.raises(ThreadCancelledError):
        backend.graph(make).invoke(None, thread_id="t")
    assert calls == {"prep": 1, "asker": 1, "costly": 1, "helper": 1}


@pytest.mark.parametrize("as_node", ["a", None])
def test_an_update_with_pending_work_leaves_the_thread_paused_not_running(
    backend: Backend, as_node: str | None
) -> None:
    calls: Counter[str] = Counter()
    make = routed(calls)
    backend.graph(make).invoke({"mode": "go"}, thread_id="t")
    assert status(backend.graph(make)) == {"t": "done"}
    if as_node is None:  # the writer of the head's step is b: its edge leads to END
        backend.graph(make).update_state("t", {"mode": "again"})
        assert status(backend.graph(make)) == {"t": "done"}
        return
    backend.graph(make).update_state("t", {"mode": "go"}, as_node=as_node)
    graph = backend.graph(make)
    assert graph.get_state("t").next == ("b",)
    # Nobody runs it: "running" would look like a crashed run; it waits for invoke(None).
    assert status(graph) == {"t": "paused"}
    assert graph.pending_pauses("t") == []
    done = backend.graph(make).invoke(None, thread_id="t")
    assert done.status == "done"
    assert calls == {"a": 1, "b": 2}
    assert status(backend.graph(make)) == {"t": "done"}


def test_an_update_of_a_new_thread_leaves_no_running_thread(backend: Backend) -> None:
    calls: Counter[str] = Counter()
    make = routed(calls)
    backend.graph(make).update_state("new", {"mode": "go"}, as_node="a")
    assert status(backend.graph(make)) == {"new": "paused"}
    done = backend.graph(make).invoke(None, thread_id="new")
    assert (done.status, done.state.log) == ("done", ["b"])


@pytest.mark.parametrize("existing", [False, True], ids=["new thread", "done thread"])
def test_a_failed_update_changes_nothing(backend: Backend, existing: bool) -> None:
    class Loose(BaseModel):
        log: Annotated[list[str], append] = []
        blob: Any = None

    def make() -> StateGraph:
        g = StateGraph(Loose).add_node("a", lambda s: {"log": ["a"]})
        return g.add_edge(START, "a").add_edge("a", END)

    if existing:
        backend.graph(make).invoke({}, thread_id="t")
    before = status(backend.graph(make))
    with pytest.raises(SerializationError, match="'blob'"):
        backend.graph(make).update_state("t", {"blob": object()}, as_node="a")
    graph = backend.graph(make)
    assert status(graph) == before  # no thread left "running" with no runner
    assert len(graph.get_state_history("t")) == (2 if existing else 0)
    # The lease was given up: the thread runs and updates at once.
    backend.graph(make).update_state("t", {"blob": 1}, as_node="a")
    assert backend.graph(make).invoke(None, thread_id="t").status == "done"
