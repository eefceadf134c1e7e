"""Checkpoint storage for graphflow: records, the serializer, and backends.

This package never imports ``graphflow`` (enforced by a test and import-linter).

Each public name is imported from its module on first use (``checkpoints.X``, or ``from
checkpoints import X``): a process pays only for what it uses. ``SqliteCheckpointer`` alone
loads no ``MemoryCheckpointer``, and ``import checkpoints`` alone none of its modules.
"""

import typing as _typing

if _typing.TYPE_CHECKING:
    from checkpoints import serde as serde
    from checkpoints.base import Checkpointer
    from checkpoints.batch import CommitBatch, ThreadUpdate
    from checkpoints.errors import (
        CheckpointError,
        CorruptCheckpointError,
        FrozenThreadError,
        HeadConflictError,
        LeaseHeldError,
        LeaseLostError,
        ReadOnlyStoreError,
        SchemaVersionError,
        SerializationError,
        StoreIOError,
        StoreLockedError,
        StorePathError,
        ThreadChangedError,
    )
    from checkpoints.memory import MemoryCheckpointer
    from checkpoints.models import (
        AnswerRecord,
        ChannelWrite,
        CheckpointRecord,
        DecisionRecord,
        DispatchRecord,
        MemoRecord,
        PauseRecord,
        ResumePoint,
        TaskRecord,
        TaskSpec,
        ThreadInfo,
        ThreadRecord,
    )
    from checkpoints.sqlite import SqliteCheckpointer

_HOMES: dict[str, tuple[str, ...]] = {
    "checkpoints.base": ("Checkpointer",),
    "checkpoints.batch": ("CommitBatch", "ThreadUpdate"),
    "checkpoints.errors": (
        "CheckpointError",
        "CorruptCheckpointError",
        "FrozenThreadError",
        "HeadConflictError",
        "LeaseHeldError",
        "LeaseLostError",
        "ReadOnlyStoreError",
        "SchemaVersionError",
        "SerializationError",
        "StoreIOError",
        "StoreLockedError",
        "StorePathError",
        "ThreadChangedError",
    ),
    "checkpoints.memory": ("MemoryCheckpointer",),
    "checkpoints.models": (
        "AnswerRecord",
        "ChannelWrite",
        "CheckpointRecord",
        "DecisionRecord",
        "DispatchRecord",
        "MemoRecord",
        "PauseRecord",
        "ResumePoint",
        "TaskRecord",
        "TaskSpec",
        "ThreadInfo",
        "ThreadRecord",
    ),
    "checkpoints.sqlite": ("SqliteCheckpointer",),
}
"""Where each public name lives (every name of ``__all__``, once)."""

_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> _typing.Any:
    """A public name, imported from its module and bound here on first use; ``serde``, the
    serializer (a submodule, as an eager ``from checkpoints import serde`` made it)."""
    import importlib

    if name == "serde":
        return importlib.import_module("checkpoints.serde")
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'checkpoints' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
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
]
