"""``NodeContext``: what a running node can see and do, and the pause signal.

A context talks to the run it belongs to only through ``RunPort`` (``engine.port``): the
run's identity and decisions, and the durable writes a node may cause (a memoized step, a
tool dispatch, a decision record, a custom event).
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

import anyio
import anyio.from_thread
import anyio.to_thread

from checkpoints.models import DecisionRecord
from graphflow.engine.pauses import PauseRequest, make_pause_id
from graphflow.engine.port import RunPort, engine_faults
from graphflow.engine.witness import Witness
from graphflow.errors import GraphflowError, ThreadFrozenError


class PauseSignal(BaseException):
    """Raised inside a node to stop it at pauses; the engine catches it.

    It derives from ``BaseException`` so that a node's ``except Exception`` does not swallow it.
    """

    def __init__(self, pauses: list[PauseRequest], *, records: list[Any] | None = None):
        super().__init__(pauses)
        self.pauses = pauses
        self.records: list[Any] = records or []
        """Pause records a subgraph run already stored (it pauses its parent's task)."""


class FreezeSignal(BaseException):
    """Raised inside a node to freeze its thread (``ctx.freeze``): the run stops, the thread
    is ``frozen`` until it is unfrozen, and the node runs again after that."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


__all__ = [
    "DispatchOutcome",
    "FreezeSignal",
    "NodeContext",
    "PauseRequest",
    "PauseSignal",
    "current_context",
    "interrupt",
    "reset_current",
    "set_current",
]

_current: contextvars.ContextVar[NodeContext] = contextvars.ContextVar("graphflow_node_ctx")


class NodeContext:
    """The context of one task: ids, the principal, interrupts, memoized steps and events."""

    def __init__(
        self,
        run: RunPort,
        *,
        task_id: str,
        node: str,
        step: int,
        answers: Mapping[str, Any],
        memos: dict[str, Any],
        attempt: int,
    ):
        self._run = run
        self.task_id = task_id
        self.node = node
        self.step = step
        self.attempt = attempt
        self._answers = answers
        self._memos = memos
        self._interrupts = 0
        self._step_counts: dict[str, int] = {}

    @property
    def thread_id(self) -> str:
        """The thread this run belongs to."""
        return self._run.thread_id

    @property
    def checkpoint_id(self) -> str | None:
        """The thread's checkpoint the run stands on (its pauses are recorded there)."""
        return self._run.checkpoint_id

    @property
    def principal(self) -> Any:
        """Who started or resumed the run (``principal=`` of invoke), or None."""
        return self._run.principal

    @property
    def decisions(self) -> Mapping[str, Any]:
        """Decisions given to this run, by function call id (for tool-confirmation nodes)."""
        return self._run.decisions

    def answer(self, key: str) -> tuple[bool, Any]:
        """Whether the pause with this key (within the task) has an answer, and the answer."""
        pid = make_pause_id(self.task_id, key)
        if pid in self._answers:
            return True, self._answers[pid]
        return False, None

    def answers_under(self, prefix: str) -> dict[str, Any]:
        """The answers of this task's pauses whose key starts with ``prefix``, by key."""
        start = make_pause_id(self.task_id, prefix)
        cut = len(make_pause_id(self.task_id, ""))
        return {pid[cut:]: a for pid, a in self._answers.items() if pid.startswith(start)}

    def pause_id(self, key: str) -> str:
        """The stable id of this task's pause with ``key``."""
        return make_pause_id(self.task_id, key)

    def interrupt(self, value: Any) -> Any:
        """Pause the node with ``value``; after resume, return the answer.

        Answers are matched by call order within the node: the n-th ``interrupt`` of a rerun
        returns the answer to the n-th pause.
        """
        key = f"i{self._interrupts}"
        self._interrupts += 1
        found, ans = self.answer(key)
        if found:
            return ans
        raise PauseSignal([PauseRequest(key, "interrupt", value)])

    async def step_once(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` once and commit its result; on a rerun, return the stored result.

        Calls are keyed by ``name`` and by how many times that name was used before in this
        execution of the node, so a loop may call it repeatedly with one name.
        """
        n = self._step_counts.get(name, 0)
        self._step_counts[name] = n + 1
        key = f"{name}#{n}" if n else name
        if key in self._memos:
            return self._memos[key]
        if inspect.iscoroutinefunction(fn):
            result = await fn(*args)
        else:
            result = await anyio.to_thread.run_sync(fn, *args)
            if inspect.isawaitable(result):
                result = await result
        async with engine_faults():
            await self._run.save_memo(self.task_id, key, result)
        self._memos[key] = result
        return result

    def freeze(self, reason: str) -> NoReturn:
        """Freeze the thread: the run stops here and nothing runs until an operator unfreezes
        it (``graph.unfreeze``); this node then runs again. From now on no tool call of this
        run is dispatched (``dispatch_once``), a sibling task's neither."""
        self._run.note_freeze(reason)
        raise FreezeSignal(reason)

    def check_not_frozen(self) -> None:
        """Stop this task (``FreezeSignal``) when another task of the run froze the thread:
        the enforcement point before a dispatch (``dispatch_once`` asks it too)."""
        reason = self._run.frozen
        if reason is not None:
            raise FreezeSignal(reason)

    def pause(self, *requests: PauseRequest) -> NoReturn:
        """Stop the node at one or more pauses (custom kinds such as tool confirmation)."""
        raise PauseSignal(list(requests))

    async def dispatch_once(
        self,
        key: str,
        tool: str,
        fingerprint: str | None,
        fn: Callable[[], Awaitable[Any]],
        *,
        force: bool = False,
    ) -> DispatchOutcome:
        """Run a side effect at most once per (thread, ``key``) (DESIGN.md promise 4).

        The claim is committed before ``fn`` runs (with the decision that allowed it) and the
        outcome after. When the call was already claimed, its recorded outcome is returned
        without running ``fn``; a claim without an outcome (a crash in between) is reported
        as ``"unknown"`` unless ``force`` (a human confirmed it did not run, or the tool is
        idempotent) runs it again. A thread frozen from outside while this run held it
        (``graph.freeze``) refuses the claim: ``fn`` does not run and the task stops as a
        freeze does (``FreezeSignal``).
        """
        run = self._run
        self.check_not_frozen()
        if not run.durable:
            return await _run_outcome(fn)
        async with engine_faults():
            try:
                earlier = await run.claim_dispatch(key, tool, fingerprint)
            except ThreadFrozenError as e:  # (and no sibling's call is dispatched)
                reason = e.reason or "frozen from outside the run"
                run.note_freeze(reason)
                raise FreezeSignal(reason) from None
        if earlier is not None:
            if earlier.status != "claimed":
                return DispatchOutcome(earlier.status, earlier.result, earlier.error)
            if not force:
                return DispatchOutcome("unknown")
        out = await _run_outcome(fn)
        async with engine_faults():
            await run.complete_dispatch(key, out.status, out.result, out.error)
        return out

    async def dispatched(self, key: str) -> DispatchOutcome | None:
        """The outcome of the call ``dispatch_once(key, ...)`` ran before (``succeeded`` or
        ``failed``), or None: never claimed, or claimed with no outcome (a crash in between;
        ``dispatch_once`` reports that). A rerun of a node asks it before judging a call
        again: a call that ran keeps its result, whoever resumes and whatever the policy
        says now."""
        if not self._run.durable:
            return None
        async with engine_faults():
            found = await self._run.dispatch_record(key)
        if found is None or found.status == "claimed":
            return None
        return DispatchOutcome(found.status, found.result, found.error)

    async def record_decision(self, record: DecisionRecord) -> None:
        """Append a decision record (for example one made by a confirmation handler)."""
        if self._run.durable:
            async with engine_faults():
                await self._run.record_decision(record)

    def has_memo(self, name: str) -> bool:
        """Whether a memoized step with this exact key was committed."""
        return name in self._memos

    def emit(self, name: str, data: Any = None) -> None:
        """Send a custom event to ``stream(..., mode="debug")`` consumers."""
        self._run.emit_custom(self.node, self.step, name, data)

    def run_sync(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
        """Run a coroutine function from a sync node running in a worker thread."""
        return anyio.from_thread.run(fn, *args, token=self._run.token)


DispatchStatus = Literal["succeeded", "failed", "unknown"]
"""How a dispatch ended: the call ran and returned, ran and raised, or its outcome was
never recorded (a crash between claim and outcome)."""


@dataclass(frozen=True, slots=True)
class DispatchOutcome:
    """The outcome of ``dispatch_once``."""

    status: DispatchStatus
    result: Any = None
    error: str | None = None


async def _run_outcome(fn: Callable[[], Awaitable[Any]]) -> DispatchOutcome:
    try:
        return DispatchOutcome("succeeded", await fn())
    except Exception as e:
        return DispatchOutcome("failed", None, f"{type(e).__name__}: {e}")


def current_context() -> NodeContext:
    """The context of the node running in this task; error outside of a node."""
    try:
        return _current.get()
    except LookupError:
        raise GraphflowError("interrupt() was called outside of a running graph node") from None


def interrupt(value: Any) -> Any:
    """Pause the current node with ``value``; after resume, return the answer."""
    return current_context().interrupt(value)


def set_current(ctx: NodeContext) -> contextvars.Token[NodeContext]:
    """Make ``ctx`` the current context (the engine calls this around a node)."""
    return _current.set(ctx)


def reset_current(token: contextvars.Token[NodeContext]) -> None:
    """Undo ``set_current``."""
    _current.reset(token)


def runtime_witness(ctx: NodeContext) -> Witness:
    """The run's evidence writer, for the runtime's own nodes (``AgentNode`` records the
    stages of its tool calls). Not part of the node API: node code gets no handle to the
    evidence log, and no field of an event comes from it."""
    return ctx._run.witness
