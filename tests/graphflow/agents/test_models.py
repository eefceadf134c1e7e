"""Models: the ScriptedModel fake and the OpenAI-compatible client against a local server."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from graphflow.agents.messages import Message, ModelResponse, ToolCall
from graphflow.agents.models import (
    Model,
    ModelCall,
    ModelError,
    OpenAIChatModel,
    ScriptedModel,
    ScriptExhaustedError,
)
from graphflow.agents.tools import tool
from graphflow.errors import GraphflowError

KEY = "sk-test-secret-123"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@tool
def delete_file(path: str) -> str:
    """Delete a file."""
    return path


# -- ScriptedModel ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_scripted_model_replays_in_order_and_records_calls() -> None:
    call = ToolCall(id="call_1", name="delete_file", args={"path": "/tmp/x"})
    first = ModelResponse(tool_calls=[call])
    model = ScriptedModel([first, "done"])
    assert isinstance(model, Model)
    transcript = [Message(role="user", content="delete /tmp/x")]
    assert await model.generate(transcript, [delete_file]) is first
    transcript.append(first.to_message("t0"))
    second = await model.generate(transcript, [])
    assert second == ModelResponse(text="done")
    assert [len(c.messages) for c in model.calls] == [1, 2]  # copies, not the live list
    assert model.calls[0] == ModelCall(
        messages=[Message(id=transcript[0].id, role="user", content="delete /tmp/x")],
        tools=[delete_file],
    )
    assert model.calls[1].tools == []


@pytest.mark.anyio
async def test_scripted_model_exhaustion_names_the_script() -> None:
    model = ScriptedModel(["only"], name="triage-script")
    only = await model.generate([], [])
    transcript = [only.to_message("t0"), Message(role="user", content="again")]
    with pytest.raises(ScriptExhaustedError, match=r"'triage-script'.*had 1 response\b") as info:
        await model.generate(transcript, [])
    assert not isinstance(info.value, GraphflowError)  # (a model's failure: a node's error)
    assert len(model.calls) == 2  # the failing request is recorded too
    with pytest.raises(ScriptExhaustedError, match=r"'ScriptedModel'.*had 0 responses"):
        await ScriptedModel([]).generate([], [])


def test_a_run_whose_script_ran_out_fails_naming_the_node() -> None:
    """As any exception of a node: a ``NodeError`` naming it, the exhaustion its cause."""
    from graphflow import END, START, NodeError, StateGraph
    from graphflow.agents import Agent, AgentNode, MessagesState

    agent = Agent("triage", ScriptedModel([], name="triage-script"), [])
    builder = StateGraph(MessagesState).add_node(AgentNode(agent))
    graph = builder.add_edge(START, "triage").add_edge("triage", END).compile()
    with pytest.raises(NodeError) as info:
        graph.invoke({"messages": [{"role": "user", "content": "hi"}]}, thread_id="t")
    assert info.value.node == "triage" and isinstance(info.value.__cause__, ScriptExhaustedError)


# -- OpenAIChatModel against a local chat-completions server ---------------------------------


class FakeServer:
    """A tiny chat-completions server: records requests, answers with queued replies."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.replies: list[tuple[int, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                server.requests.append(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": json.loads(self.rfile.read(length)),
                    }
                )
                status, reply = server.replies.pop(0)
                data = (reply if isinstance(reply, str) else json.dumps(reply)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output quiet

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def reply(self, body: Any, status: int = 200) -> None:
        self.replies.append((status, body))


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.httpd.shutdown()
        fake.httpd.server_close()
        fake.thread.join()


def completion(message: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


@pytest.mark.anyio
async def test_openai_request_body_and_text_response(server: FakeServer) -> None:
    server.reply(
        completion(
            {"role": "assistant", "content": "Deleted."},
            usage={"prompt_tokens": 12, "completion_tokens": 3, "details": {"cached": 0}},
        )
    )
    model = OpenAIChatModel(server.base_url + "/", "qwen-7b", api_key=KEY, extra_body={"seed": 1})
    transcript = [
        Message(role="system", content="You manage files."),
        Message(role="user", content="delete /tmp/x", name="ann"),
        Message(
            role="assistant",
            tool_calls=[
                ToolCall(id="call_1", name="delete_file", args={"path": "/tmp/x"}),
                ToolCall(id="call_2", name="delete_file", args={"__raw__": "{bad"}),
            ],
        ),
        Message(role="tool", content="ok", tool_call_id="call_1", name="delete_file"),
    ]
    response = await model.generate(transcript, [delete_file])
    assert response == ModelResponse(
        text="Deleted.", usage={"prompt_tokens": 12, "completion_tokens": 3}
    )
    [request] = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == f"Bearer {KEY}"
    assert request["body"] == {
        "seed": 1,
        "model": "qwen-7b",
        "messages": [
            {"role": "system", "content": "You manage files."},
            {"role": "user", "content": "delete /tmp/x", "name": "ann"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "delete_file", "arguments": '{"path": "/tmp/x"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "delete_file", "arguments": "{bad"},
                    },
                ],
            },
            {"role": "tool", "content": "ok", "tool_call_id": "call_1"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "delete_file",
                    "description": "Delete a file.",
                    "parameters": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                        "required": ["path"],
                    },
                },
            }
        ],
    }
    assert KEY not in repr(model)


