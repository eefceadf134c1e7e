"""Errors raised by checkpoint storage.

The tree (one root for the package; ``checkpoints`` cannot import graphflow's root)::

    CheckpointError                  any storage failure
    ├── SerializationError           a value cannot be stored (names the key and type)
    ├── CorruptCheckpointError       a stored record cannot be decoded or is missing
    │   └── serde.DecodeError        raised by ``checkpoints.serde.loads`` before context is known
    ├── SchemaVersionError           the store was written by a newer version of graphflow
    ├── LeaseHeldError               another live runner holds the thread's lease
    ├── LeaseLostError               this runner's lease was taken over or expired
    ├── HeadConflictError            compare-and-set on the thread head failed
    ├── ThreadChangedError           a write made on the thread's state as read found it changed
    ├── FrozenThreadError            the thread was frozen: its run's writes and claims are refused
    ├── StoreLockedError             another client held the store's write lock too long
    └── StorePathError               the store's path cannot be used as given (names it)
        └── ReadOnlyStoreError       a write to a store that is open read-only
"""

from __future__ import annotations

from collections.abc import Sequence


class CheckpointError(Exception):
    """Root of every error raised by the ``checkpoints`` package."""


class SerializationError(CheckpointError):
    """A value cannot be stored; raised when it is written, never at load.

    Attributes:
        key: the state key (channel) or record field that held the value, when known.
        type_name: the qualified name of the type that cannot be stored.
    """

    def __init__(self, message: str, *, key: str | None = None, type_name: str | None = None):
        super().__init__(message)
        self.key = key
        self.type_name = type_name


class CorruptCheckpointError(CheckpointError):
    """A stored record cannot be decoded, or a record it refers to is missing.

    Attributes:
        thread_id: the thread whose record is corrupt, when known.
        checkpoint_id: the checkpoint involved, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
    ):
        super().__init__(message)
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id


class SchemaVersionError(CheckpointError):
    """The store's schema is newer than this version of the library understands."""


class LeaseHeldError(CheckpointError):
    """Another live runner holds the thread's lease."""

    def __init__(self, thread_id: str, owner: str | None):
        super().__init__(
            f"thread {thread_id!r} is being run by {owner!r}; wait for it to finish or for "
            "its lease to expire"
        )
        self.thread_id = thread_id
        self.owner = owner


class LeaseLostError(CheckpointError):
    """The runner no longer holds the lease it is writing under."""

    def __init__(self, thread_id: str, owner: str):
        super().__init__(
            f"runner {owner!r} lost the lease of thread {thread_id!r}: another runner took "
            "the thread over; this run stops without writing"
        )
        self.thread_id = thread_id
        self.owner = owner


class HeadConflictError(CheckpointError):
    """The thread head moved since this runner read it (compare-and-set failed)."""

    def __init__(self, thread_id: str, expected: str | None, actual: str | None):
        super().__init__(
            f"thread {thread_id!r} head is {actual!r}, expected {expected!r}: another runner "
            "committed first"
        )
        self.thread_id = thread_id
        self.expected = expected
        self.actual = actual


class ThreadChangedError(CheckpointError):
    """The thread's status or pending pauses changed since the caller read them, so a write
    made on that condition wrote nothing (``Checkpointer.record_answers``)."""

    def __init__(self, thread_id: str):
        super().__init__(
            f"thread {thread_id!r} changed since it was read (a run resumed it): nothing was "
            "written; read its pauses again"
        )
        self.thread_id = thread_id


class FrozenThreadError(CheckpointError):
    """The thread is ``frozen`` (an operator froze it, maybe while this run held it): the
    store refuses the run's commits and tool-dispatch claims, so the run stops without
    writing and dispatches nothing more (see ``checkpoints.fencing``)."""

    def __init__(self, thread_id: str):
        super().__init__(
            f"thread {thread_id!r} is frozen: this run's writes and tool calls are refused "
            "until it is unfrozen; nothing was written"
        )
        self.thread_id = thread_id


class StoreLockedError(CheckpointError):
    """Another client (a backup, the sqlite3 shell, a stuck process) held the store's write
    lock for longer than the store waits (``busy_timeout``). Nothing was written: the same
    call can be retried.

    Attributes:
        path: the store's file.
    """

    def __init__(self, path: str, waited: float):
        super().__init__(
            f"checkpoint store {path!r} is locked by another writer (another process, or an "
            f"SQLite client such as a backup or the sqlite3 shell, held its write lock for "
            f"over {waited:g} s): nothing was written; the same call can be retried"
        )
        self.path = path


class StoreIOError(CheckpointError):
    """SQLite could not read or write the store's files (``SQLITE_IOERR``): the disk failed
    or is full, or a file SQLite keeps beside the store (``X.db-wal``, ``X.db-shm``) was
    removed or replaced while a process had the store open. The call wrote nothing.

    Attributes:
        path: the store's file.
    """

    def __init__(self, path: str, error: BaseException):
        super().__init__(
            f"checkpoint store {path!r} could not be read or written ({error}): the disk "
            f"failed or is full, or {path}-wal or {path}-shm was removed while a process had "
            "the store open. Nothing was written by this call; stop the processes that use "
            "the store, check the disk, then open it again (a removed -wal file loses the "
            "commits it held: check the store with get_state)"
        )
        self.path = path


class StorePathError(CheckpointError):
    """The store's path cannot be used: its directory is missing or not writable, it is a
    directory, or the file there is not a graphflow database. The message says what to do.

    Attributes:
        path: the path the store was given.
    """

    def __init__(self, message: str, *, path: str):
        super().__init__(message)
        self.path = path


class ReadOnlyStoreError(StorePathError):
    """A write to a store opened read-only (the file or its directory is not writable);
    nothing was written. Reads of such a store work."""


# -- factories of the errors both backends raise alike --------------------------------------
RESTORE = "restore the store from a backup"
"""What to do about a store's record that is missing or damaged (every such error says it)."""


def damaged(
    message: str, *, thread_id: str | None = None, checkpoint_id: str | None = None
) -> CorruptCheckpointError:
    """A stored record that is missing or not what was written: ``message``, and ``RESTORE``."""
    return CorruptCheckpointError(
        f"{message}; {RESTORE}", thread_id=thread_id, checkpoint_id=checkpoint_id
    )


def head_missing(thread_id: str, head: str | None) -> CorruptCheckpointError:
    """A thread whose head checkpoint is not stored (never taken for a new thread)."""
    return damaged(
        f"thread {thread_id!r}: head checkpoint {head!r} is missing",
        thread_id=thread_id,
        checkpoint_id=head,
    )


def pauses_missing(
    thread_id: str, missing: Sequence[str], head: str | None
) -> CorruptCheckpointError:
    """A thread whose pending pauses (as its row lists them) are not all stored."""
    return damaged(
        f"thread {thread_id!r}: pending pause records {sorted(missing)} are missing",
        thread_id=thread_id,
        checkpoint_id=head,
    )


def never_claimed(thread_id: str, call_id: str) -> CorruptCheckpointError:
    """An outcome recorded for a tool call that has no claim."""
    return damaged(
        f"tool call {call_id!r} of thread {thread_id!r} was never claimed", thread_id=thread_id
    )
