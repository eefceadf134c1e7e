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
    ThreadFrozenError,
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


def __getattr__(name: str) -> str:
    """``graphflow.__version__``: the installed distribution's version, read when first
    asked (importing ``importlib.metadata`` at every import would slow every process that
    resumes a thread); ``"0+unknown"`` when graphflow runs from a tree it was not installed
    from."""
    if name == "__version__":
        from importlib import metadata

        try:
            version = metadata.version("graphflow-engine")
        except metadata.PackageNotFoundError:
            version = "0+unknown"
        globals()["__version__"] = version
        return version
    raise AttributeError(f"module 'graphflow' has no attribute {name!r}")


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
    "ThreadFrozenError",
    "ThreadNotFoundError",
    "ThreadPausedError",
    "ToolConfirmationPause",
    "ToolConfirmationRequest",
    "UnknownPauseError",
    "interrupt",
]
