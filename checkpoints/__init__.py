"""Checkpoint storage for graphflow: records, the serializer, and backends.

This package never imports ``graphflow`` (enforced by a test and import-linter).
"""

from checkpoints import serde
from checkpoints.base import Checkpointer
from checkpoints.batch import CommitBatch, ThreadUpdate
from checkpoints.errors import (
    CheckpointError,
    CorruptCheckpointError,
    HeadConflictError,
    LeaseHeldError,
    LeaseLostError,
    ReadOnlyStoreError,
    SchemaVersionError,
    SerializationError,
    StoreLockedError,
    StorePathError,
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

serde.register(TaskSpec, name="checkpoints.TaskSpec")

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
    "StoreLockedError",
    "StorePathError",
    "TaskRecord",
    "TaskSpec",
    "ThreadInfo",
    "ThreadRecord",
    "ThreadUpdate",
]
