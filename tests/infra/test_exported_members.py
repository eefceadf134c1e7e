"""Pin each package's public names (STYLE.md #5): a change here is an API change."""

from __future__ import annotations

import importlib

import pytest

EXPECTED = {
    "graphflow": [
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
    ],
    "checkpoints": [
        "AnswerRecord",
        "ChannelWrite",
        "CheckpointError",
        "CheckpointRecord",
        "Checkpointer",
        "CommitBatch",
        "CorruptCheckpointError",
        "DecisionRecord",
        "DispatchRecord",
        "FrozenThreadError",
        "HeadConflictError",
        "LeaseHeldError",
        "LeaseLostError",
        "MemoRecord",
        "MemoryCheckpointer",
        "PauseRecord",
        "ReadOnlyStoreError",
        "ResumePoint",
        "SchemaVersionError",
        "SerializationError",
        "SqliteCheckpointer",
        "StoreIOError",
        "StoreLockedError",
        "StorePathError",
        "TaskRecord",
        "TaskSpec",
        "ThreadChangedError",
        "ThreadInfo",
        "ThreadRecord",
        "ThreadUpdate",
    ],
    "graphflow.worker": ["Worker", "WorkerResult"],
}


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_all_is_pinned_and_sorted(module: str) -> None:
    mod = importlib.import_module(module)
    assert list(mod.__all__) == EXPECTED[module]
    assert sorted(mod.__all__) == list(mod.__all__)
    for name in mod.__all__:
        assert hasattr(mod, name), name


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_public_names_have_docstrings(module: str) -> None:
    mod = importlib.import_module(module)
    for name in mod.__all__:
        obj = getattr(mod, name)
        if callable(obj) and not isinstance(obj, str):
            assert obj.__doc__, f"{module}.{name} has no docstring"


PUBLIC_PACKAGES = ["checkpoints", "graphflow", "graphflow.agents", "graphflow.auth"]


@pytest.mark.parametrize("module", PUBLIC_PACKAGES)
def test_the_namespace_is_all(module: str) -> None:
    """As httpx pins it: every public name of a package is in its ``__all__`` and nothing
    else is (submodules, which importing makes attributes of a package, aside)."""
    import types

    mod = importlib.import_module(module)
    for name in mod.__all__:  # graphflow binds its names on first use
        getattr(mod, name)
    public = sorted(
        name
        for name, value in vars(mod).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    )
    assert public == sorted(mod.__all__)
