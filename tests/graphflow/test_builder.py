"""``StateGraph``: builder methods, chaining, node names, state schemas, reducers, defaults.

API.md, "Building a graph".
"""

import operator
from typing import Annotated, Any, TypedDict

import pytest
from pydantic import BaseModel, Field

from graphflow import END, START, CompiledGraph, GraphValidationError, NodeContext, StateGraph
from graphflow.reducers import append, merge


class State(BaseModel):
    log: Annotated[list[str], append] = []
    count: int = 0


class TDState(TypedDict):
    log: Annotated[list[str], append]
    count: int


class Reduced(BaseModel):
    items: Annotated[list[str], append] = []
    meta: Annotated[dict[str, Any], merge] = {}
    total: Annotated[list[int], operator.add] = []
    score: Annotated[int, operator.add] = 0
    last: str = ""


def _names_in_updates(graph: CompiledGraph, inp: Any) -> list[str]:
    """Node names, in step order, from the ``updates`` events of one run."""
    names: list[str] = []
    for ev in graph.stream(inp, mode="updates"):
        if ev.type == "updates":
            names += list(ev.data)
    return names


# -- builder methods --------------------------------------------------------------------------
def test_every_builder_method_returns_the_builder() -> None:
    b = StateGraph(State)

    def n(state: State) -> None:
        return None

    assert b.add_node("a", n) is b
    assert b.add_node("b", n) is b
    assert b.add_edge(START, "a") is b
    assert b.add_conditional_edges("a", lambda s: "b", ["b"]) is b
    assert b.add_edge("b", END) is b
    assert b.set_entry_point("a") is b
    assert b.set_finish_point("b") is b
    assert isinstance(b.compile(), CompiledGraph)


def test_chained_build_runs_the_declared_graph() -> None:
    def a(state: State) -> dict[str, Any]:
        return {"log": ["a"], "count": state.count + 1}

    def b(state: State) -> dict[str, Any]:
        return {"log": ["b"], "count": state.count * 10}

    graph = (
        StateGraph(State)
        .add_node("a", a)
        .add_node("b", b)
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile()
    )
    result = graph.invoke({"count": 2})
    assert result.status == "done"
    assert result.state.log == ["a", "b"]
    assert result.state.count == 30


def test_set_entry_and_finish_point_are_edges_from_start_and_to_end() -> None:
    def only(state: State) -> dict[str, Any]:
        return {"log": ["only"]}

    graph = StateGraph(State).add_node(only).set_entry_point("only").set_finish_point("only")
    result = graph.compile().invoke({})
    assert result.state.log == ["only"]


# -- node names -------------------------------------------------------------------------------
def test_node_name_defaults_to_function_name() -> None:
    seen: list[str] = []

    def first_step(state: State, ctx: NodeContext) -> dict[str, Any]:
        seen.append(ctx.node)
        return {"log": ["1"]}

    async def second_step(state: State) -> dict[str, Any]:
        return {"log": ["2"]}

    graph = (
        StateGraph(State)
        .add_node(first_step)
        .add_node(second_step)
        .add_edge(START, "first_step")
        .add_edge("first_step", "second_step")
        .add_edge("second_step", END)
        .compile()
    )
    assert _names_in_updates(graph, {}) == ["first_step", "second_step"]
    assert seen == ["first_step"]
    mermaid = graph.draw_mermaid()
    assert "first_step" in mermaid and "second_step" in mermaid


def test_explicit_name_overrides_function_name() -> None:
    def impl(state: State) -> dict[str, Any]:
        return {"log": ["impl"]}

    graph = StateGraph(State).add_node("nice", impl).add_edge(START, "nice")
    graph.add_edge("nice", END)
    assert _names_in_updates(graph.compile(), {}) == ["nice"]


