"""Public value types: markers, routing, pauses, results, events and snapshots."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from checkpoints import serde
from checkpoints.models import DecisionRecord, PauseKind, TaskStatus

START = "__start__"
"""The virtual node every run starts from."""

END = "__end__"
"""The virtual node that ends a run."""

RunStatus = Literal["done", "paused"]
"""How a run ended: its frontier is empty, or it waits for answers."""

StreamMode = Literal["values", "updates", "debug"]
"""What a stream yields: full state per step, each step's updates, or everything."""

EventType = Literal[
    "values", "updates", "task_start", "task_end", "checkpoint", "custom", "pause", "done", "paused"
]
"""What an ``Event`` holds.

- ``values``: the full state after a step (mode ``values``).
- ``updates``: ``{node: update}`` of a step (modes ``updates``, ``debug``).
- ``task_start`` / ``task_end``: a task's attempt began / its outcome (mode ``debug``).
- ``checkpoint``: a step's checkpoint was committed (mode ``debug``).
- ``custom``: a node's ``ctx.emit`` (mode ``debug``).
- ``pause``: one pause of the run (every mode); ``data`` is the ``Pause``.
- ``done`` / ``paused``: how the run ended (every mode, exactly one, last).
"""


@dataclass(frozen=True, slots=True)
class Send:
    """Run ``node`` with ``arg`` as its input state (map-reduce fan-out)."""

    node: str
    arg: Any = None


# Registered where it is defined, so that no process can hold a Send it cannot store.
serde.register(Send, name="graphflow.Send")


@dataclass(frozen=True, slots=True)
class Command:
    """A node's return value that updates state and routes explicitly.

    ``goto`` (a node name, a list of names, a ``Send``, a list of them, or ``END``) replaces
    the node's static and conditional edges for this run of the node.
    """

    update: Any = None
    goto: str | Send | Sequence[str | Send] | None = None


@dataclass(frozen=True, slots=True)
class Pause:
    """A point where a run waits for a human.

    ``id`` is stable and unique in the thread; answer it with ``resume={id: value}``.
    ``checkpoint_id`` is the thread's checkpoint the pause was raised at (for a pause inside
    a subgraph, the root's). Snapshots (``get_state``, ``get_state_history``) also tell how
    it was answered: ``answered``, and then ``answer`` (the value given: a ``resume`` value,
    a tool decision as stored, ``None`` for a released gate), ``answered_by`` (the principal
    or ``submit(by=)``), ``answered_at`` and ``answer_reason`` (``"continued"`` for a gate
    that ``invoke(None)`` released). A pause a run returns is not answered yet.
    """

    id: str
    kind: PauseKind
    node: str
    value: Any
    thread_id: str
    checkpoint_id: str
    created_at: datetime
    answered: bool = field(default=False, kw_only=True)
    answer: Any = field(default=None, kw_only=True)
    answered_by: str | None = field(default=None, kw_only=True)
    answered_at: datetime | None = field(default=None, kw_only=True)
    answer_reason: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class ToolConfirmationRequest:
    """A proposed tool call that waits for a decision keyed by ``function_call_id``: what
    an approver sees (the CLI's ``pauses``, the web inbox).

    Attributes:
        tool_name, function_call_id, args, fingerprint, agent: the call as proposed.
        principal: the id of the principal the run acts for, or None.
        action_digest: the digest an approval is bound to (tool, arguments, principal,
            thread and policy version; ``graphflow.auth.action_digest``).
        risk, category: the tool's risk and AAEF high-impact category.
        policy_decision: why the call waits: ``requires_human_approval``, ``escalate``,
            ``defer`` or ``reauthorization_required`` (``None`` for ``require_confirmation``
            without a policy).
        policy_rule, reason, required_role: the deciding rule, its reason, and the role an
            escalated call's approver must hold.
        tainted, taint_sources: whether untrusted content reached the transcript, and from
            where.
        expires_at: when an approval of this call stops being valid, if it does.
        policy_version: the version of the policy that decided.
        describe: the tool's description of the action (``@tool(describe=...)``).
    """

    tool_name: str
    function_call_id: str
    args: dict[str, Any]
    fingerprint: str
    agent: str
    principal: str | None = None
    action_digest: str | None = None
    risk: str | None = None
    category: str | None = None
    policy_decision: str | None = None
    policy_rule: str | None = None
    reason: str | None = None
    required_role: str | None = None
    tainted: bool = False
    taint_sources: tuple[str, ...] = ()
    expires_at: datetime | None = None
    policy_version: str | None = None
    describe: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ToolConfirmationPause(Pause):
    """A pause for one proposed tool call; answer it with ``decisions={call_id: ...}``."""

    request: ToolConfirmationRequest | None = None

    @classmethod
    def from_event(cls, event: Event) -> ToolConfirmationPause | None:
        """The tool-confirmation pause an event carries, or ``None``."""
        data = event.data
        if isinstance(data, ToolConfirmationPause):
            return data
        return None


@dataclass(frozen=True, slots=True)
class Event:
    """One stream event; ``type`` says what ``data`` holds (see API.md, "Events")."""

    type: EventType
    node: str | None
    step: int | None
    data: Any
    thread_id: str


@dataclass(frozen=True, slots=True)
class RunResult:
    """What ``invoke`` returns."""

    status: RunStatus
    state: Any
    pauses: list[Pause]
    thread_id: str
    checkpoint_id: str | None
    ignored_decisions: tuple[DecisionRecord, ...] = ()
    """Decisions of this call that answered nothing (unknown call id, fingerprint mismatch,
    an interrupt's pause id ...), each with the reason in ``note``; also stored (see
    ``CompiledGraph.list_decisions``)."""


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """A task of a checkpoint's frontier and where it is in its lifecycle.

    ``pauses`` are the pauses the task raised (those of its subgraph's tasks included), with
    their answers. ``result`` is the task's update as ``{key: value}`` once it completed: as
    the node returned it while its step is pending; for a step a later checkpoint applied
    (whose writes are stored once, in that checkpoint's values) it is derived from them when
    the step had one task: a last-write-wins key's new value, the items a list key gained.
    It is ``None`` when the update cannot be known that way (a step of several tasks, or a
    reducer other than one that appends) and for tasks that did not complete.
    """

    id: str
    name: str
    status: TaskStatus
    attempts: int = 0
    error: str | None = None
    pauses: tuple[Pause, ...] = ()
    state: StateSnapshot | None = None
    result: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    """A thread's state at one checkpoint.

    ``pauses`` holds every pause raised at this checkpoint or by its tasks, with answers
    (see ``Pause``); ``metadata["source"]`` says what made the checkpoint: ``input``,
    ``loop`` (a step), ``update`` (``update_state``, ``cancel``) or ``fork``.
    """

    values: Any
    next: tuple[str, ...]
    tasks: tuple[TaskInfo, ...]
    pauses: tuple[Pause, ...]
    step: int
    checkpoint_id: str
    parent_checkpoint_id: str | None
    created_at: datetime
    metadata: dict[str, Any] = field(default_factory=dict)
