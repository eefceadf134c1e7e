"""Tools: schema from the signature, argument validation, sync and async execution."""

from __future__ import annotations

import threading
from typing import Annotated, Any, Optional

import pytest
from pydantic import BaseModel, Field

from graphflow.agents.tools import Tool, ToolArgumentError, tool
from graphflow.errors import GraphflowError, InvalidArgumentError


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Filter(BaseModel):
    title: str
    depth: int = 1


class Opaque:
    """Not a type pydantic can validate."""


@tool
def search(
    query: str,
    limit: int = 10,
    lang: Optional[str] = None,  # noqa: UP045 - Optional on purpose
    after: int | None = None,
    filter: Filter | None = None,
) -> dict[str, Any]:
    """Search the documents.

    Matches are ranked by relevance.

    Args:
        query: the words to look for,
            in any order.
        limit (int): at most this many results.
    """
    return {"query": query, "limit": limit, "lang": lang, "after": after, "filter": filter}


def test_name_description_and_flags_from_the_function() -> None:
    assert isinstance(search, Tool)
    assert search.name == "search"
    assert search.description == "Search the documents."
    assert (search.idempotent, search.high_impact, search.is_async) == (False, False, False)


def test_parameters_schema_from_the_signature() -> None:
    params = search.parameters
    assert params["type"] == "object"
    assert params["required"] == ["query"]
    props = params["properties"]
    assert list(props) == ["query", "limit", "lang", "after", "filter"]
    assert props["query"] == {
        "type": "string",
        "description": "the words to look for, in any order.",
    }
    assert props["limit"] == {
        "type": "integer",
        "default": 10,
        "description": "at most this many results.",
    }
    for optional in ("lang", "after"):
        assert props[optional]["default"] is None
        assert {"type": "null"} in props[optional]["anyOf"]
    assert {"type": "string"} in props["lang"]["anyOf"]
    assert "title" not in params and all("title" not in p for p in props.values())
    nested = params["$defs"]["Filter"]
    assert set(nested["properties"]) == {"title", "depth"}  # a field named title is kept


def test_openai_schema_format() -> None:
    assert search.schema() == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the documents.",
            "parameters": search.parameters,
        },
    }


def test_decorator_with_options_and_direct_construction() -> None:
    @tool(name="rm", description="Remove a file.", idempotent=True, high_impact=True)
    def delete_file(path: str) -> str:
        return path

    assert (delete_file.name, delete_file.description) == ("rm", "Remove a file.")
    assert delete_file.idempotent and delete_file.high_impact
    assert delete_file("x") == "x"  # calling the tool calls the function

    def undocumented(flag: bool = False) -> bool:
        return flag

    direct = Tool(undocumented)
    assert direct.description == ""
    assert direct.parameters == {
        "type": "object",
        "properties": {"flag": {"type": "boolean", "default": False}},
        "required": [],
    }


def test_annotated_field_description_and_constraints_are_kept() -> None:
    @tool
    def page(n: Annotated[int, Field(ge=1, description="page number")] = 1) -> int:
        return n

    assert page.parameters["properties"]["n"] == {
        "type": "integer",
        "minimum": 1,
        "default": 1,
        "description": "page number",
    }


def test_validate_returns_json_able_args_with_defaults() -> None:
    assert search.validate({"query": "q", "filter": {"title": "t"}}) == {
        "query": "q",
        "limit": 10,
        "lang": None,
        "after": None,
        "filter": {"title": "t", "depth": 1},
    }


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({}, "query: Field required"),
        ({"query": "q", "limit": "many"}, "limit: Input should be a valid integer"),
        ({"query": "q", "colour": "red"}, "colour: Extra inputs are not permitted"),
        ({"__raw__": "{not json"}, "must be a JSON object"),
    ],
)
def test_invalid_args_raise_tool_argument_error(args: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ToolArgumentError, match="tool 'search'") as info:
        search.validate(args)
    assert fragment in str(info.value)
    assert info.value.tool == "search"
    assert isinstance(info.value, GraphflowError)


def test_parameter_names_that_clash_with_pydantic_are_fine() -> None:
    @tool
    def dump(json: str, copy: bool = False, _hidden: int = 0) -> tuple[str, bool, int]:
        return json, copy, _hidden

    assert set(dump.parameters["properties"]) == {"json", "copy", "_hidden"}
    assert dump.validate({"json": "x"}) == {"json": "x", "copy": False, "_hidden": 0}


def test_bad_tool_definitions_fail_at_decoration() -> None:
    with pytest.raises(TypeError, match=r"\*\*kwargs"):

        @tool
        def loose(**kwargs: Any) -> None: ...

    with pytest.raises(TypeError, match="cannot describe the arguments of tool 'opaque'"):

        @tool
        def opaque(x: Opaque) -> None: ...

    class Local:
        pass

    with pytest.raises(TypeError, match="at module level"):

        @tool
        def local(x: Local) -> None: ...

    with pytest.raises(InvalidArgumentError, match="tool name"):
        Tool(lambda: None)
    assert Tool(lambda: None, name="noop").name == "noop"


@pytest.mark.anyio
async def test_arun_sync_tool_runs_in_a_worker_thread() -> None:
    seen: list[threading.Thread] = []

    @tool
    def record(n: int, /, scale: int = 2) -> int:
        seen.append(threading.current_thread())
        return n * scale

    assert await record.arun({"n": "3"}) == 6  # validated: "3" -> 3
    assert seen[0] is not threading.current_thread()
    assert await search.arun({"query": "q", "filter": {"title": "t"}}) == {
        "query": "q",
        "limit": 10,
        "lang": None,
        "after": None,
        "filter": Filter(title="t"),  # the function gets Python values
    }


@pytest.mark.anyio
async def test_arun_async_tool() -> None:
    @tool
    async def fetch(url: str, retries: int = 0) -> str:
        """Fetch a page."""
        return f"{url}#{retries}"

    assert fetch.is_async
    assert await fetch.arun({"url": "u", "retries": 2}) == "u#2"

    class Caller:
        async def __call__(self, x: int) -> int:
            return x + 1

    callable_tool = Tool(Caller(), name="caller")
    assert callable_tool.is_async
    assert await callable_tool.arun({"x": 1}) == 2


@pytest.mark.anyio
async def test_arun_invalid_args_does_not_call_the_function() -> None:
    calls: list[str] = []

    @tool
    def touch(path: str) -> None:
        calls.append(path)

    with pytest.raises(ToolArgumentError, match="path: Field required"):
        await touch.arun({})
    assert calls == []


@pytest.mark.anyio
async def test_arun_propagates_the_function_error() -> None:
    @tool
    async def boom() -> None:
        raise LookupError("nope")

    with pytest.raises(LookupError, match="nope"):
        await boom.arun({})
