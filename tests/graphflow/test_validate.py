"""``compile()`` validation: every ``GraphValidationError`` case of API.md, and drawing.

Each error test asserts that the message and ``.nodes`` name the offending nodes.
"""

import re
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from graphflow import END, START, GraphflowError, GraphValidationError, StateGraph, interrupt
from graphflow.reducers import append


class State(BaseModel):
    log: Annotated[list[str], append] = []


def node(name: str) -> Callable[[State], dict[str, Any]]:
    def fn(state: State) -> dict[str, Any]:
        return {"log": [name]}

    fn.__name__ = name
    return fn


def builder(*names: str) -> StateGraph:
    b = StateGraph(State)
    for n in names:
        b.add_node(n, node(n))
    return b


def compile_error(b: StateGraph, **kwargs: Any) -> GraphValidationError:
    with pytest.raises(GraphValidationError) as info:
        b.compile(**kwargs)
    return info.value


def assert_names(err: GraphValidationError, *names: str) -> None:
    msg = str(err)
    for n in names:
        assert n in err.nodes, (n, err.nodes)
        assert repr(n) in msg or n in msg, (n, msg)


def test_valid_graph_compiles() -> None:
    b = builder("a", "b").add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
    assert b.compile().invoke({}).state.log == ["a", "b"]


def test_graph_validation_error_is_a_graphflow_error() -> None:
    assert issubclass(GraphValidationError, GraphflowError)


# -- unknown nodes ---------------------------------------------------------------------------
def test_edge_to_unknown_node() -> None:
    b = builder("a").add_edge(START, "a").add_edge("a", END).add_edge("a", "ghost")
    err = compile_error(b)
    assert_names(err, "ghost")
    assert "unknown" in str(err)


def test_edge_from_unknown_node() -> None:
    b = builder("a").add_edge(START, "a").add_edge("a", END).add_edge("phantom", "a")
    err = compile_error(b)
    assert_names(err, "phantom")
    assert "a" not in err.nodes


def test_join_from_unknown_source() -> None:
    b = (
        builder("a", "b", "j")
        .add_edge(START, "a")
        .add_edge(START, "b")
        .add_edge(["a", "b", "nobody"], "j")
        .add_edge("j", END)
    )
    err = compile_error(b)
    assert_names(err, "nobody")


def test_a_join_of_no_node_or_of_start_is_refused() -> None:
    """``add_edge([], "j")`` ran ``j`` at every step until the recursion limit; a join that
    waits for START compiled and never ran its target."""
    empty = builder("a", "j").add_edge(START, "a").add_edge([], "j").add_edge("j", END)
    err = compile_error(empty)
    assert "join [] -> 'j' waits for no node" in str(err)
    start = builder("a", "j").add_edge(START, "a").add_edge([START, "a"], "j")
    err = compile_error(start.add_edge("j", END))
    assert "join [START, 'a'] -> 'j' waits for START" in str(err)


def test_join_to_unknown_target() -> None:
    b = (
        builder("a", "b")
        .add_edge(START, "a")
        .add_edge(START, "b")
        .add_edge(["a", "b"], "nowhere")
        .add_edge("a", END)
        .add_edge("b", END)
    )
    err = compile_error(b)
    assert_names(err, "nowhere")


def test_conditional_edge_from_unknown_node() -> None:
    b = builder("a").add_edge(START, "a").add_edge("a", END)
    b.add_conditional_edges("ghost_source", lambda s: END, [END])
    err = compile_error(b)
    assert_names(err, "ghost_source")


def test_destinations_naming_unknown_node() -> None:
    b = StateGraph(State).add_node("a", node("a"), destinations=("b", "missing"))
    b.add_node("b", node("b")).add_edge(START, "a").add_edge("b", END)
    err = compile_error(b)
    assert_names(err, "missing")


# -- START / reachability ---------------------------------------------------------------------
def test_no_edge_from_start() -> None:
    b = builder("a").add_edge("a", END)
    err = compile_error(b)
    assert "START" in str(err)
    assert START in err.nodes


