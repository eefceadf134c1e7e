"""Chat messages, tool calls, model responses and the ``add_messages`` reducer.

These are the values an agent keeps in ``state["messages"]``, and a core type of graphflow:
``graphflow.reducers.add_messages`` is this module's, whether or not ``graphflow.agents`` is
imported. They are registered with ``checkpoints.serde`` under stable names
(``graphflow.agents.Message`` ...), so transcripts can be stored and revived.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, Field

from checkpoints import serde

__all__ = [
    "RAW_ARGUMENTS_KEY",
    "Message",
    "MessageLike",
    "MessagesState",
    "ModelResponse",
    "Role",
    "ToolCall",
    "add_messages",
    "coerce_message",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
"""Who wrote a message.

- ``system``: instructions for the model (the agent's ``instruction``).
- ``user``: input from the person or program driving the agent.
- ``assistant``: the model's answer; may propose ``tool_calls``.
- ``tool``: the result of one tool call, linked to it by ``tool_call_id``.
"""

RAW_ARGUMENTS_KEY = "__raw__"
"""Key of ``ToolCall.args`` holding arguments the model sent that were not a JSON object.

Model clients keep such arguments as ``{"__raw__": text}`` instead of failing, so that the
agent can tell the model what was wrong; ``Tool.validate`` rejects them with a clear error.
"""


def _new_id() -> str:
    return uuid.uuid4().hex


class ToolCall(BaseModel):
    """A tool call proposed by the model.

    Attributes:
        id: the call id chosen by the model (decisions and dispatch records are keyed by it).
        name: the name of the tool to call.
        args: the arguments, as the model sent them (validated only when the tool runs).
    """

    id: str
    name: str
    args: dict[str, Any] = {}


class Message(BaseModel):
    """One chat message of a transcript.

    Attributes:
        id: stable identity; a message with the same id replaces this one in
            :func:`add_messages`. Defaults to a new random hex id.
        role: who wrote it (see :data:`Role`).
        content: the text.
        tool_calls: calls proposed by an ``assistant`` message.
        tool_call_id: for a ``tool`` message, the id of the call it answers.
        name: optional name of the author (or of the tool, for a ``tool`` message).
    """

    id: str = Field(default_factory=_new_id)
    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = []
    tool_call_id: str | None = None
    name: str | None = None
    untrusted: bool = False
    """The content came from outside the principal's control (an email, a web page, an
    ``untrusted_output`` tool's result): from it on, the transcript is tainted."""
    source: str | None = None
    """Where untrusted content came from (``"tool:read_inbox"``, ``"email"`` ...)."""


class ModelResponse(BaseModel):
    """What a model returned for one request.

    Attributes:
        text: the answer text (may be empty when the model only calls tools).
        tool_calls: the tool calls the model proposes.
        usage: token counts reported by the provider, such as ``prompt_tokens``.
    """

    text: str = ""
    tool_calls: list[ToolCall] = []
    usage: dict[str, int] | None = None

    def to_message(self, message_id: str) -> Message:
        """Return this response as an ``assistant`` message with the given id.

        Args:
            message_id: the id of the new message; agents pass a deterministic id so that
                a replayed turn replaces, rather than duplicates, its message.
        """
        return Message(
            id=message_id, role="assistant", content=self.text, tool_calls=list(self.tool_calls)
        )


MessageLike: TypeAlias = Message | Mapping[str, Any] | str
"""Anything :func:`coerce_message` accepts."""


def coerce_message(value: object) -> Message:
    """Turn a message-like value into a :class:`Message`.

    Args:
        value: a ``Message`` (returned as is), a mapping such as
            ``{"role": "user", "content": "hi"}`` (validated; a missing id gets a new one),
            or a ``str``, meaning a user message with that content.

    Raises:
        TypeError: ``value`` is none of these.
        pydantic.ValidationError: a mapping is not a valid message.
    """
    if isinstance(value, Message):
        return value
    if isinstance(value, str):
        return Message(role="user", content=value)
    if isinstance(value, Mapping):
        return Message.model_validate(dict(value))
    raise TypeError(
        f"cannot use a {type(value).__qualname__} as a chat message; pass a Message, a dict "
        "such as {'role': 'user', 'content': '...'}, or a str (a user message)"
    )


def add_messages(
    current: Sequence[Message] | None, update: MessageLike | Sequence[MessageLike]
) -> list[Message]:
    """Reducer for chat transcripts: replace messages by id, append the others.

    ``current`` is never mutated. When no message is replaced the result is
    ``current + new`` with the very same item objects, which lets the engine store only the
    appended messages (DESIGN.md promise 9).

    Args:
        current: the transcript so far (``None`` counts as empty).
        update: one message-like value or a list (or tuple) of them; each is coerced with
            :func:`coerce_message`.

    Returns:
        A new list: ``current`` with same-id messages replaced in place, followed by the
        messages whose ids were not present (in update order). A message that replaces an
        untrusted one stays untrusted (taint is never cleared by a replacement).

    Raises:
        TypeError: an update item is not message-like.
    """
    items = update if isinstance(update, list | tuple) else [update]
    result = list(current) if current is not None else []
    position = {m.id: i for i, m in enumerate(result) if isinstance(m, Message)}
    for item in items:
        message = coerce_message(item)
        where = position.get(message.id)
        if where is None:
            position[message.id] = len(result)
            result.append(message)
        else:
            old = result[where]
            if getattr(old, "untrusted", False) and not message.untrusted:
                # Taint is sticky: replacing an untrusted message (by reusing its id) keeps
                # the transcript tainted, with its source.
                message = message.model_copy(
                    update={"untrusted": True, "source": message.source or old.source}
                )
            result[where] = message
    return result


class MessagesState(BaseModel):
    """A ready-made graph state holding one chat transcript.

    Attributes:
        messages: the transcript, merged with :func:`add_messages`.
    """

    messages: Annotated[list[Message], add_messages] = []


for _cls in (Message, ToolCall, ModelResponse):
    serde.register(_cls, name=f"graphflow.agents.{_cls.__name__}")
