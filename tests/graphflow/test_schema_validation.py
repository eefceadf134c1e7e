"""A pydantic state schema is enforced: node writes, inputs and ``update_state`` are validated
and coerced key by key, and stored values that do not fit it are refused when loaded.

A TypedDict schema is not validated (as in LangGraph).
"""

import dataclasses
import datetime
import operator
import uuid
from typing import Annotated, Any, TypedDict

import pytest
from pydantic import BaseModel, Field, ValidationInfo, field_validator

from checkpoints import MemoryCheckpointer, serde
from checkpoints.errors import CorruptCheckpointError
from graphflow import (
    END,
    START,
    CompiledGraph,
    InvalidUpdateError,
    StateGraph,
    interrupt,
)
from graphflow.reducers import append, merge
from graphflow.state import StateSchema


class Item(BaseModel):
    x: int


class S(BaseModel):
    a: int = 0
    name: str = ""
    items: Annotated[list[Item], append] = []
    total: Annotated[int, operator.add] = 0
    tags: Annotated[dict[str, int], merge] = {}
    positive: int = Field(default=1, gt=0)


def one_node(fn: Any, schema: type[Any] = S, **compile_kwargs: Any) -> CompiledGraph:
    return (
        StateGraph(schema)
        .add_node("n", fn)
        .add_edge(START, "n")
        .add_edge("n", END)
        .compile(**compile_kwargs)
    )


def raised(fn: Any) -> BaseException:
    with pytest.raises(Exception) as info:
        fn()
    return info.value


# -- node writes ---------------------------------------------------------------------------------
def test_a_node_write_of_the_wrong_type_names_node_key_type_and_pydantic_message() -> None:
    g = one_node(lambda s: {"a": "abc"})
    e = raised(lambda: g.invoke({}))
    assert isinstance(e, InvalidUpdateError), repr(e)
    assert e.node == "n" and e.key == "a"
    msg = str(e)
    assert "node 'n'" in msg and "'a'" in msg and "takes int" in msg, msg
    assert "valid integer" in msg and "'abc'" in msg, msg  # pydantic's own message


def test_node_writes_are_coerced_as_pydantic_does() -> None:
    g = one_node(lambda s: {"a": "5", "name": "x"})
    state = g.invoke({}).state
    assert state.a == 5 and type(state.a) is int


def test_a_field_constraint_is_enforced_on_writes() -> None:
    e = raised(lambda: one_node(lambda s: {"positive": 0}).invoke({}))
    assert isinstance(e, InvalidUpdateError) and e.key == "positive"
    assert "greater than 0" in str(e)


def test_append_writes_are_validated_item_by_item() -> None:
    seen: list[Any] = []

    def n(state: S) -> dict[str, Any]:
        return {"items": [{"x": 1}, Item(x=2)]}

    def m(state: S) -> dict[str, Any]:
        seen.extend(state.items)
        return {"items": {"x": "3"}}  # one item, not a list

    g = (
        StateGraph(S)
        .add_node("n", n)
        .add_node("m", m)
        .add_edge(START, "n")
        .add_edge("n", "m")
        .add_edge("m", END)
        .compile()
    )
    assert g.invoke({}).state.items == [Item(x=1), Item(x=2), Item(x=3)]
    assert seen == [Item(x=1), Item(x=2)] and all(type(i) is Item for i in seen)
    e = raised(lambda: one_node(lambda s: {"items": [{"x": 1}, {"x": "no"}]}).invoke({}))
    assert isinstance(e, InvalidUpdateError) and e.key == "items"
    assert "Item or a list of Item" in str(e) and "(at [1].x)" in str(e), str(e)


def test_operator_add_and_merge_writes_are_validated_as_the_keys_type() -> None:
    state = one_node(lambda s: {"total": "2", "tags": {"k": "3"}}).invoke({"total": 1}).state
    assert state.total == 3 and state.tags == {"k": 3}
    e = raised(lambda: one_node(lambda s: {"tags": {"k": "x"}}).invoke({}))
    assert isinstance(e, InvalidUpdateError) and e.key == "tags"


def test_a_custom_reducer_update_is_validated_as_its_second_parameter() -> None:
    def add_one(current: list[int], item: int) -> list[int]:
        return [*current, item]

    class C(BaseModel):
        nums: Annotated[list[int], add_one] = []

    assert one_node(lambda s: {"nums": "4"}, C).invoke({}).state.nums == [4]
    e = raised(lambda: one_node(lambda s: {"nums": "four"}, C).invoke({}))
    assert isinstance(e, InvalidUpdateError) and e.key == "nums"