def test_conditional_edge_from_start_counts_as_entry() -> None:
    b = builder("a", "b").add_edge("a", END).add_edge("b", END)
    b.add_conditional_edges(START, lambda s: "b", ["a", "b"])
    assert b.compile().invoke({}).state.log == ["b"]


def test_unreachable_node() -> None:
    b = (
        builder("a", "island", "islet")
        .add_edge(START, "a")
        .add_edge("a", END)
        .add_edge("island", "islet")
        .add_edge("islet", END)
    )
    err = compile_error(b)
    assert_names(err, "island", "islet")
    assert "unreachable" in str(err)
    assert "a" not in err.nodes


def test_node_that_cannot_reach_end() -> None:
    b = (
        builder("a", "loop1", "loop2")
        .add_edge(START, "a")
        .add_edge("a", END)
        .add_edge("a", "loop1")
        .add_edge("loop1", "loop2")
        .add_edge("loop2", "loop1")
    )
    err = compile_error(b)
    assert_names(err, "loop1", "loop2")
    assert "END" in str(err)
    assert "a" not in err.nodes


def test_dead_end_node() -> None:
    b = builder("a", "stuck").add_edge(START, "a").add_edge("a", "stuck").add_edge("a", END)
    err = compile_error(b)
    assert_names(err, "stuck")
    assert "dead end" in str(err)
    assert "a" not in err.nodes


def test_several_dead_ends_are_all_named() -> None:
    b = (
        builder("a", "d1", "d2")
        .add_edge(START, "a")
        .add_edge("a", "d1")
        .add_edge("a", "d2")
        .add_edge("a", END)
    )
    err = compile_error(b)
    assert_names(err, "d1", "d2")


def test_node_with_declared_destinations_is_not_a_dead_end() -> None:
    b = StateGraph(State).add_node("a", node("a"), destinations=("b", END))
    b.add_node("b", node("b")).add_edge(START, "a").add_edge("b", END)
    graph = b.compile()
    # "a" returns a plain update; with no static edges it simply ends the run.
    assert graph.invoke({}).state.log == ["a"]


# -- path maps --------------------------------------------------------------------------------
def test_path_map_dict_target_not_a_node() -> None:
    b = builder("a", "b").add_edge(START, "a").add_edge("b", END)
    b.add_conditional_edges("a", lambda s: "yes", {"yes": "b", "no": "not_a_node"})
    err = compile_error(b)
    assert_names(err, "not_a_node")


def test_path_map_list_target_not_a_node() -> None:
    b = builder("a", "b").add_edge(START, "a").add_edge("b", END)
    b.add_conditional_edges("a", lambda s: "b", ["b", "bogus"])
    err = compile_error(b)
    assert_names(err, "bogus")


def test_path_map_targets_count_for_reachability() -> None:
    # "c" is only reachable through the path map; without it "c" would be unreachable.
    b = builder("a", "b", "c").add_edge(START, "a").add_edge("b", END)
    b.add_conditional_edges("a", lambda s: "x", {"x": "b"})
    b.add_edge("c", END)
    err = compile_error(b)
    assert_names(err, "c")
    assert "unreachable" in str(err)


def test_conditional_edge_without_path_map_makes_no_reachability_errors() -> None:
    # "b" and "c" are entered only through a conditional edge with no path map, and "a"
    # leaves only through it: no unreachable and no dead-end error.
    b = builder("a", "b", "c").add_edge(START, "a").add_edge("b", END).add_edge("c", END)
    b.add_conditional_edges("a", lambda s: "c")
    graph = b.compile()
    assert graph.invoke({}).state.log == ["a", "c"]


def test_conditional_edge_without_path_map_leaves_other_errors() -> None:
    b = builder("a", "b").add_edge(START, "a").add_edge("b", "ghost")
    b.add_conditional_edges("a", lambda s: "b")
    err = compile_error(b)
    assert_names(err, "ghost")


