"""Running graphs: invoke/ainvoke/stream/astream (API.md, "Building a graph" to "Events")."""

import gc
import operator
import warnings
from collections import Counter
from typing import Annotated, Any, TypedDict

import anyio
import pytest
from pydantic import BaseModel

from checkpoints import MemoryCheckpointer
from graphflow import (
    END,
    START,
    Command,
    Event,
    GraphflowError,
    InvalidRouteError,
    InvalidUpdateError,
    NodeContext,
    NodeError,
    Pause,
    RecursionLimitError,
    Send,
    StateGraph,
    interrupt,
)
from graphflow.reducers import append, merge


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class State(BaseModel):
    log: Annotated[list[str], append] = []
    count: int = 0
    last: str = ""
    seen: Annotated[dict[str, Any], merge] = {}
    results: Annotated[list[int], operator.add] = []
    items: list[int] = []


def logger(name: str, calls: Counter[str] | None = None) -> Any:
    def fn(state: State) -> dict[str, Any]:
        if calls is not None:
            calls[name] += 1
        return {"log": [name]}

    fn.__name__ = name
    return fn


def chain(*names: str, calls: Counter[str] | None = None) -> StateGraph:
    b = StateGraph(State)
    prev = START
    for n in names:
        b.add_node(n, logger(n, calls))
        b.add_edge(prev, n)
        prev = n
    b.add_edge(prev, END)
    return b


# -- sequential and parallel --------------------------------------------------------------------
def test_sequential_chain() -> None:
    calls: Counter[str] = Counter()
    result = chain("a", "b", "c", calls=calls).compile().invoke({})
    assert result.status == "done"
    assert result.pauses == []
    assert result.state.log == ["a", "b", "c"]
    assert calls == {"a": 1, "b": 1, "c": 1}


def test_node_returning_none_changes_nothing() -> None:
    def nothing(state: State) -> None:
        return None

    graph = StateGraph(State).add_node(nothing).add_edge(START, "nothing")
    result = graph.add_edge("nothing", END).compile().invoke({"count": 3, "log": ["x"]})
    assert result.state == State(count=3, log=["x"])


def test_fan_out_runs_targets_in_one_step_and_join_waits_for_all_sources() -> None:
    calls: Counter[str] = Counter()
    join_saw: list[list[str]] = []

    def join(state: State) -> dict[str, Any]:
        calls["join"] += 1
        join_saw.append(list(state.log))
        return {"log": ["join"]}

    b = StateGraph(State)
    for n in ("a", "b", "c", "c2"):
        b.add_node(n, logger(n, calls))
    b.add_node(join)
    b.add_edge(START, "a")
    b.add_edge("a", "b").add_edge("a", "c").add_edge("c", "c2")
    b.add_edge(["b", "c2"], "join").add_edge("join", END)
    graph = b.compile()

    steps: list[list[str]] = []
    for ev in graph.stream({}, mode="updates"):
        if ev.type == "updates":
            steps.append(sorted(ev.data))
    assert steps == [["a"], ["b", "c"], ["c2"], ["join"]]
    result = graph.invoke({})
    assert calls["join"] == 2  # once per run
    assert join_saw == [["a", "b", "c", "c2"], ["a", "b", "c", "c2"]]
    assert result.state.log == ["a", "b", "c", "c2", "join"]


def test_plain_edges_from_two_sources_run_the_target_once_per_trigger_step() -> None:
    # Without a join, "d" is triggered by "b" (step 2) and again by "c2" (step 3).
    calls: Counter[str] = Counter()
    b = StateGraph(State)
    for n in ("a", "b", "c", "c2", "d"):
        b.add_node(n, logger(n, calls))
    b.add_edge(START, "a").add_edge("a", "b").add_edge("a", "c").add_edge("c", "c2")
    b.add_edge("b", "d").add_edge("c2", "d").add_edge("d", END)
    result = b.compile().invoke({})
    assert calls["d"] == 2
    assert result.state.log == ["a", "b", "c", "c2", "d", "d"]


def test_join_fires_once_per_completion_of_all_sources_in_a_loop() -> None:
    calls: Counter[str] = Counter()

    def join(state: State) -> dict[str, Any]:
        calls["join"] += 1
        return {"count": state.count + 1}

    b = StateGraph(State)
    b.add_node("a", logger("a", calls)).add_node("b", logger("b", calls)).add_node(join)
    b.add_edge(START, "a").add_edge(START, "b").add_edge(["a", "b"], "join")
    b.add_conditional_edges("join", lambda s: ["a", "b"] if s.count < 3 else END)
    result = b.compile().invoke({})
    assert result.state.count == 3
    assert calls == {"a": 3, "b": 3, "join": 3}


