"""``Agent`` and ``AgentNode``: an LLM agent loop whose every turn is a durable step.

Inside the node, each model response is a memoized step (``ctx.step_once``), so a resumed
or crashed node never asks the model again for a committed turn; each proposed tool call
goes through the authorization pipeline (``graphflow.agents.pipeline``) and runs through
``ctx.dispatch_once``, so a call that ran is never run again. A call that needs a decision
and has none becomes a ``tool_confirmation`` pause; the calls of the same turn that need
none still run before the node pauses.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from graphflow.agents.messages import Message, ModelResponse, coerce_message
from graphflow.agents.models import Model
from graphflow.agents.pipeline import Proposal, handle_call, taint_of
from graphflow.agents.tools import Tool
from graphflow.agents.tools import tool as make_tool
from graphflow.auth.policy import Policy
from graphflow.auth.rbac import AccessControl
from graphflow.decisions import Decision
from graphflow.engine.context import NodeContext, PauseRequest
from graphflow.errors import InvalidArgumentError
from graphflow.types import ToolConfirmationRequest


class ConfirmationHandler(Protocol):
    """Asked before pausing for a call that needs confirmation; ``None`` means "ask a human"."""

    async def decide(self, request: ToolConfirmationRequest) -> Decision | None:
        """A decision on the request, or None to pause for a human."""
        ...


HandlerLike = ConfirmationHandler | Callable[[ToolConfirmationRequest], Awaitable[Any]]


class Agent:
    """An LLM agent: a model, tools, an instruction, and what authorizes its tool calls.

    Every call the model proposes goes through the authorization pipeline
    (``graphflow.agents.pipeline``): ``access_control`` (RBAC), the ``before_tool``
    callbacks, the ``policy`` (or, without one, ``require_confirmation``: listed tools pause
    for a human, others run), dispatch enforcement, execution, the ``after_tool`` callbacks.
    ``require_confirmation`` also applies with a policy: a listed tool the policy allows
    still waits for a human.
    """

    def __init__(
        self,
        name: str,
        model: Model,
        tools: Sequence[Tool | Callable[..., Any]] = (),
        instruction: str | None = None,
        require_confirmation: bool | Sequence[str] = False,
        confirmation_handler: HandlerLike | None = None,
        max_turns: int = 10,
        *,
        access_control: AccessControl | None = None,
        policy: Policy | None = None,
        before_tool: Callable[..., Any] | Sequence[Callable[..., Any]] = (),
        after_tool: Callable[..., Any] | Sequence[Callable[..., Any]] = (),
    ):
        if not name or "." in name or ":" in name:
            raise InvalidArgumentError(f"agent name {name!r} must be non-empty without '.'/':'")
        self.name = name
        self.model = model
        self.tools = [t if isinstance(t, Tool) else make_tool(t) for t in tools]
        self.tools_by_name = {t.name: t for t in self.tools}
        self.instruction = instruction
        if isinstance(require_confirmation, bool):
            self._confirm_all = require_confirmation
            self._confirm: frozenset[str] = frozenset()
        else:
            self._confirm_all = False
            self._confirm = frozenset(require_confirmation)
            unknown = sorted(self._confirm - set(self.tools_by_name))
            if unknown:
                raise InvalidArgumentError(
                    f"agent {name!r}: require_confirmation names unknown tools {unknown}"
                )
        if access_control is not None and not isinstance(access_control, AccessControl):
            raise InvalidArgumentError(
                f"agent {name!r}: access_control must be an AccessControl, not "
                f"{type(access_control).__name__}"
            )
        if policy is not None and not isinstance(policy, Policy):
            raise InvalidArgumentError(
                f"agent {name!r}: policy must be a Policy (Policy.from_yaml(...)), not "
                f"{type(policy).__name__}"
            )
        self.access_control = access_control
        self.policy = policy
        self.before_tool = _callbacks(before_tool, name, "before_tool")
        self.after_tool = _callbacks(after_tool, name, "after_tool")
        self.confirmation_handler = confirmation_handler
        self.max_turns = max_turns

    @property
    def may_need_confirmation(self) -> bool:
        """Whether any call of this agent may pause for a decision."""
        return (
            self._confirm_all
            or bool(self._confirm)
            or self.policy is not None
            or self.access_control is not None
        )

    def needs_confirmation(self, tool_name: str) -> bool:
        """Whether ``require_confirmation`` lists this tool (or all tools)."""
        return self._confirm_all or tool_name in self._confirm


class AgentNode:
    """A graph node running an ``Agent``; its name is the agent's. Reads/appends ``messages``."""

    def __init__(self, agent: Agent, *, messages_key: str = "messages"):
        self.agent = agent
        self.name = agent.name
        self.messages_key = messages_key

    async def __call__(self, state: Any, ctx: NodeContext) -> dict[str, Any]:
        """Run the agent loop until the model answers without tool calls, or pause."""
        history = _read_messages(state, self.messages_key)
        agent = self.agent
        system = (
            [Message(id=f"{self.name}-instruction", role="system", content=agent.instruction)]
            if agent.instruction
            else []
        )
        new: list[Message] = []
        for turn in range(agent.max_turns):
            convo = [*system, *history, *new]
            replayed = ctx.has_memo("model" if turn == 0 else f"model#{turn}")  # (step_once's)
            resp: ModelResponse = await ctx.step_once(
                "model", agent.model.generate, convo, agent.tools
            )
            new.append(resp.to_message(f"{ctx.task_id}-t{turn}"))
            if not resp.tool_calls:
                break
            pauses: list[PauseRequest] = []
            results: list[Message] = []
            seen: set[str] = set()
            for index, call in enumerate(resp.tool_calls):
                unusable = _unusable_id(call.id, seen)
                seen.add(call.id)
                taint = taint_of([*history, *new, *results])
                # (an unusable id could pass for another call's: never run, only recorded)
                slot = f"#{index}" if unusable is not None else ""
                proposal = Proposal(ctx.task_id, turn, call, replayed, slot)
                refused = (
                    None if unusable is None else f"tool call {call.id!r} was not run: {unusable}"
                )
                out = await handle_call(agent, ctx, proposal, taint, pauses, refused)
                if out.content is not None:
                    results.append(
                        Message(
                            id=f"{ctx.task_id}-t{turn}-{call.id}{slot}",
                            role="tool",
                            content=out.content,
                            tool_call_id=call.id,
                            name=call.name,
                            untrusted=out.untrusted,
                            source=f"tool:{call.name}" if out.untrusted else None,
                        )
                    )
            if pauses:
                ctx.pause(*pauses)
            new.extend(results)
        return {self.messages_key: new}


_CALL_ID = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


def _unusable_id(call_id: str, seen: set[str]) -> str | None:
    """Why a proposed call's id cannot be used, or None. Ids key pauses, decisions, memos
    and dispatch records: one that repeats in a response, or holds characters those keys
    use (``:``, ``#``), could pass for another call's."""
    if call_id in seen:
        return "its id repeats an earlier call of the same response; give each call its own id"
    if not _CALL_ID.fullmatch(call_id):
        return (
            "its id must be 1 to 128 letters, digits, '_', '-' or '.' (ids key the call's "
            "pause, decision and dispatch record)"
        )
    return None


def _callbacks(value: Any, agent: str, what: str) -> tuple[Callable[..., Any], ...]:
    items = (value,) if callable(value) else tuple(value or ())
    for cb in items:
        if not callable(cb):
            raise InvalidArgumentError(
                f"agent {agent!r}: {what} holds {cb!r}, which is not callable"
            )
    return items


def _read_messages(state: Any, key: str) -> list[Message]:
    raw = state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)
    return [coerce_message(m) for m in (raw or [])]