def test_command_updates_and_subgraph_outputs_are_validated() -> None:
    from graphflow import Command

    g = one_node(lambda s: Command(update={"a": "7"}))
    assert g.invoke({}).state.a == 7
    assert isinstance(raised(lambda: one_node(lambda s: Command(update={"a": "x"})).invoke({})),
                      InvalidUpdateError)  # fmt: skip

    class Child(BaseModel):
        a: int | str = ""  # the parent's 'a' is an int

    child = one_node(lambda s: {"a": "nine"}, Child)
    parent = StateGraph(S).add_node("sub", child).add_edge(START, "sub").add_edge("sub", END)
    e = raised(lambda: parent.compile().invoke({}))
    assert isinstance(e, InvalidUpdateError) and e.node == "sub" and e.key == "a", repr(e)


# -- model instances as results ------------------------------------------------------------------
class WithIds(BaseModel):
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    count: int = 0
    log: Annotated[list[str], append] = []
    note: str = "default"


def test_a_returned_model_writes_set_fields_and_fields_that_differ_from_their_default() -> None:
    made: list[WithIds] = []

    def n(state: WithIds) -> WithIds:
        made.append(WithIds(count=state.count + 1))  # id made by default_factory
        return made[-1]

    state = one_node(n, WithIds).invoke({"id": "given", "log": ["x"], "note": "kept"}).state
    assert state.count == 1
    assert state.id == made[0].id != "given"  # the factory's value is written
    assert state.log == ["x"] and state.note == "kept"  # untouched defaults overwrite nothing


def test_update_from_a_model_instance_rule() -> None:
    schema = StateSchema(WithIds)
    m = WithIds(count=0)
    assert set(schema.model_update(m)) == {"id", "count"}  # set (even if default), generated
    m.note = "changed"  # assigning a field counts as setting it
    assert set(schema.model_update(m)) == {"id", "count", "note"}


# -- inputs --------------------------------------------------------------------------------------
def test_input_values_of_reducer_keys_are_coerced_before_nodes_see_them() -> None:
    seen: list[Any] = []

    def n(state: S) -> None:
        seen.extend(state.items)

    one_node(n).invoke({"items": [{"x": 1}]})
    assert seen == [Item(x=1)] and type(seen[0]) is Item


def test_a_wrong_input_type_names_the_field_and_the_type_expected() -> None:
    e = raised(lambda: one_node(lambda s: None).invoke({"a": "abc"}))
    assert isinstance(e, InvalidUpdateError), repr(e)
    assert e.key == "a" and e.node == "input"
    msg = str(e)
    assert msg.startswith("the input wrote str 'abc' to state key 'a', which takes int: "), msg
    assert "valid integer" in msg


def test_a_wrong_input_writes_nothing() -> None:
    cp = MemoryCheckpointer()
    g = one_node(lambda s: None, checkpointer=cp)
    assert isinstance(raised(lambda: g.invoke({"a": "abc"}, thread_id="t")), InvalidUpdateError)
    assert g.get_state("t") is None


# -- update_state --------------------------------------------------------------------------------
def paused_graph(schema: type[Any], cp: MemoryCheckpointer) -> CompiledGraph:
    def ask(state: Any) -> dict[str, Any]:
        return {"name": str(interrupt("name?"))}

    return one_node(ask, schema, checkpointer=cp)


def test_update_state_validates_and_coerces_values() -> None:
    g = paused_graph(S, MemoryCheckpointer())
    g.invoke({"a": 1}, thread_id="t")
    e = raised(lambda: g.update_state("t", {"a": "abc"}))
    assert isinstance(e, InvalidUpdateError) and e.key == "a" and "takes int" in str(e)
    snap = g.get_state("t")
    assert snap is not None and snap.values.a == 1  # nothing was written
    g.update_state("t", {"a": "2", "items": [{"x": 5}]})
    snap = g.get_state("t")
    assert snap is not None and snap.values.a == 2 and snap.values.items == [Item(x=5)]


# -- TypedDict: not validated --------------------------------------------------------------------
class TD(TypedDict):
    a: int


def test_typeddict_writes_are_not_validated() -> None:
    g = one_node(lambda s: {"a": "abc"}, TD)
    assert g.invoke({"a": "x"}).state == {"a": "abc"}