# -- conditional edges --------------------------------------------------------------------------
def _branching(router: Any, path_map: Any = None) -> StateGraph:
    targets = ("yes", "no", "extra") if path_map is None else ("yes", "no")
    b = StateGraph(State).add_node("start", logger("start"))
    for n in targets:
        b.add_node(n, logger(n)).add_edge(n, END)
    b.add_edge(START, "start")
    b.add_conditional_edges("start", router, path_map)
    return b


@pytest.mark.parametrize(
    ("count", "expected"),
    [(1, ["start", "yes"]), (0, ["start", "no"]), (-1, ["start"])],
)
def test_conditional_edge_without_path_map(count: int, expected: list[str]) -> None:
    def route(state: State) -> str:
        return "yes" if state.count > 0 else ("no" if state.count == 0 else END)

    result = _branching(route).compile().invoke({"count": count})
    assert result.state.log == expected


def test_conditional_edge_returning_a_list_fans_out() -> None:
    result = _branching(lambda s: ["no", "yes", "extra"]).compile().invoke({})
    assert result.state.log == ["start", "extra", "no", "yes"]


@pytest.mark.parametrize(
    ("count", "expected"),
    [(1, ["start", "yes"]), (0, ["start", "no"]), (-1, ["start"])],
)
def test_conditional_edge_with_dict_path_map(count: int, expected: list[str]) -> None:
    def route(state: State) -> str:
        return {1: "go", 0: "stop", -1: "quit"}[state.count]

    graph = _branching(route, {"go": "yes", "stop": "no", "quit": END}).compile()
    assert graph.invoke({"count": count}).state.log == expected


def test_conditional_edge_with_boolean_path_map_keys() -> None:
    graph = _branching(lambda s: s.count > 0, {True: "yes", False: "no"}).compile()
    assert graph.invoke({"count": 5}).state.log == ["start", "yes"]
    assert graph.invoke({"count": 0}).state.log == ["start", "no"]


def test_conditional_edge_with_list_path_map() -> None:
    graph = _branching(lambda s: "no" if s.count else "yes", ["yes", "no", END]).compile()
    assert graph.invoke({"count": 0}).state.log == ["start", "yes"]
    assert graph.invoke({"count": 1}).state.log == ["start", "no"]


def test_router_sees_the_state_after_the_step() -> None:
    def start(state: State) -> dict[str, Any]:
        return {"count": 7}

    seen: list[int] = []

    def route(state: State) -> str:
        seen.append(state.count)
        return "yes"

    b = StateGraph(State).add_node(start).add_node("yes", logger("yes"))
    b.add_edge(START, "start").add_conditional_edges("start", route).add_edge("yes", END)
    b.compile().invoke({})
    assert seen == [7]


def test_router_result_that_is_not_a_node_or_not_in_the_path_map_is_an_error() -> None:
    unknown = _branching(lambda s: "ghost")
    with pytest.raises(InvalidRouteError, match="ghost"):
        unknown.compile().invoke({})
    unmapped = _branching(lambda s: "maybe", {"go": "yes", "stop": "no"})
    with pytest.raises(InvalidRouteError, match="maybe"):
        unmapped.compile().invoke({})


def test_a_router_that_returns_none_is_an_error_unless_its_path_map_maps_none() -> None:
    """A router that forgot to return ended the run as if it had routed to END."""
    forgot = _branching(lambda s: None)
    with pytest.raises(InvalidRouteError, match="its router returned None"):
        forgot.compile().invoke({})
    mapped = _branching(lambda s: None, {None: "no", "go": "yes"})
    assert mapped.compile().invoke({}).state.log[-1:] == ["no"]


# -- Send and Command ---------------------------------------------------------------------------
class Item(BaseModel):
    value: int
    delay: float = 0.0


def _map_reduce() -> Any:
    reduced: list[list[int]] = []

    def plan_(state: State) -> dict[str, Any]:
        return {"log": ["plan"]}

    def fan(state: State) -> list[Send]:
        return [
            Send("worker", Item(value=v, delay=0.01 * (len(state.items) - i)))
            for i, v in enumerate(state.items)
        ]

    async def worker(arg: Item) -> dict[str, Any]:
        await anyio.sleep(arg.delay)
        return {"results": [arg.value * 10], "log": [f"w{arg.value}"]}

    def reduce(state: State) -> dict[str, Any]:
        reduced.append(list(state.results))
        return {"count": sum(state.results)}

    b = StateGraph(State).add_node("plan", plan_).add_node(worker).add_node(reduce)
    b.add_edge(START, "plan").add_conditional_edges("plan", fan)
    b.add_edge("worker", "reduce").add_edge("reduce", END)
    return b.compile(), reduced


def test_send_map_reduce() -> None:
    graph, reduced = _map_reduce()
    result = graph.invoke({"items": [1, 2, 3]})
    assert sorted(result.state.results) == [10, 20, 30]
    assert result.state.count == 60
    assert reduced == [result.state.results]  # reduce ran once, after every worker
    assert sorted(result.state.log) == ["plan", "w1", "w2", "w3"]


