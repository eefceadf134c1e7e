"""``RunPort``: what a ``NodeContext`` asks of its run, and ``EngineFault``, how a failure of
those asks is told apart from the node's own errors.

The protocol is kept beside the failure of its writes and apart from ``engine.context``, whose
``NodeContext`` is the surface node code uses: a context reaches its run only through these
methods (``engine.run_state.RunState`` provides them), and an error of the run's storage
inside one (``engine_faults``) stops the run as itself, whatever the node catches.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol

import anyio.lowlevel

from checkpoints.models import DecisionRecord, DispatchRecord
from graphflow.engine.witness import Witness


class RunPort(Protocol):
    """What a ``NodeContext`` asks of its run (``engine.run_state.RunState`` provides it)."""

    @property
    def thread_id(self) -> str:
        """The thread being run."""
        ...

    @property
    def principal(self) -> Any:
        """Who started or resumed the run."""
        ...

    @property
    def decisions(self) -> Mapping[str, Any]:
        """The decisions given to this run, by function call id."""
        ...

    @property
    def durable(self) -> bool:
        """Whether the run has a store (without one, nothing a node does is kept)."""
        ...

    @property
    def token(self) -> anyio.lowlevel.EventLoopToken | None:
        """The run's event loop, for calls from a sync node's worker thread."""
        ...

    @property
    def witness(self) -> Witness:
        """The run's evidence writer (for the runtime's own nodes, see ``runtime_witness``)."""
        ...

    @property
    def checkpoint_id(self) -> str | None:
        """The thread's checkpoint the run stands on (the root namespace's)."""
        ...

    @property
    def frozen(self) -> str | None:
        """Why a task of this run froze the thread (no tool call is dispatched after), or
        None."""
        ...

    def note_freeze(self, reason: str) -> None:
        """A task is freezing the thread."""
        ...

    async def save_memo(self, task_id: str, key: str, value: Any) -> None:
        """Commit a memoized step result of a running task."""
        ...

    async def claim_dispatch(
        self, key: str, tool: str, fingerprint: str | None
    ) -> DispatchRecord | None:
        """Claim a tool call: None when claimed now, else the earlier claim's record."""
        ...

    async def complete_dispatch(
        self, key: str, status: str, result: Any, error: str | None
    ) -> None:
        """Record a claimed call's outcome (``succeeded`` or ``failed``)."""
        ...

    async def dispatch_record(self, key: str) -> DispatchRecord | None:
        """The dispatch record of ``key`` in the thread, or None (never claimed)."""
        ...

    async def record_decision(self, record: DecisionRecord) -> None:
        """Append a decision record."""
        ...

    def emit_custom(self, node: str, step: int, name: str, data: Any) -> None:
        """Send a ``custom`` stream event."""
        ...


class EngineFault(BaseException):
    """A failure of the engine's own storage while a node ran (a memo or dispatch commit).

    It is not the node's failure: the run stops and the original error is raised as is.
    A ``BaseException`` so that a node's ``except Exception`` does not swallow it.
    """

    def __init__(self, error: BaseException):
        super().__init__(error)
        self.error = error


@asynccontextmanager
async def engine_faults() -> AsyncIterator[None]:
    """Raise an error of the run's storage inside as ``EngineFault``."""
    try:
        yield
    except Exception as e:
        raise EngineFault(e) from e