# -- stored values that do not fit the schema ----------------------------------------------------
class Named(BaseModel):
    name: str = ""
    a: int = 0


class NamedStr(BaseModel):
    name: str = ""
    a: str = ""


def test_a_stored_value_that_does_not_fit_the_schema_is_a_corrupt_checkpoint() -> None:
    cp = MemoryCheckpointer()
    g = paused_graph(Named, cp)
    assert g.invoke({"a": 3}, thread_id="t").status == "paused"
    replaced = 0
    for key, (kind, base, _) in list(cp._channels.items()):
        if key[0] == "t" and key[2] == "a":
            cp._channels[key] = (kind, base, serde.dumps("abc"))
            replaced += 1
    assert replaced
    for e in (
        raised(lambda: g.invoke(None, thread_id="t", resume="bob")),
        raised(lambda: g.get_state("t")),
        raised(lambda: g.update_state("t", {"name": "x"})),
    ):
        assert isinstance(e, CorruptCheckpointError), repr(e)
        assert e.thread_id == "t"
        assert "thread 't'" in str(e) and "state key 'a'" in str(e) and "takes int" in str(e)


def test_a_state_written_under_another_schema_is_refused_on_resume() -> None:
    cp = MemoryCheckpointer()
    writer = paused_graph(NamedStr, cp)
    assert writer.invoke({"a": "abc"}, thread_id="t").status == "paused"
    reader = paused_graph(Named, cp)
    e = raised(lambda: reader.invoke(None, thread_id="t", resume="bob"))
    assert isinstance(e, CorruptCheckpointError) and e.thread_id == "t", repr(e)
    assert "'a'" in str(e)
    # the same store read by the graph that wrote it resumes fine
    assert writer.invoke(None, thread_id="t", resume="bob").state.name == "bob"


def test_check_loaded_accepts_what_validation_produced() -> None:
    schema = StateSchema(S)
    values = schema.checked_update(
        {"a": "1", "items": [{"x": 1}], "tags": {"k": 1}, "total": 2}, "input"
    )
    schema.check_loaded(values, "t")  # no error
    schema.check_loaded({"a": True, "name": "x", "__gf:out": "anything"}, "t")  # True == 1
    with pytest.raises(CorruptCheckpointError, match="state key 'items'"):
        schema.check_loaded({"items": [{"x": 1}]}, "t")  # a dict, not the stored Item
    with pytest.raises(CorruptCheckpointError, match="state key 'a'"):
        schema.check_loaded({"a": "12"}, "t")  # validation would change it
    StateSchema(TD).check_loaded({"a": "abc"}, "t")  # a TypedDict is not checked


class Booking(BaseModel):
    when: datetime.datetime | None = None
    note: str = ""


def test_a_datetime_field_given_as_rfc3339_text_is_coerced_and_stored(tmp_path: Any) -> None:
    """pydantic coerces the text to a datetime with its own fixed-offset zone: stored, and
    read back equal, in a new process's store object too."""
    from checkpoints import SqliteCheckpointer

    def book(state: Booking) -> dict[str, Any]:
        return {"note": f"at {state.when.isoformat() if state.when else '-'}"}

    b = StateGraph(Booking).add_node(book).add_edge(START, "book").add_edge("book", END)
    graph = b.compile(checkpointer=SqliteCheckpointer(tmp_path / "b.db"))
    done = graph.invoke({"when": "2025-01-01T09:00:00+01:00"}, thread_id="b")
    assert done.state.note == "at 2025-01-01T09:00:00+01:00"
    again = b.compile(checkpointer=SqliteCheckpointer(tmp_path / "b.db")).get_state("b")
    assert again is not None
    assert again.values.when == datetime.datetime(2025, 1, 1, 8, tzinfo=datetime.UTC)


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int


@dataclasses.dataclass(frozen=True)
class Route:
    stops: list[Point]


class Trip(BaseModel):
    start: Point | None = None
    route: Route | None = None


def test_dataclasses_named_in_a_pydantic_state_are_registered_like_its_models(
    tmp_path: Any,
) -> None:
    """A dataclass field (and one inside it) is stored as pydantic models and enums of the
    schema are; it failed the thread with "register it"."""
    from checkpoints import SqliteCheckpointer

    def plan(state: Trip) -> dict[str, Any]:
        return {"start": Point(1, 2), "route": Route([Point(1, 2), Point(3, 4)])}

    b = StateGraph(Trip).add_node(plan).add_edge(START, "plan").add_edge("plan", END)
    graph = b.compile(checkpointer=SqliteCheckpointer(tmp_path / "t.db"))
    assert graph.invoke({}, thread_id="t").state.route == Route([Point(1, 2), Point(3, 4)])
    snap = b.compile(checkpointer=SqliteCheckpointer(tmp_path / "t.db")).get_state("t")
    assert snap is not None and snap.values.start == Point(1, 2)