def test_send_results_do_not_depend_on_timing() -> None:
    graph, _ = _map_reduce()
    first = graph.invoke({"items": [1, 2, 3]}).state
    second = graph.invoke({"items": [3, 2, 1]}).state
    assert sorted(first.results) == sorted(second.results)
    # Workers finish in reverse order of their sends; the applied order is the send order.
    assert first.results == [10, 20, 30]
    assert second.results == [30, 20, 10]


def test_command_update_and_goto_with_destinations() -> None:
    calls: Counter[str] = Counter()

    def decide(state: State) -> Command:
        calls["decide"] += 1
        return Command(update={"log": ["decide"], "last": "decide"}, goto="right")

    b = StateGraph(State).add_node(decide, destinations=("left", "right"))
    b.add_node("left", logger("left", calls)).add_node("right", logger("right", calls))
    b.add_edge(START, "decide").add_edge("left", END).add_edge("right", END)
    result = b.compile().invoke({})
    assert result.state.log == ["decide", "right"]
    assert result.state.last == "decide"
    assert calls == {"decide": 1, "right": 1}


def test_command_goto_replaces_static_edges() -> None:
    def decide(state: State) -> Command:
        return Command(update={"log": ["decide"]}, goto=["left", "right"])

    b = StateGraph(State).add_node(decide, destinations=("left", "right"))
    b.add_node("left", logger("left")).add_node("right", logger("right"))
    b.add_node("static", logger("static"))
    b.add_edge(START, "decide").add_edge("decide", "static")
    b.add_edge("left", END).add_edge("right", END).add_edge("static", END)
    result = b.compile().invoke({})
    assert result.state.log == ["decide", "left", "right"]


def test_command_goto_end_and_goto_send() -> None:
    def decide(state: State) -> Command:
        if state.count:
            return Command(update={"log": ["stop"]}, goto=END)
        return Command(goto=[Send("worker", Item(value=4)), Send("worker", Item(value=5))])

    def worker(arg: Item) -> dict[str, Any]:
        return {"results": [arg.value]}

    b = StateGraph(State).add_node(decide, destinations=("worker", END)).add_node(worker)
    b.add_edge(START, "decide").add_edge("worker", END)
    graph = b.compile()
    assert graph.invoke({"count": 1}).state.log == ["stop"]
    assert graph.invoke({}).state.results == [4, 5]


def test_command_without_goto_follows_static_edges() -> None:
    def a(state: State) -> Command:
        return Command(update={"log": ["a"]})

    b = StateGraph(State).add_node(a).add_node("b", logger("b"))
    b.add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
    assert b.compile().invoke({}).state.log == ["a", "b"]


# -- parallel semantics -------------------------------------------------------------------------
def _parallel(delays: dict[str, float], seen: list[tuple[str, int, list[str]]]) -> Any:
    def make(name: str, delay: float) -> Any:
        async def fn(state: State) -> dict[str, Any]:
            await anyio.sleep(delay)
            seen.append((name, state.count, list(state.log)))
            return {
                "log": [name],
                "last": name,
                "count": state.count + 1,
                "seen": {name: state.count},
            }

        fn.__name__ = name
        return fn

    b = StateGraph(State)
    for name, delay in delays.items():
        b.add_node(name, make(name, delay))
        b.add_edge(START, name)
        b.add_edge(name, END)
    return b.compile()


@pytest.mark.parametrize(
    "delays",
    [
        {"zeta": 0.0, "mid": 0.02, "alpha": 0.04},
        {"zeta": 0.04, "mid": 0.02, "alpha": 0.0},
        {"zeta": 0.02, "mid": 0.0, "alpha": 0.04},
    ],
)
def test_parallel_nodes_see_same_state_and_writes_apply_in_node_name_order(
    delays: dict[str, float],
) -> None:
    seen: list[tuple[str, int, list[str]]] = []
    result = _parallel(delays, seen).invoke({"count": 10, "log": ["in"]})
    assert sorted(seen) == [("alpha", 10, ["in"]), ("mid", 10, ["in"]), ("zeta", 10, ["in"])]
    assert result.state.log == ["in", "alpha", "mid", "zeta"]
    assert result.state.last == "zeta"  # last write wins in node-name order
    assert result.state.count == 11
    assert result.state.seen == {"alpha": 10, "mid": 10, "zeta": 10}


