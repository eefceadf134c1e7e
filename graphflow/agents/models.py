"""Chat models: the ``Model`` protocol, the ``ScriptedModel`` fake, an OpenAI-compatible client.

Any object with ``async def generate(messages, tools) -> ModelResponse`` is a model.
:class:`ScriptedModel` replays canned responses for tests (STYLE.md #11);
:class:`OpenAIChatModel` speaks the chat-completions wire format over httpx to OpenAI or to
any compatible server (vLLM, llama.cpp, Ollama, LiteLLM ...).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio.to_thread

from graphflow.agents.messages import RAW_ARGUMENTS_KEY, Message, ModelResponse, ToolCall
from graphflow.agents.tools import Tool
from graphflow.errors import GraphflowError

if TYPE_CHECKING:  # httpx (and rich, which it imports) load on the first request
    import ssl

    import httpx

__all__ = [
    "Model",
    "ModelCall",
    "ModelError",
    "OpenAIChatModel",
    "ScriptExhaustedError",
    "ScriptedModel",
]

_EXCERPT = 500  # characters of an error body kept in ModelError


@runtime_checkable
class Model(Protocol):
    """A chat model: given a transcript and the available tools, produce one response."""

    async def generate(self, messages: list[Message], tools: list[Tool]) -> ModelResponse:
        """Return the model's next response.

        Args:
            messages: the transcript, oldest first (including any system message).
            tools: the tools the model may call; empty when it may call none.
        """
        ...


class ModelError(GraphflowError):
    """A model request failed: unreachable server, HTTP error or malformed response.

    Attributes:
        status: the HTTP status code, or ``None`` when no response was received.
        body: an excerpt of the response body (never contains the API key).
    """

    def __init__(self, message: str, *, status: int | None = None, body: str = ""):
        super().__init__(message)
        self.status = status
        self.body = body


class ScriptExhaustedError(RuntimeError):
    """A :class:`ScriptedModel` was asked for more responses than its script holds."""

    def __init__(self, name: str, count: int):
        plural = "response" if count == 1 else "responses"
        super().__init__(
            f"{name!r} has no response left: its script had {count} {plural} and it was asked "
            f"for response {count + 1}; add responses to the script or check why the agent "
            "called the model again"
        )
        self.name = name
        self.count = count


@dataclass(frozen=True)
class ModelCall:
    """One request a :class:`ScriptedModel` received.

    Attributes:
        messages: a copy of the transcript it was given.
        tools: the tools it was offered.
    """

    messages: list[Message]
    tools: list[Tool]


class ScriptedModel:
    """A fake model that replays responses in order and records every request.

    It picks its response from the transcript it is given, not from a count kept in memory:
    the response after the last of its script's responses that the transcript holds (as
    assistant messages, in order). So a thread paused in one process and resumed in another,
    with a new ``ScriptedModel`` of the same script, gets the next response, as a real model
    would answer the transcript. ``calls`` records the requests of this object only.

    Args:
        responses: the script; a ``str`` means ``ModelResponse(text=...)``.
        name: named in :class:`ScriptExhaustedError`.
    """

    def __init__(self, responses: Sequence[ModelResponse | str], name: str = "ScriptedModel"):
        self.name = name
        self.responses = [ModelResponse(text=r) if isinstance(r, str) else r for r in responses]
        self.calls: list[ModelCall] = []

    def __repr__(self) -> str:
        return f"ScriptedModel({self.name!r}, {len(self.responses)} responses)"

    async def generate(self, messages: list[Message], tools: list[Tool]) -> ModelResponse:
        """Record the request and return the next scripted response.

        Raises:
            ScriptExhaustedError: every response was already returned (the request is
                still recorded in ``calls``).
        """
        self.calls.append(ModelCall(messages=list(messages), tools=list(tools)))
        position = 0
        for m in messages:
            if position < len(self.responses) and _is_response(m, self.responses[position]):
                position += 1
        if position >= len(self.responses):
            raise ScriptExhaustedError(self.name, len(self.responses))
        return self.responses[position]


def _is_response(message: Message, response: ModelResponse) -> bool:
    """Whether a transcript message is this response as an agent appended it."""
    return (
        message.role == "assistant"
        and message.content == response.text
        and [(c.id, c.name, c.args) for c in message.tool_calls]
        == [(c.id, c.name, c.args) for c in response.tool_calls]
    )


class OpenAIChatModel:
    """A client for an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        base_url: the API root, such as ``"https://api.openai.com/v1"`` or
            ``"http://127.0.0.1:8000/v1"``.
        model: the model name sent in each request.
        api_key: sent as ``Authorization: Bearer ...`` when given.
        timeout: seconds allowed for each request.
        client: an ``httpx.AsyncClient`` to use (the caller closes it). By default each
            request uses a short-lived client, so the model works from any event loop,
            including the ones the sync API starts for each call.
        extra_body: more request fields, such as ``{"temperature": 0}``; ``model``,
            ``messages`` and ``tools`` are always set by the client.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        client: httpx.AsyncClient | None = None,
        extra_body: dict[str, Any] | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.extra_body = dict(extra_body or {})
        self._api_key = api_key
        self._client = client
        self._ssl: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.base_url!r}, {self.model!r})"  # never the key

    async def generate(self, messages: list[Message], tools: list[Tool]) -> ModelResponse:
        """Send the transcript and tools; return the first choice.

        Raises:
            ModelError: the server could not be reached, answered with an HTTP error, or
                sent something that is not a chat completion.
        """
        url = f"{self.base_url}/chat/completions"
        body: dict[str, Any] = {
            **self.extra_body,
            "model": self.model,
            "messages": [_to_wire(m) for m in messages],
        }
        if tools:
            body["tools"] = [t.schema() for t in tools]
        else:
            body.pop("tools", None)
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        import httpx

        try:
            if self._client is not None:
                response = await self._client.post(
                    url, json=body, headers=headers, timeout=self.timeout
                )
            else:
                verify = await self._ssl_context()
                async with httpx.AsyncClient(timeout=self.timeout, verify=verify) as client:
                    response = await client.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise ModelError(
                f"model request to {url} failed: {type(exc).__name__}: {self._redact(str(exc))}"
            ) from None
        text = self._redact(response.text[:_EXCERPT])
        if response.status_code >= 400:
            raise ModelError(
                f"model request to {url} failed with HTTP {response.status_code}: {text}",
                status=response.status_code,
                body=text,
            )
        try:
            return _from_wire(response.json())
        except (ValueError, LookupError, TypeError, AttributeError) as exc:
            raise ModelError(
                f"model at {url} sent a response that is not a chat completion "
                f"({type(exc).__name__}: {exc}): {text}",
                status=response.status_code,
                body=text,
            ) from None

    async def _ssl_context(self) -> ssl.SSLContext:
        # Loading the CA bundle reads files: do it once, off the event loop.
        if self._ssl is None:
            import httpx

            self._ssl = await anyio.to_thread.run_sync(httpx.create_ssl_context)
        return self._ssl

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text