# -- names ------------------------------------------------------------------------------------
def test_duplicate_node_name() -> None:
    b = builder("a", "twin").add_edge(START, "a").add_edge("a", "twin").add_edge("twin", END)
    b.add_node("twin", node("other"))
    err = compile_error(b)
    assert_names(err, "twin")
    assert "duplicate" in str(err)


def test_duplicate_name_from_function_name() -> None:
    def twin(state: State) -> None:
        return None

    b = StateGraph(State).add_node(twin).add_node(twin)
    b.add_edge(START, "twin").add_edge("twin", END)
    err = compile_error(b)
    assert_names(err, "twin")


@pytest.mark.parametrize("reserved", [START, END, "a.b", "a:b"])
def test_reserved_node_names(reserved: str) -> None:
    b = builder("ok").add_edge(START, "ok").add_edge("ok", END)
    b.add_node(reserved, node("x"))
    err = compile_error(b)
    assert reserved in err.nodes
    assert "reserved" in str(err)
    assert repr(reserved) in str(err)


def test_interrupt_before_names_unknown_node() -> None:
    b = builder("a").add_edge(START, "a").add_edge("a", END)
    err = compile_error(b, interrupt_before=["a", "not_there"])
    assert_names(err, "not_there")
    assert "a" not in err.nodes


def test_interrupt_after_names_unknown_node() -> None:
    b = builder("a").add_edge(START, "a").add_edge("a", END)
    err = compile_error(b, interrupt_after=["nope"])
    assert_names(err, "nope")


def test_several_problems_in_one_error() -> None:
    b = builder("a", "b").add_edge(START, "a").add_edge("a", END).add_edge("a", "x1")
    b.add_edge("x2", "b").add_edge("b", END)
    err = compile_error(b)
    assert_names(err, "x1", "x2")


# -- drawing ----------------------------------------------------------------------------------
_EDGE = re.compile(r"^\s*(\S+)\s*(?:--+>|==+>|-\.+->)\s*(?:\|[^|]*\|\s*)?(\S+)\s*$")


def _mermaid_edges(text: str) -> set[tuple[str, str]]:
    def norm(ident: str) -> str:
        low = ident.lower()
        if "start" in low:
            return START
        if "end" in low:
            return END
        return ident

    edges = set()
    for line in text.splitlines():
        m = _EDGE.match(line)
        if m:
            edges.add((norm(m.group(1)), norm(m.group(2))))
    return edges


def test_draw_mermaid_contains_every_node_and_edge() -> None:
    b = (
        builder("fetch", "left", "right", "join", "check", "done")
        .add_edge(START, "fetch")
        .add_edge("fetch", "left")
        .add_edge("fetch", "right")
        .add_edge(["left", "right"], "join")
        .add_edge("join", "check")
        .add_edge("done", END)
    )
    b.add_conditional_edges("check", lambda s: "ok", {"ok": "done", "retry": "fetch"})
    text = b.compile().draw_mermaid()
    assert text.lstrip().startswith(("flowchart", "graph"))
    for name in ("fetch", "left", "right", "join", "check", "done"):
        assert re.search(rf"\b{name}\b", text), name
    assert _mermaid_edges(text) == {
        (START, "fetch"),
        ("fetch", "left"),
        ("fetch", "right"),
        ("left", "join"),
        ("right", "join"),
        ("join", "check"),
        ("check", "done"),
        ("check", "fetch"),
        ("done", END),
    }


def test_draw_mermaid_shows_declared_destinations() -> None:
    b = StateGraph(State).add_node("router", node("router"), destinations=("x", "y"))
    b.add_node("x", node("x")).add_node("y", node("y"))
    b.add_edge(START, "router").add_edge("x", END).add_edge("y", END)
    edges = _mermaid_edges(b.compile().draw_mermaid())
    assert ("router", "x") in edges
    assert ("router", "y") in edges