@pytest.mark.anyio
async def test_openai_tool_call_response(server: FakeServer) -> None:
    server.reply(
        completion(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "delete_file", "arguments": '{"path": "/a"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "delete_file", "arguments": '{"path": '},
                    },
                    {"id": "call_c", "type": "function", "function": {"name": "delete_file"}},
                ],
            }
        )
    )
    model = OpenAIChatModel(server.base_url, "m")
    response = await model.generate([Message(role="user", content="go")], [])
    assert response.text == ""
    assert response.usage is None
    assert response.tool_calls == [
        ToolCall(id="call_a", name="delete_file", args={"path": "/a"}),
        ToolCall(id="call_b", name="delete_file", args={"__raw__": '{"path": '}),
        ToolCall(id="call_c", name="delete_file", args={}),
    ]
    [request] = server.requests
    assert "authorization" not in request["headers"]
    assert "tools" not in request["body"]
    assert request["body"]["messages"] == [{"role": "user", "content": "go"}]


@pytest.mark.anyio
async def test_openai_http_error_is_a_model_error_without_the_key(server: FakeServer) -> None:
    server.reply({"error": {"message": f"internal error for key {KEY}"}}, status=500)
    model = OpenAIChatModel(server.base_url, "m", api_key=KEY)
    with pytest.raises(ModelError, match="HTTP 500") as info:
        await model.generate([Message(role="user", content="hi")], [])
    assert info.value.status == 500
    assert "internal error" in info.value.body
    assert KEY not in str(info.value) and KEY not in info.value.body
    assert isinstance(info.value, GraphflowError)


@pytest.mark.anyio
async def test_openai_malformed_response_is_a_model_error(server: FakeServer) -> None:
    server.reply({"object": "list", "data": []})
    server.reply("this is not json")
    model = OpenAIChatModel(server.base_url, "m")
    for _ in range(2):
        with pytest.raises(ModelError, match="not a chat completion"):
            await model.generate([], [])


@pytest.mark.anyio
async def test_openai_unreachable_server_is_a_model_error() -> None:
    with socket.socket() as sock:  # find a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = OpenAIChatModel(f"http://127.0.0.1:{port}/v1", "m", api_key=KEY, timeout=5)
    with pytest.raises(ModelError, match="ConnectError") as info:
        await model.generate([], [])
    assert info.value.status is None
    assert KEY not in str(info.value)


@pytest.mark.anyio
async def test_openai_uses_a_given_client_and_leaves_it_open() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=completion({"role": "assistant", "content": "hi"}))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        model = OpenAIChatModel("https://llm.example/v1", "m", client=client)
        assert (await model.generate([], [delete_file])).text == "hi"
        assert not client.is_closed
    assert str(seen[0].url) == "https://llm.example/v1/chat/completions"
    assert json.loads(seen[0].content)["tools"] == [delete_file.schema()]


@pytest.mark.anyio
async def test_a_fresh_scripted_model_continues_from_the_transcript_it_is_given() -> None:
    """A thread resumed in another process has a new ScriptedModel: it answers the transcript."""
    first = ModelResponse(tool_calls=[ToolCall(id="c1", name="delete_file", args={"path": "/x"})])
    script = [first, "deleted", "anything else?"]
    transcript = [Message(role="user", content="rm /x"), first.to_message("m1")]
    transcript.append(Message(role="tool", content="ok", tool_call_id="c1"))
    assert (await ScriptedModel(script).generate(transcript, [])).text == "deleted"
    # Messages of other agents in between do not move it; a repeated answer is matched in order.
    twice = ScriptedModel(["ok", "ok", "bye"])
    convo = [Message(role="user", content="a")]
    for expected in ("ok", "ok", "bye"):
        answer = await twice.generate(convo, [])
        assert answer.text == expected
        convo += [answer.to_message(f"m{len(convo)}"), Message(role="assistant", content="other")]
