"""Chat messages, tool calls and model responses (defined in ``graphflow.messages``)."""

from graphflow.messages import (
    RAW_ARGUMENTS_KEY,
    Message,
    MessageLike,
    MessagesState,
    ModelResponse,
    Role,
    ToolCall,
    add_messages,
    coerce_message,
)

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