# -- messages ------------------------------------------------------------------------------------
def test_an_edge_from_end_says_end() -> None:
    b = builder("a").add_edge(START, "a").add_edge("a", END).add_edge(END, "a")
    msg = str(compile_error(b))
    assert msg == "edge END -> 'a': END cannot be the source of an edge (a run stops at END)"
    assert "__end__" not in msg


def test_an_edge_to_start_says_start() -> None:
    b = builder("a").add_edge(START, "a").add_edge("a", END).add_edge("a", START)
    msg = str(compile_error(b))
    assert msg == "edge 'a' -> START: START cannot be the target of an edge", msg
    b = builder("a").add_edge(START, "a").add_edge("a", END)
    b.add_conditional_edges("a", lambda s: END, {"x": START, "y": END})
    msg = str(compile_error(b))
    assert "path map of conditional edge from 'a' names START" in msg and "__start__" not in msg


def test_a_reserved_node_name_is_the_only_problem_reported() -> None:
    b = builder("ok").add_node("x.y", node("x")).add_edge(START, "ok").add_edge("ok", "x.y")
    b.add_edge("x.y", END)
    err = compile_error(b)
    assert "unknown" not in str(err), str(err)
    assert str(err) == (
        "reserved node name 'x.y': START, END, the empty name and names containing '.' or "
        "':' are reserved"
    )
    assert err.nodes == ("x.y",)


# -- pauses that nothing could answer ----------------------------------------------------------
def _asking() -> StateGraph:
    def ask(state: State) -> dict[str, Any]:
        return {"log": [str(interrupt("ok?"))]}

    return StateGraph(State).add_node(ask).add_edge(START, "ask").add_edge("ask", END)


@pytest.mark.parametrize("how", ["interrupt", "interrupt_before", "interrupt_after"])
def test_a_graph_whose_nodes_can_pause_needs_a_checkpointer_to_run(how: str) -> None:
    from checkpoints import MemoryCheckpointer

    if how == "interrupt":
        b, opts = _asking(), {}
    else:
        b = builder("a").add_edge(START, "a").add_edge("a", END)
        opts = {how: ["a"]}
    graph = b.compile(**opts)  # compiles: it may become a subgraph of a graph that has one
    for run in (lambda: graph.invoke({}), lambda: list(graph.stream({}))):
        with pytest.raises(GraphValidationError) as info:
            run()
        assert info.value.nodes == (("ask",) if how == "interrupt" else ("a",))
        assert "can pause" in str(info.value) and "compile(checkpointer=...)" in str(info.value)
    # The same graph nested in a graph with a checkpointer pauses and resumes.
    parent = (
        StateGraph(State)
        .add_node("child", graph)
        .add_edge(START, "child")
        .add_edge("child", END)
        .compile(checkpointer=MemoryCheckpointer())
    )
    assert parent.invoke({}, thread_id="t").status == "paused"
    assert parent.invoke(None, thread_id="t", resume="yes").status == "done"
    # and with its own checkpointer it runs as the root.
    own = b.compile(checkpointer=MemoryCheckpointer(), **opts)
    assert own.invoke({}, thread_id="t").status == "paused"


def _ask_in_a_helper() -> str:
    return str(interrupt("ok?"))


def test_an_interrupt_compile_cannot_see_is_refused_when_it_fires_without_a_checkpointer() -> None:
    # The node's own code does not name interrupt (a helper calls it): compile cannot tell.
    b = StateGraph(State).add_node("ask", lambda s: {"log": [_ask_in_a_helper()]})
    graph = b.add_edge(START, "ask").add_edge("ask", END).compile()
    assert graph.spec.pausing == ()
    for run in (lambda: graph.invoke({}), lambda: list(graph.stream({}))):
        with pytest.raises(GraphValidationError) as info:
            run()
        assert info.value.nodes == ("ask",)
        assert "paused" in str(info.value) and "compile(checkpointer=...)" in str(info.value)