def test_sync_and_async_nodes_mixed_in_parallel_and_in_sequence() -> None:
    seen: list[tuple[str, int]] = []

    def sync_node(state: State) -> dict[str, Any]:
        seen.append(("sync_node", state.count))
        return {"log": ["sync"], "results": [1]}

    async def async_node(state: State) -> dict[str, Any]:
        await anyio.sleep(0.01)
        seen.append(("async_node", state.count))
        return {"log": ["async"], "results": [2]}

    def after_sync(state: State) -> dict[str, Any]:
        return {"count": sum(state.results)}

    async def after_async(state: State) -> dict[str, Any]:
        return {"log": [f"total={state.count}"]}

    b = StateGraph(State).add_node(sync_node).add_node(async_node)
    b.add_node(after_sync).add_node(after_async)
    b.add_edge(START, "sync_node").add_edge(START, "async_node")
    b.add_edge(["sync_node", "async_node"], "after_sync")
    b.add_edge("after_sync", "after_async").add_edge("after_async", END)
    result = b.compile().invoke({"count": 5})
    assert sorted(seen) == [("async_node", 5), ("sync_node", 5)]
    assert result.state.log == ["async", "sync", "total=3"]
    assert result.state.results == [2, 1]


# -- node signatures ----------------------------------------------------------------------------
def test_fn_state_and_fn_state_ctx() -> None:
    contexts: list[NodeContext] = []

    def one_arg(state: State) -> dict[str, Any]:
        return {"log": ["one"]}

    def two_args(state: State, ctx: NodeContext) -> dict[str, Any]:
        contexts.append(ctx)
        return {"log": [f"{ctx.node}@{ctx.step}"]}

    async def async_two(state: State, ctx: NodeContext) -> dict[str, Any]:
        contexts.append(ctx)
        return {"log": [f"{ctx.node}@{ctx.step}"]}

    b = StateGraph(State).add_node(one_arg).add_node(two_args).add_node(async_two)
    b.add_node("lam", lambda s: {"log": ["lambda"]})
    b.add_edge(START, "one_arg").add_edge("one_arg", "two_args")
    b.add_edge("two_args", "async_two").add_edge("async_two", "lam").add_edge("lam", END)
    graph = b.compile(checkpointer=MemoryCheckpointer())
    result = graph.invoke({}, thread_id="sig")
    assert [isinstance(c, NodeContext) for c in contexts] == [True, True]
    assert [c.thread_id for c in contexts] == ["sig", "sig"]
    assert [c.node for c in contexts] == ["two_args", "async_two"]
    first, second = (int(entry.split("@")[1]) for entry in result.state.log[1:3])
    assert second == first + 1
    assert result.state.log[0] == "one"
    assert result.state.log[3] == "lambda"


def test_module_level_interrupt_outside_a_node_is_an_error() -> None:
    with pytest.raises(GraphflowError, match="outside"):
        interrupt("x")


# -- errors -------------------------------------------------------------------------------------
def test_unknown_update_key_raises_invalid_update_error_naming_node_and_key() -> None:
    calls: Counter[str] = Counter()

    def bad(state: State) -> dict[str, Any]:
        return {"log": ["bad"], "no_such_key": 1}

    b = StateGraph(State).add_node(bad).add_node("after", logger("after", calls))
    b.add_edge(START, "bad").add_edge("bad", "after").add_edge("after", END)
    with pytest.raises(InvalidUpdateError) as info:
        b.compile().invoke({})
    assert info.value.node == "bad"
    assert info.value.key == "no_such_key"
    assert "'bad'" in str(info.value)
    assert "'no_such_key'" in str(info.value)
    assert calls["after"] == 0


def test_unknown_input_key_raises_invalid_update_error() -> None:
    calls: Counter[str] = Counter()
    with pytest.raises(InvalidUpdateError) as info:
        chain("a", calls=calls).compile().invoke({"nope": 1})
    assert info.value.key == "nope"
    assert calls["a"] == 0


def test_typeddict_unknown_update_key() -> None:
    from typing import TypedDict

    class TD(TypedDict):
        x: int

    def writer(state: TD) -> dict[str, Any]:
        return {"y": 1}

    b = StateGraph(TD).add_node(writer).add_edge(START, "writer").add_edge("writer", END)
    with pytest.raises(InvalidUpdateError) as info:
        b.compile().invoke({"x": 1})
    assert (info.value.node, info.value.key) == ("writer", "y")


def test_node_error_wraps_the_exception_and_names_the_node() -> None:
    calls: Counter[str] = Counter()
    original = ValueError("disk on fire")

    def explode(state: State) -> dict[str, Any]:
        raise original

    b = StateGraph(State).add_node(explode).add_node("after", logger("after", calls))
    b.add_edge(START, "explode").add_edge("explode", "after").add_edge("after", END)
    with pytest.raises(NodeError) as info:
        b.compile().invoke({})
    assert info.value.__cause__ is original
    assert info.value.node == "explode"
    assert "explode" in str(info.value)
    assert "disk on fire" in str(info.value)
    assert calls["after"] == 0


