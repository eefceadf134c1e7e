"""graphflow: a durable graph workflow engine with checkpointed interrupts.

The public names below are bound on first use: the first ``graphflow.X`` (or ``from
graphflow import X``) imports the whole API, the engine with it, exactly as an eager import
would. Importing a light submodule alone (``graphflow.cli`` for ``graphflow --help``) then
costs no engine import.
"""

import typing as _typing

if _typing.TYPE_CHECKING:
    from graphflow.builder import StateGraph
    from graphflow.compiled import CompiledGraph
    from graphflow.engine.context import NodeContext, interrupt
    from graphflow.errors import (
        AmbiguousResumeError,
        GraphflowError,
        GraphMismatchError,
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

_HOMES: dict[str, tuple[str, ...]] = {
    # graphflow.compiled first: importing it registers how StateGraph.compile() builds one.
    "graphflow.compiled": ("CompiledGraph",),
    "graphflow.builder": ("StateGraph",),
    "graphflow.engine.context": ("NodeContext", "interrupt"),
    "graphflow.errors": (
        "AmbiguousResumeError",
        "GraphMismatchError",
        "GraphValidationError",
        "GraphflowError",
        "InvalidArgumentError",
        "InvalidRouteError",
        "InvalidUpdateError",
        "NodeError",
        "NothingToResumeError",
        "RecursionLimitError",
        "ThreadBusyError",
        "ThreadCancelledError",
        "ThreadFinishedError",
        "ThreadFrozenError",
        "ThreadNotFoundError",
        "ThreadPausedError",
        "UnknownPauseError",
    ),
    "graphflow.retry": ("RetryPolicy",),
    "graphflow.types": (
        "END",
        "START",
        "Command",
        "Event",
        "Pause",
        "RunResult",
        "Send",
        "StateSnapshot",
        "TaskInfo",
        "ToolConfirmationPause",
        "ToolConfirmationRequest",
    ),
}
"""Where each public name lives (every name of ``__all__``, once)."""


def _load() -> None:
    """Import the public API and bind every one of its names in this module."""
    import importlib

    found: dict[str, object] = {}
    for module, names in _HOMES.items():
        mod = importlib.import_module(module)
        found.update((name, getattr(mod, name)) for name in names)
    globals().update(found)


def __getattr__(name: str) -> _typing.Any:
    """A public name (the whole API is bound on first use); ``graphflow.__version__``: the
    installed distribution's version, read when first asked (importing
    ``importlib.metadata`` at every import would slow every process that resumes a thread);
    ``"0+unknown"`` when graphflow runs from a tree it was not installed from."""
    if name == "__version__":
        from importlib import metadata

        try:
            version = metadata.version("graphflow-engine")
        except metadata.PackageNotFoundError:
            version = "0+unknown"
        globals()["__version__"] = version
        return version
    if name in __all__:
        _load()
        return globals()[name]
    raise AttributeError(f"module 'graphflow' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "AmbiguousResumeError",
    "Command",
    "CompiledGraph",
    "END",
    "Event",
    "GraphMismatchError",
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