def test_a_graph_that_cannot_pause_runs_without_a_checkpointer() -> None:
    b = builder("a").add_edge(START, "a").add_edge("a", END)
    assert b.compile().invoke({}).state.log == ["a"]


def test_a_router_that_cannot_be_called_with_the_state_is_refused() -> None:
    b = builder("a")
    with pytest.raises(GraphValidationError) as info:
        b.add_conditional_edges("a", lambda state, other: END)
    assert "conditional edge from 'a'" in str(info.value) and "router(state)" in str(info.value)
    assert info.value.nodes == ("a",)
    b.add_conditional_edges("a", lambda state: END)  # accepted


def test_draw_mermaid_marks_an_open_conditional_edge_and_draws_subgraph_blocks() -> None:
    child = builder("c").add_edge(START, "c").add_edge("c", END).compile()
    b = builder("a", "b").add_node("sub", child).add_edge(START, "a")
    b.add_conditional_edges("a", lambda s: "b")  # no path map: it may lead anywhere
    b.add_edge("b", END).add_edge("sub", END)
    expected = """\
flowchart TD
    __start__([START])
    a["a"]
    b["b"]
    subgraph sub["sub"]
        sub___start__([START])
        sub_c["c"]
        sub___end__([END])
        sub___start__ --> sub_c
        sub_c --> sub___end__
    end
    __end__([END])
    a_any(("?"))
    __start__ --> a
    a -.-> a_any
    b --> __end__
    sub --> __end__
"""
    graph = b.compile()
    assert graph.draw_mermaid() == expected
    assert graph.draw_mermaid() == expected  # deterministic


def test_draw_mermaid_ids_stay_unique() -> None:
    child = builder("x").add_edge(START, "x").add_edge("x", END).compile()
    b = builder("sub_x", "a-b", "a_b").add_node("sub", child)
    b.add_edge(START, "sub_x").add_edge("sub_x", "a-b").add_edge("a-b", "a_b")
    b.add_edge("a_b", "sub").add_edge("sub", END)
    text = b.compile().draw_mermaid()
    declared = re.findall(r"^\s*(?:subgraph )?(\w+)[\[(]", text, re.M)
    # START, 3 nodes, END, and the block with its START, x and END
    assert len(declared) == len(set(declared)) == 9, text
    assert "sub_x_2" in text and "a_b_2" in text


@pytest.mark.parametrize("name", ["evil\x1b[31mnode", "a\nb", "x\u202ey", "tab\there"])
def test_a_node_name_with_a_control_character_is_refused(name: str) -> None:
    """Node names are printed by the CLI (run, pauses, draw) and stored in pause ids: an
    escape sequence or a line break in one would drive the terminal (an outside finding)."""
    b = builder("ok").add_node(name, node("x")).add_edge(START, "ok").add_edge("ok", name)
    b.add_edge(name, END)
    msg = str(compile_error(b))
    assert "holds a control character" in msg and "unknown" not in msg, msg


# -- schemas graphflow does not take -------------------------------------------------------------
def test_a_dataclass_state_schema_is_a_graph_validation_error() -> None:
    import dataclasses

    @dataclasses.dataclass
    class D:
        x: int = 0

    with pytest.raises(GraphValidationError, match="not a dataclass; declare the state"):
        StateGraph(D)
    with pytest.raises(GraphValidationError, match="not <class 'int'>"):
        StateGraph(int)


@pytest.mark.parametrize(
    "option", ["input_schema", "output_schema", "context_schema", "config_schema"]
)
def test_langgraphs_extra_schemas_are_refused_by_name(option: str) -> None:
    class Empty(type):  # a class that is falsy is given all the same
        def __len__(cls) -> int:
            return 0

    for given in (State, Empty("X", (), {})):
        with pytest.raises(GraphValidationError) as info:
            StateGraph(State, **{option: given})
        assert f"StateGraph({option}=...) is not supported" in str(info.value)