# -- field validators and required fields ---------------------------------------------------------
class V(BaseModel):
    """A model with field validators of every mode, a ``"*"`` one and a required field."""

    need: int
    name: str = ""
    code: str = "a"
    seen: Annotated[list[str], append] = []

    @field_validator("name")
    @classmethod
    def upper(cls, v: str) -> str:
        if v == "bad":
            raise ValueError("name may not be bad")
        return v.upper()

    @field_validator("code", mode="before")
    @classmethod
    def stringify(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) else v

    @field_validator("code", mode="wrap")
    @classmethod
    def bracket(cls, v: Any, handler: Any) -> str:
        return f"<{handler(v)}>"

    @field_validator("*")
    @classmethod
    def no_tabs(cls, v: Any) -> Any:
        if isinstance(v, str) and "\t" in v:
            raise ValueError("no tabs")
        return v


def test_field_validators_run_on_node_writes_input_and_update_state() -> None:
    cp = MemoryCheckpointer()

    def ask(state: V) -> dict[str, Any]:
        return {"name": str(interrupt("name?")), "code": 7}

    g = one_node(ask, V, checkpointer=cp)
    assert V(need=1, name="x", code=7).code == "<7>"  # what the model itself does
    g.invoke({"need": 1, "name": "in"}, thread_id="t")
    snap = g.get_state("t")
    assert snap is not None and snap.values.name == "IN"  # the input
    g.update_state("t", {"name": "upd"})
    snap = g.get_state("t")
    assert snap is not None and snap.values.name == "UPD"  # update_state
    result = g.invoke(None, thread_id="t", resume="bob")
    assert result.state.name == "BOB" and result.state.code == "<7>"  # a node's writes


def test_a_field_validator_that_refuses_names_node_key_and_its_message() -> None:
    e = raised(lambda: one_node(lambda s: {"name": "bad"}, V).invoke({"need": 1}))
    assert isinstance(e, InvalidUpdateError) and e.node == "n" and e.key == "name", repr(e)
    assert "name may not be bad" in str(e)
    e = raised(lambda: one_node(lambda s: {"code": "a\tb"}, V).invoke({"need": 1}))
    assert isinstance(e, InvalidUpdateError) and e.key == "code" and "no tabs" in str(e)
    e = raised(lambda: one_node(lambda s: None, V).invoke({"need": 1, "name": "bad"}))
    assert isinstance(e, InvalidUpdateError) and e.node == "input", repr(e)


def test_a_field_validator_raising_another_exception_is_an_invalid_update() -> None:
    class W(BaseModel):
        name: str = ""

        @field_validator("name")
        @classmethod
        def peek(cls, v: str, info: ValidationInfo) -> str:
            return v + str(info.data["other"])  # info.data is None for a lone write

    e = raised(lambda: one_node(lambda s: {"name": "x"}, W).invoke({}))
    assert isinstance(e, InvalidUpdateError) and e.key == "name", repr(e)
    assert "its validator raised TypeError" in str(e)


def test_stored_values_are_not_validated_again_by_field_validators() -> None:
    cp = MemoryCheckpointer()

    def ask(state: V) -> dict[str, Any]:
        return {"code": str(interrupt("code?"))}

    g = one_node(ask, V, checkpointer=cp)
    g.invoke({"need": 1, "code": "x"}, thread_id="t")  # stored as "<x>"
    snap = g.get_state("t")  # a load that re-ran the wrap validator would see "<<x>>"
    assert snap is not None and snap.values.code == "<x>"
    assert g.invoke(None, thread_id="t", resume="y").state.code == "<y>"


def test_a_new_threads_input_without_a_required_field_is_refused_before_anything_is_written() -> (
    None
):
    cp = MemoryCheckpointer()
    g = one_node(lambda s: {"name": "x"}, V, checkpointer=cp)
    e = raised(lambda: g.invoke({"name": "a"}, thread_id="t"))
    assert isinstance(e, InvalidUpdateError) and e.key == "need" and e.node == "input", repr(e)
    assert "lacks required state key(s) 'need' of V" in str(e)
    assert g.get_state("t") is None and g.list_threads() == []
    assert isinstance(raised(lambda: g.invoke({}, thread_id="t")), InvalidUpdateError)
    assert g.invoke({"need": 2}, thread_id="t").state.need == 2
    # A later run of the thread has the field already: its input may leave it out.
    assert g.invoke({"name": "b"}, thread_id="t").state == V(need=2, name="X")