@pytest.mark.anyio
async def test_node_error_from_async_node_in_parallel_step() -> None:
    class Boom(RuntimeError):
        pass

    async def fine(state: State) -> dict[str, Any]:
        return {"log": ["fine"]}

    async def broken(state: State) -> dict[str, Any]:
        await anyio.sleep(0)
        raise Boom("nope")

    b = StateGraph(State).add_node(fine).add_node(broken)
    b.add_edge(START, "fine").add_edge(START, "broken")
    b.add_edge("fine", END).add_edge("broken", END)
    with pytest.raises(NodeError) as info:
        await b.compile().ainvoke({})
    assert isinstance(info.value.__cause__, Boom)
    assert info.value.node == "broken"


def _looping(calls: Counter[str]) -> Any:
    def spin(state: State) -> dict[str, Any]:
        calls["spin"] += 1
        return {"count": state.count + 1}

    b = StateGraph(State).add_node(spin).add_edge(START, "spin")
    b.add_conditional_edges("spin", lambda s: END if s.count >= 3 else "spin")
    return b.compile()


def test_recursion_limit_raises() -> None:
    calls: Counter[str] = Counter()
    graph = _looping(calls)
    with pytest.raises(RecursionLimitError):
        graph.invoke({"count": -100}, recursion_limit=5)
    assert calls["spin"] == 5


def test_recursion_limit_allows_exactly_that_many_steps() -> None:
    calls: Counter[str] = Counter()
    result = _looping(calls).invoke({"count": 0}, recursion_limit=3)
    assert result.state.count == 3
    assert calls["spin"] == 3


def test_recursion_limit_default_is_100() -> None:
    calls: Counter[str] = Counter()
    with pytest.raises(RecursionLimitError):
        _looping(calls).invoke({"count": -1000})
    assert calls["spin"] == 100


@pytest.mark.anyio
async def test_invoke_inside_a_running_event_loop_raises_runtime_error() -> None:
    calls: Counter[str] = Counter()
    graph = chain("a", calls=calls).compile()
    with pytest.raises(RuntimeError, match="ainvoke"):
        graph.invoke({})
    with pytest.raises(RuntimeError):
        list(graph.stream({}))
    assert calls["a"] == 0
    result = await graph.ainvoke({})
    assert result.state.log == ["a"]
    assert calls["a"] == 1


# -- thread ids ---------------------------------------------------------------------------------
def test_thread_id_is_required_with_a_checkpointer() -> None:
    calls: Counter[str] = Counter()
    graph = chain("a", calls=calls).compile(checkpointer=MemoryCheckpointer())
    with pytest.raises(GraphflowError, match="thread_id"):
        graph.invoke({})
    assert calls["a"] == 0
    assert graph.list_threads() == []


def test_stream_without_thread_id_raises_and_leaks_nothing() -> None:
    calls: Counter[str] = Counter()
    graph = chain("a", calls=calls).compile(checkpointer=MemoryCheckpointer())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(GraphflowError, match="thread_id"):
            list(graph.stream({}))
        gc.collect()
    assert calls["a"] == 0
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_without_checkpointer_a_thread_id_is_generated() -> None:
    graph = chain("a").compile()
    first = graph.invoke({})
    second = graph.invoke({})
    assert isinstance(first.thread_id, str) and first.thread_id
    assert first.thread_id != second.thread_id
    events = list(graph.stream({}))
    ids = {ev.thread_id for ev in events}
    assert len(ids) == 1
    assert next(iter(ids)) not in (first.thread_id, second.thread_id, "")


def test_given_thread_id_is_kept_without_checkpointer() -> None:
    assert chain("a").compile().invoke({}, thread_id="mine").thread_id == "mine"


def test_new_input_on_a_finished_thread_carries_state_over() -> None:
    def inc(state: State) -> dict[str, Any]:
        return {"count": state.count + 1, "log": [f"run{state.count}"]}

    graph = StateGraph(State).add_node(inc).add_edge(START, "inc").add_edge("inc", END)
    graph = graph.compile(checkpointer=MemoryCheckpointer())
    assert graph.invoke({"count": 0}, thread_id="t").state.count == 1
    result = graph.invoke({"log": ["again"]}, thread_id="t")
    assert result.state.count == 2
    assert result.state.log == ["run0", "again", "run1"]


# -- streaming ----------------------------------------------------------------------------------
def _emitting(calls: Counter[str] | None = None) -> Any:
    def a(state: State, ctx: NodeContext) -> dict[str, Any]:
        ctx.emit("progress", {"pct": 50})
        return {"log": ["a"], "count": 1}

    async def b(state: State) -> dict[str, Any]:
        return {"log": ["b"], "count": 2}

    b_ = StateGraph(State).add_node(a).add_node(b)
    b_.add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
    return b_.compile(checkpointer=MemoryCheckpointer())


def _terminal(events: list[Event]) -> list[Event]:
    return [e for e in events if e.type in ("done", "paused")]


