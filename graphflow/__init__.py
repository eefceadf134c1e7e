"""graphflow: a durable graph workflow engine with checkpointed interrupts."""

from checkpoints import serde as _serde
from graphflow.builder import StateGraph
from graphflow.compiled import CompiledGraph
from graphflow.engine.context import NodeContext, interrupt
from graphflow.errors import (
    AmbiguousResumeError,
    GraphflowError,
    GraphValidationError,
    InvalidArgumentError,
    InvalidRouteError,
    InvalidUpdateError,
    NodeError,
    NothingToResumeError,
    RecursionLimitError,
    ThreadBusyError,
    ThreadCancelledError,
    ThreadFinishedError,
    ThreadNotFoundError,
    ThreadPausedError,
    UnknownPauseError,
)
from graphflow.retry import RetryPolicy
from graphflow.types import (
    END,
    START,
    Command,
    Event,
    Pause,
    RunResult,
    Send,
    StateSnapshot,
    TaskInfo,
    ToolConfirmationPause,
    ToolConfirmationRequest,
)

_serde.register(Send, name="graphflow.Send")

__all__ = [
    "AmbiguousResumeError",
    "Command",
    "CompiledGraph",
    "END",
    "Event",
    "GraphValidationError",
    "GraphflowError",
    "InvalidArgumentError",
    "InvalidRouteError",
    "InvalidUpdateError",
    "NodeContext",
    "NodeError",
    "NothingToResumeError",
    "Pause",
    "RecursionLimitError",
    "RetryPolicy",
    "RunResult",
    "START",
    "Send",
    "StateGraph",
    "StateSnapshot",
    "TaskInfo",
    "ThreadBusyError",
    "ThreadCancelledError",
    "ThreadFinishedError",
    "ThreadNotFoundError",
    "ThreadPausedError",
    "ToolConfirmationPause",
    "ToolConfirmationRequest",
    "UnknownPauseError",
    "interrupt",
]