class Bang(BaseModel):
    x: str = ""
    y: int = 0

    @field_validator("x")
    @classmethod
    def bang(cls, v: str) -> str:
        return v + "!" if v else v


def test_a_returned_or_input_model_is_not_validated_twice() -> None:
    assert one_node(lambda s: Bang(x="a", y=1), Bang).invoke({}).state.x == "a!"
    copied = one_node(lambda s: s.model_copy(update={"y": 5}), Bang).invoke(Bang(x="q"))
    assert copied.state == Bang.model_construct(x="q!", y=5)  # x untouched by the node


def test_a_stored_value_its_validators_changed_loads_back(tmp_path: Any) -> None:
    from pydantic import AfterValidator

    from checkpoints import SqliteCheckpointer

    class Odd(BaseModel):
        code: int = 0
        cents: Annotated[int, AfterValidator(lambda d: d * 100)] = 0

        @field_validator("code", mode="plain")
        @classmethod
        def as_text(cls, v: Any) -> Any:
            return f"C{v}"  # another type than the annotation's

    def ask(state: Odd) -> dict[str, Any]:
        return {"cents": 1 if interrupt("?") else 2}

    def graph() -> CompiledGraph:  # a new store object: what it reads comes from the file
        b = StateGraph(Odd).add_node("a", lambda s: {"code": 7, "cents": 3}).add_node(ask)
        b.add_edge(START, "a").add_edge("a", "ask").add_edge("ask", END)
        return b.compile(checkpointer=SqliteCheckpointer(tmp_path / "odd.db"))

    assert graph().invoke({}, thread_id="t").status == "paused"
    snap = graph().get_state("t")
    assert snap is not None and (snap.values.code, snap.values.cents) == ("C7", 300)
    assert graph().invoke(None, thread_id="t", resume="y").state.cents == 100


def test_required_fields_of_a_new_thread_made_by_update_state_or_a_subgraph() -> None:
    cp = MemoryCheckpointer()
    g = one_node(lambda s: {"name": "x"}, V, checkpointer=cp)
    e = raised(lambda: g.update_state("u", {"name": "a"}))
    assert isinstance(e, InvalidUpdateError) and e.key == "need", repr(e)
    assert "update_state of a new thread lacks required state key(s) 'need'" in str(e)
    assert g.get_state("u") is None
    e = raised(lambda: g.invoke(V.model_construct(name="n"), thread_id="m"))
    assert isinstance(e, InvalidUpdateError) and e.key == "need", repr(e)  # not AttributeError

    class Outer(BaseModel):
        name: str = ""

    inner = one_node(lambda s: {"name": "in"}, V)
    outer = StateGraph(Outer).add_node("sub", inner).add_edge(START, "sub").add_edge("sub", END)
    e = raised(lambda: outer.compile().invoke({"name": "o"}))
    assert isinstance(e, InvalidUpdateError) and e.node == "sub" and e.key == "need", repr(e)
    assert "subgraph node 'sub' starts without required state key(s) 'need'" in str(e)


def test_an_alias_names_its_key_and_validate_default_validates_defaults() -> None:
    from pydantic import ConfigDict

    class A(BaseModel):
        model_config = ConfigDict(validate_default=True)
        user_name: str = Field(default="low", alias="userName")
        tag: str = Field(default="t", validate_default=False)

        @field_validator("user_name", "tag")
        @classmethod
        def upper(cls, v: str) -> str:
            return v.upper()

    assert A().user_name == "LOW" and A().tag == "t"  # what the model does
    g = one_node(lambda s: None, A)
    state = g.invoke({}).state
    assert (state.user_name, state.tag) == ("LOW", "t")  # a new thread's defaults
    assert g.invoke({"userName": "ann"}).state.user_name == "ANN"  # the alias, as A(...) takes
    assert g.invoke({"user_name": "bob"}).state.user_name == "BOB"  # and the field's name
    renamed = one_node(lambda s: {"userName": "cy"}, A).invoke({}).state
    assert renamed.user_name == "CY"