def test_stream_values_mode() -> None:
    events = list(_emitting().stream({}, thread_id="v", mode="values"))
    types = [e.type for e in events]
    assert set(types) == {"values", "done"}
    assert types[-1] == "done"
    assert types.count("done") == 1
    values = [e.data for e in events if e.type == "values"]
    assert values == [State(log=["a"], count=1), State(log=["a", "b"], count=2)]
    assert events[-1].data == State(log=["a", "b"], count=2)
    assert {e.thread_id for e in events} == {"v"}


def test_stream_updates_mode() -> None:
    events = list(_emitting().stream({}, thread_id="u", mode="updates"))
    types = [e.type for e in events]
    assert set(types) == {"updates", "done"}
    assert _terminal(events) == [events[-1]]
    assert events[-1].type == "done"
    updates = [e.data for e in events if e.type == "updates"]
    assert updates == [{"a": {"log": ["a"], "count": 1}}, {"b": {"log": ["b"], "count": 2}}]


def test_stream_debug_mode() -> None:
    events = list(_emitting().stream({}, thread_id="d", mode="debug"))
    types = [e.type for e in events]
    assert set(types) <= {"task_start", "task_end", "updates", "checkpoint", "custom", "done"}
    assert {"task_start", "task_end", "updates", "checkpoint", "custom"} <= set(types)
    assert types[-1] == "done"
    assert types.count("done") == 1
    starts = [e.node for e in events if e.type == "task_start"]
    ends = [e.node for e in events if e.type == "task_end"]
    assert starts == ["a", "b"]
    assert ends == ["a", "b"]
    custom = [e for e in events if e.type == "custom"]
    assert len(custom) == 1
    assert custom[0].node == "a"
    assert custom[0].data == {"name": "progress", "data": {"pct": 50}}
    # Each task starts before it ends, and "a" ends before "b" starts.
    assert types.index("task_end") < [i for i, t in enumerate(types) if t == "task_start"][1]


def test_stream_custom_events_only_in_debug_mode() -> None:
    for mode in ("values", "updates"):
        events = list(_emitting().stream({}, thread_id="c", mode=mode))
        assert [e for e in events if e.type == "custom"] == []


def test_stream_rejects_unknown_mode() -> None:
    with pytest.raises(GraphflowError, match="mode"):
        list(_emitting().stream({}, thread_id="x", mode="everything"))


def _pausing() -> Any:
    def ask(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "ok?"})
        return {"log": [f"ask:{answer}"]}

    b = StateGraph(State).add_node("first", logger("first")).add_node(ask)
    b.add_edge(START, "first").add_edge("first", "ask").add_edge("ask", END)
    return b.compile(checkpointer=MemoryCheckpointer())


@pytest.mark.parametrize("mode", ["values", "updates", "debug"])
def test_stream_pause_events_then_exactly_one_paused_event(mode: str) -> None:
    graph = _pausing()
    events = list(graph.stream({}, thread_id="p", mode=mode))
    pauses = [e for e in events if e.type == "pause"]
    assert len(pauses) == 1
    pause = pauses[0].data
    assert isinstance(pause, Pause)
    assert pause.kind == "interrupt"
    assert pause.node == "ask"
    assert pause.value == {"question": "ok?"}
    assert pauses[0].node == "ask"
    assert graph.pending_pauses("p") == [pause]
    assert [e.type for e in _terminal(events)] == ["paused"]
    assert events[-1].type == "paused"
    assert "done" not in [e.type for e in events]

    resumed = list(graph.stream(None, thread_id="p", mode=mode, resume="yes"))
    assert [e.type for e in _terminal(resumed)] == ["done"]
    assert resumed[-1].type == "done"
    assert [e for e in resumed if e.type == "pause"] == []
    assert graph.get_state("p").values.log == ["first", "ask:yes"]


@pytest.mark.anyio
async def test_ainvoke_and_astream() -> None:
    graph = _emitting()
    result = await graph.ainvoke({}, thread_id="async1")
    assert result.status == "done"
    assert result.state == State(log=["a", "b"], count=2)

    events = [e async for e in graph.astream({}, thread_id="async2", mode="updates")]
    assert [e.type for e in events] == ["updates", "updates", "done"]

    graph = _pausing()
    events = [e async for e in graph.astream({}, thread_id="ap", mode="debug")]
    assert [e.type for e in _terminal(events)] == ["paused"]
    assert [e.data.node for e in events if e.type == "pause"] == ["ask"]
    result = await graph.ainvoke(None, thread_id="ap", resume="fine")
    assert result.status == "done"
    assert result.state.log == ["first", "ask:fine"]