def test_same_function_under_two_names_runs_twice() -> None:
    calls: list[str] = []

    def shared(state: State, ctx: NodeContext) -> dict[str, Any]:
        calls.append(ctx.node)
        return {"log": [ctx.node]}

    graph = (
        StateGraph(State)
        .add_node("x", shared)
        .add_node("y", shared)
        .add_edge(START, "x")
        .add_edge("x", "y")
        .add_edge("y", END)
        .compile()
    )
    assert graph.invoke({}).state.log == ["x", "y"]
    assert calls == ["x", "y"]


# -- state schemas ----------------------------------------------------------------------------
def test_pydantic_state_nodes_get_model_instances_and_result_is_a_model() -> None:
    seen: list[Any] = []

    def a(state: State) -> dict[str, Any]:
        seen.append(state)
        return {"count": state.count + 1}

    graph = StateGraph(State).add_node(a).add_edge(START, "a").add_edge("a", END).compile()
    result = graph.invoke({"count": 41})
    assert len(seen) == 1
    assert isinstance(seen[0], State)
    assert seen[0].count == 41
    assert seen[0].log == []
    assert isinstance(result.state, State)
    assert result.state == State(log=[], count=42)


def test_pydantic_input_may_be_a_model_instance() -> None:
    def a(state: State) -> dict[str, Any]:
        return {"log": [f"count={state.count}"]}

    graph = StateGraph(State).add_node(a).add_edge(START, "a").add_edge("a", END).compile()
    result = graph.invoke(State(count=7))
    assert result.state.log == ["count=7"]
    assert result.state.count == 7


def test_node_may_return_a_partial_model_instance() -> None:
    def a(state: State) -> State:
        return State(count=9)

    graph = StateGraph(State).add_node(a).add_edge(START, "a").add_edge("a", END).compile()
    result = graph.invoke({"log": ["in"], "count": 1})
    assert result.state.count == 9
    assert result.state.log == ["in"]


def test_typeddict_state_nodes_get_dicts_and_result_is_a_dict() -> None:
    seen: list[Any] = []

    def a(state: TDState) -> dict[str, Any]:
        seen.append(dict(state))
        return {"log": ["a"], "count": state["count"] + 1}

    def b(state: TDState) -> dict[str, Any]:
        seen.append(dict(state))
        return {"log": ["b"]}

    graph = (
        StateGraph(TDState)
        .add_node(a)
        .add_node(b)
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile()
    )
    result = graph.invoke({"count": 1})
    assert isinstance(result.state, dict)
    assert result.state == {"log": ["a", "b"], "count": 2}
    assert seen == [{"log": [], "count": 1}, {"log": ["a"], "count": 2}]


def test_typeddict_reducer_key_starts_empty_without_input() -> None:
    def a(state: TDState) -> dict[str, Any]:
        return {"log": ["first"]}

    graph = StateGraph(TDState).add_node(a).add_edge(START, "a").add_edge("a", END).compile()
    result = graph.invoke({"count": 0})
    assert result.state["log"] == ["first"]


def test_rejects_a_schema_that_is_neither_pydantic_nor_typeddict() -> None:
    class Plain:
        x: int = 0

    with pytest.raises(GraphValidationError, match="Plain"):
        StateGraph(Plain)


# -- defaults ---------------------------------------------------------------------------------
def test_pydantic_defaults_and_default_factories_fill_missing_keys() -> None:
    class WithDefaults(BaseModel):
        name: str = "anon"
        tags: list[str] = Field(default_factory=lambda: ["t0"])
        log: Annotated[list[str], append] = []

    seen: list[tuple[str, list[str], list[str]]] = []

    def a(state: WithDefaults) -> dict[str, Any]:
        seen.append((state.name, list(state.tags), list(state.log)))
        return {"log": ["a"]}

    graph = StateGraph(WithDefaults).add_node(a).add_edge(START, "a").add_edge("a", END).compile()
    result = graph.invoke({})
    assert seen == [("anon", ["t0"], [])]
    assert result.state == WithDefaults(name="anon", tags=["t0"], log=["a"])


