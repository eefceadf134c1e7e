"""LLM agents as graph nodes, with tools and durable tool-confirmation pauses."""

from graphflow.agents.agent import Agent, AgentNode, ConfirmationHandler
from graphflow.agents.messages import (
    Message,
    MessagesState,
    ModelResponse,
    ToolCall,
    add_messages,
    coerce_message,
)
from graphflow.agents.models import (
    Model,
    ModelCall,
    ModelError,
    OpenAIChatModel,
    ScriptedModel,
    ScriptExhaustedError,
)
from graphflow.agents.tools import Tool, ToolArgumentError, tool

__all__ = [
    "Agent",
    "AgentNode",
    "ConfirmationHandler",
    "Message",
    "MessagesState",
    "Model",
    "ModelCall",
    "ModelError",
    "ModelResponse",
    "OpenAIChatModel",
    "ScriptExhaustedError",
    "ScriptedModel",
    "Tool",
    "ToolArgumentError",
    "ToolCall",
    "add_messages",
    "coerce_message",
    "tool",
]