@pytest.mark.anyio
async def test_astream_raises_node_error_after_events() -> None:
    def explode(state: State) -> dict[str, Any]:
        raise KeyError("k")

    b = StateGraph(State).add_node("first", logger("first")).add_node(explode)
    b.add_edge(START, "first").add_edge("first", "explode").add_edge("explode", END)
    graph = b.compile()
    got: list[str] = []
    with pytest.raises(NodeError) as info:
        async for ev in graph.astream({}, mode="updates"):
            got.append(ev.type)
    assert info.value.node == "explode"
    assert got == ["updates"]


# -- errors with a checkpointer -----------------------------------------------------------------
def _failing_graphs() -> dict[str, tuple[Any, type[Exception], dict[str, Any]]]:
    def explode(state: State) -> dict[str, Any]:
        raise ValueError("boom")

    def bad_key(state: State) -> dict[str, Any]:
        return {"nope": 1}

    def spin(state: State) -> dict[str, Any]:
        return {"count": state.count + 1}

    def one(name: str, fn: Any) -> StateGraph:
        return StateGraph(State).add_node(name, fn).add_edge(START, name).add_edge(name, END)

    looping = StateGraph(State).add_node(spin).add_edge(START, "spin")
    looping.add_conditional_edges("spin", lambda s: "spin")
    return {
        "node_error": (one("explode", explode), NodeError, {}),
        "invalid_update": (one("bad_key", bad_key), InvalidUpdateError, {}),
        "recursion_limit": (looping, RecursionLimitError, {"recursion_limit": 3}),
    }


@pytest.mark.parametrize("case", ["node_error", "invalid_update", "recursion_limit"])
@pytest.mark.parametrize(
    "with_checkpointer",
    [
        False,
        True,
    ],
    ids=["no-checkpointer", "memory-checkpointer"],
)
def test_errors_are_raised_as_documented(case: str, with_checkpointer: bool) -> None:
    builder, error, kwargs = _failing_graphs()[case]
    graph = builder.compile(checkpointer=MemoryCheckpointer() if with_checkpointer else None)
    with pytest.raises(error):
        graph.invoke({}, thread_id="t", **kwargs)
    with pytest.raises(error):
        list(graph.stream({}, thread_id="t2", mode="updates", **kwargs))


@pytest.mark.parametrize("mode", ["updates", "debug"])
def test_every_task_of_a_fanned_out_node_reaches_the_updates_stream(mode: str) -> None:
    class Fan(TypedDict, total=False):
        items: Annotated[list[int], append]
        tag: str

    b = StateGraph(Fan)
    b.add_node("split", lambda s: {})
    b.add_node("work", lambda s: {"items": [s["n"] * 10]})
    b.add_node("other", lambda s: {"tag": "x"})
    b.add_edge(START, "split")
    b.add_conditional_edges(
        "split", lambda s: [Send("work", {"n": n}) for n in (1, 2, 3)] + ["other"]
    )
    b.add_edge("work", END).add_edge("other", END)
    events = [e for e in b.compile().stream({}, mode=mode) if e.type == "updates"]
    step = [e.data for e in events if e.step == events[-1].step]
    assert step == [
        {"other": {"tag": "x"}, "work": {"items": [10]}},
        {"work": {"items": [20]}},
        {"work": {"items": [30]}},
    ]
    assert len({e.step for e in events}) == 2  # split's step, then the fan-out's


@pytest.mark.parametrize("siblings", [False, True])
def test_a_node_that_calls_sys_exit_fails_as_a_node_error(siblings: bool) -> None:
    """Alone (run in place) or beside a sibling (run in the node pool): ``sys.exit()`` in a
    node is its failure, a ``NodeError``, never the end of the process."""
    import sys

    from graphflow import NodeError
    from graphflow.errors import NodeExitError

    class Q(TypedDict, total=False):
        n: int
        m: int

    def quits(state: Q) -> dict[str, int]:
        sys.exit(3)

    b = StateGraph(Q).add_node("quits", quits).add_edge(START, "quits").add_edge("quits", END)
    if siblings:
        b.add_node("other", lambda s: {"m": 1}).add_edge(START, "other").add_edge("other", END)
    with pytest.raises(NodeError, match=r"sys\.exit\(3\)") as e:
        b.compile().invoke({"n": 0})
    assert isinstance(e.value.error, NodeExitError) and e.value.error.code == 3