def test_input_overrides_defaults() -> None:
    def a(state: State) -> None:
        return None

    graph = StateGraph(State).add_node(a).add_edge(START, "a").add_edge("a", END).compile()
    result = graph.invoke({"count": 5, "log": ["x", "y"]})
    assert result.state == State(log=["x", "y"], count=5)


def test_defaults_are_not_shared_between_runs() -> None:
    def a(state: State) -> dict[str, Any]:
        return {"log": ["a"]}

    graph = StateGraph(State).add_node(a).add_edge(START, "a").add_edge("a", END).compile()
    assert graph.invoke({}).state.log == ["a"]
    assert graph.invoke({}).state.log == ["a"]
    assert State().log == []


# -- reducers ---------------------------------------------------------------------------------
def test_key_without_reducer_is_last_write_wins() -> None:
    def a(state: Reduced) -> dict[str, Any]:
        return {"last": "a"}

    def b(state: Reduced) -> dict[str, Any]:
        return {"last": "b"}

    graph = (
        StateGraph(Reduced)
        .add_node(a)
        .add_node(b)
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile()
    )
    assert graph.invoke({"last": "input"}).state.last == "b"


def test_append_merge_and_operator_add_reduce_each_write() -> None:
    def a(state: Reduced) -> dict[str, Any]:
        return {"items": ["a1", "a2"], "meta": {"k": 1, "a": True}, "total": [1], "score": 5}

    def b(state: Reduced) -> dict[str, Any]:
        return {"items": "b", "meta": {"k": 2}, "total": [2, 3], "score": 10}

    graph = (
        StateGraph(Reduced)
        .add_node(a)
        .add_node(b)
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile()
    )
    result = graph.invoke({"items": ["in"], "meta": {"in": 0}, "total": [0], "score": 1})
    assert result.state.items == ["in", "a1", "a2", "b"]
    assert result.state.meta == {"in": 0, "k": 2, "a": True}
    assert result.state.total == [0, 1, 2, 3]
    assert result.state.score == 16


def test_parallel_writes_to_a_reducer_key_are_all_kept() -> None:
    def left(state: Reduced) -> dict[str, Any]:
        return {"items": ["left"], "meta": {"left": 1}, "score": 1}

    def right(state: Reduced) -> dict[str, Any]:
        return {"items": ["right"], "meta": {"right": 2}, "score": 2}

    graph = (
        StateGraph(Reduced)
        .add_node(left)
        .add_node(right)
        .add_edge(START, "left")
        .add_edge(START, "right")
        .add_edge("left", END)
        .add_edge("right", END)
        .compile()
    )
    result = graph.invoke({})
    assert result.state.items == ["left", "right"]
    assert result.state.meta == {"left": 1, "right": 2}
    assert result.state.score == 3


def test_append_reducer_function() -> None:
    current = ["x"]
    assert append(current, ["y", "z"]) == ["x", "y", "z"]
    assert append(current, ("t",)) == ["x", "t"]
    assert append(current, "single") == ["x", "single"]
    assert append(None, [1]) == [1]
    assert current == ["x"]  # never mutates the current value


def test_merge_reducer_function() -> None:
    current = {"a": 1, "b": 2}
    assert merge(current, {"b": 3, "c": 4}) == {"a": 1, "b": 3, "c": 4}
    assert merge(None, {"z": 0}) == {"z": 0}
    assert current == {"a": 1, "b": 2}


def test_custom_reducer_in_annotated() -> None:
    def keep_max(current: int | None, update: int) -> int:
        return update if current is None else max(current, update)

    class MaxState(BaseModel):
        best: Annotated[int, keep_max] = 0

    def a(state: MaxState) -> dict[str, Any]:
        return {"best": 3}

    def b(state: MaxState) -> dict[str, Any]:
        return {"best": 2}

    graph = (
        StateGraph(MaxState)
        .add_node(a)
        .add_node(b)
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile()
    )
    assert graph.invoke({"best": 1}).state.best == 3