def _to_wire(message: Message) -> dict[str, Any]:
    """Return ``message`` in the chat-completions request format."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
        return out
    if message.name is not None:
        out["name"] = message.name
    if message.tool_calls:
        out["content"] = message.content or None
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments(call)},
            }
            for call in message.tool_calls
        ]
    return out


def _arguments(call: ToolCall) -> str:
    """The JSON arguments of a call; unparsable ones are sent back as the model wrote them."""
    if set(call.args) == {RAW_ARGUMENTS_KEY}:
        return str(call.args[RAW_ARGUMENTS_KEY])
    return json.dumps(call.args, ensure_ascii=False)


def _from_wire(data: Any) -> ModelResponse:
    """Parse a chat-completions response body (raises LookupError/TypeError if malformed)."""
    message = data["choices"][0]["message"]
    content = message.get("content")
    if isinstance(content, list):  # content parts, as some servers send
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    calls = [
        ToolCall(
            id=call.get("id") or f"call_{uuid.uuid4().hex[:24]}",
            name=call["function"]["name"],
            args=_parse_arguments(call["function"].get("arguments")),
        )
        for call in message.get("tool_calls") or []
    ]
    usage = data.get("usage")
    return ModelResponse(
        text=content or "",
        tool_calls=calls,
        usage=(
            {k: v for k, v in usage.items() if type(v) is int} if isinstance(usage, dict) else None
        ),
    )


def _parse_arguments(raw: Any) -> dict[str, Any]:
    """Decode tool-call arguments; anything but a JSON object is kept under ``__raw__``."""
    if isinstance(raw, dict):  # some servers send an object instead of a JSON string
        return raw
    if raw is None or raw == "":
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        value = None
    return value if isinstance(value, dict) else {RAW_ARGUMENTS_KEY: str(raw)}