@pytest.mark.parametrize("siblings", [False, True])
def test_a_keyboard_interrupt_from_node_code_is_a_failure_unless_it_may_be_ctrl_c(
    siblings: bool,
) -> None:
    """On the main thread with Python's own SIGINT handler, a ``KeyboardInterrupt`` may be
    the user's Ctrl-C: it stops the program, as it would without graphflow. Raised in a
    worker thread (the node pool, the async API), or while the process handles SIGINT
    itself (a worker), it cannot be: it fails the task, as ``sys.exit()`` does."""
    import signal

    from graphflow import NodeError
    from graphflow.errors import NodeExitError

    class Q(TypedDict, total=False):
        n: int
        m: int

    def breaks(state: Q) -> dict[str, int]:
        raise KeyboardInterrupt

    b = StateGraph(Q).add_node("breaks", breaks).add_edge(START, "breaks")
    b.add_edge("breaks", END)
    if siblings:
        b.add_node("other", lambda s: {"m": 1}).add_edge(START, "other").add_edge("other", END)
    graph = b.compile()
    if not siblings:  # run in place, on the main thread: may be Ctrl-C
        with pytest.raises(KeyboardInterrupt):
            graph.invoke({"n": 0})
    else:  # in the node pool's thread
        with pytest.raises(NodeError, match="raised KeyboardInterrupt"):
            graph.invoke({"n": 0})
    with pytest.raises(NodeError, match="raised KeyboardInterrupt") as e:  # a worker thread
        anyio.run(graph.ainvoke, {"n": 0})
    assert isinstance(e.value.error, NodeExitError)
    before = signal.signal(signal.SIGINT, lambda *_: None)  # the process handles SIGINT
    try:
        with pytest.raises(NodeError, match="raised KeyboardInterrupt"):
            graph.invoke({"n": 0})
    finally:
        signal.signal(signal.SIGINT, before)


# -- a router that raises ------------------------------------------------------------------------
def test_a_router_that_raises_is_a_node_error_naming_its_edge_and_the_node_reruns() -> None:
    calls: list[int] = []
    broken = {"on": True}

    def a(state: State) -> dict[str, Any]:
        calls.append(1)
        return {"log": ["a"]}

    def router(state: Any) -> str:
        if broken["on"]:
            return {"x": 1}["missing"]  # type: ignore[no-any-return]
        return END

    b = StateGraph(State).add_node("a", a).add_edge(START, "a").add_conditional_edges("a", router)
    with pytest.raises(NodeError) as info:
        b.compile().invoke({})
    assert info.value.node == "a" and isinstance(info.value.error, KeyError)
    assert str(info.value).startswith(
        "the router of the conditional edge from 'a' raised KeyError: 'missing'"
    )
    graph = b.compile(checkpointer=MemoryCheckpointer())
    with pytest.raises(NodeError, match="in thread 't'; fix the cause and run invoke"):
        graph.invoke({}, thread_id="t")
    assert graph.get_state("t").next == ("a",)  # type: ignore[union-attr]
    broken["on"] = False
    assert graph.invoke(None, thread_id="t").state.log == ["a"]  # a's writes applied once
    assert len(calls) == 3
    start = StateGraph(State).add_node("a", a).add_edge("a", END)
    start.add_conditional_edges(START, lambda s: 1 // 0, ["a"])
    with pytest.raises(NodeError, match="the router of the conditional edge from START raised"):
        start.compile().invoke({})
    # START's routers run before a new input is stored: no retry of a thread is advised.
    with pytest.raises(NodeError) as info:
        start.compile(checkpointer=MemoryCheckpointer()).invoke({}, thread_id="s")
    assert info.value.thread_id is None and "run the graph again" in str(info.value)


@pytest.mark.parametrize("exit", [SystemExit(3), KeyboardInterrupt()])
def test_a_router_that_exits_fails_the_thread_as_a_node_would(exit: BaseException) -> None:
    from graphflow.errors import NodeExitError

    def router(state: Any) -> str:
        raise exit

    b = StateGraph(State).add_node("a", lambda s: {"log": ["a"]}).add_edge(START, "a")
    graph = b.add_conditional_edges("a", router, [END]).compile(checkpointer=MemoryCheckpointer())

    def in_a_thread() -> BaseException | None:  # (a KeyboardInterrupt there is no Ctrl-C)
        try:
            graph.invoke({}, thread_id="t")
        except BaseException as e:
            return e
        return None

    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        error = pool.submit(in_a_thread).result()
    assert isinstance(error, NodeError) and isinstance(error.error, NodeExitError), repr(error)
    assert str(error).startswith("the router of the conditional edge from 'a' raised")
    assert [t.status for t in graph.list_threads()] == ["failed"]  # not left "running"


def test_a_node_error_of_a_graph_a_node_invoked_names_this_node_and_thread() -> None:
    inner = StateGraph(State).add_node("inner_node", lambda s: 1 // 0)
    inner_graph = inner.add_edge(START, "inner_node").add_edge("inner_node", END).compile()
    b = StateGraph(State).add_node("outer", lambda s: inner_graph.invoke({}).state)
    graph = (
        b.add_edge(START, "outer").add_edge("outer", END).compile(checkpointer=MemoryCheckpointer())
    )
    with pytest.raises(NodeError) as info:
        graph.invoke({}, thread_id="e")
    assert info.value.node == "outer" and info.value.thread_id == "e"
    assert isinstance(info.value.error, NodeError) and info.value.error.node == "inner_node"
    assert "invoke(None, thread_id='e')" in str(info.value)