def test_reading_a_functions_code_agrees_with_its_signature() -> None:
    """``_takes_ctx`` reads a plain function's code object instead of ``inspect.signature``
    (cheaper when a resuming process compiles its graph); both must agree."""
    import functools
    import inspect

    from graphflow.builder import _takes_ctx

    def by_signature(fn: Any) -> bool:
        params = inspect.signature(fn).parameters.values()
        required = [
            p for p in params
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]  # fmt: skip
        return len(required) >= 2 or any(p.name in ("ctx", "context") for p in params)

    def wrapped(fn: Any) -> Any:
        @functools.wraps(fn)
        def inner(*args: Any) -> Any:
            return fn(*args)

        return inner

    cases: list[Any] = [
        lambda s: 1, lambda s, c: 1, lambda s, c=None: 1, lambda s, ctx=None: 1,
        lambda s, *, ctx: 1, lambda s, *ctx: 1, lambda s, **context: 1, lambda s, /, c: 1,
        lambda s, /: 1, lambda *a: 1, lambda s, t, u=1: 1, lambda context: 1,
        wrapped(lambda s, c: 1), wrapped(lambda s: 1),
    ]  # fmt: skip
    for fn in cases:
        assert _takes_ctx(fn) == by_signature(fn), inspect.signature(fn)


# -- schema problems found when the builder is made -----------------------------------------
def test_a_reducer_with_the_wrong_arity_is_refused_naming_the_key() -> None:
    from graphflow import GraphValidationError

    class Bad(BaseModel):
        items: Annotated[list[str], lambda x: x] = []

    with pytest.raises(GraphValidationError) as info:
        StateGraph(Bad)
    msg = str(info.value)
    assert "state key 'items'" in msg and "reducer(current, update)" in msg, msg

    class BadTD(TypedDict):
        n: Annotated[int, lambda a, b, c: a]

    with pytest.raises(GraphValidationError, match="state key 'n'"):
        StateGraph(BadTD)

    def with_default(current: int, update: int, extra: int = 0) -> int:
        return current + update

    class Fine(BaseModel):
        n: Annotated[int, with_default] = 0
        m: Annotated[int, operator.add] = 0

    StateGraph(Fine)  # two arguments bind: accepted


def test_a_state_key_in_the_engines_namespace_is_refused() -> None:
    from graphflow import GraphValidationError

    reserved = TypedDict("reserved", {"__gf:x": int, "ok": int})  # type: ignore[misc]
    with pytest.raises(GraphValidationError) as info:
        StateGraph(reserved)
    assert "'__gf:x'" in str(info.value) and "reserved" in str(info.value)


# -- node signatures --------------------------------------------------------------------------
def test_a_node_that_cannot_be_called_with_the_state_is_refused_by_add_node() -> None:
    from graphflow import GraphValidationError

    def three(state: State, ctx: NodeContext, extra: int) -> None:
        return None

    class Callable3:
        def __call__(self, a: Any, b: Any, c: Any) -> None:
            return None

    def nothing() -> None:
        return None

    def kw_required(state: State, *, flag: bool) -> None:
        return None

    for fn in (three, Callable3(), nothing, kw_required, lambda s, *, ctx: None):
        with pytest.raises(GraphValidationError) as info:
            StateGraph(State).add_node("n", fn)
        msg = str(info.value)
        assert "node 'n'" in msg and "def node(state) or def node(state, ctx)" in msg, msg
        assert info.value.nodes == ("n",)
    assert "takes (state: " in str(_refusal(three)) and "extra: int)" in str(_refusal(three))
    # What can be called as fn(state) or fn(state, ctx) is accepted.
    for ok in (lambda s: None, lambda s, c: None, lambda s, c=None, d=1: None, lambda *a: None,
               lambda s, *, flag=True: None, print):  # fmt: skip
        StateGraph(State).add_node("n", ok)


def _refusal(fn: Any) -> Exception:
    with pytest.raises(Exception) as info:
        StateGraph(State).add_node("n", fn)
    return info.value
