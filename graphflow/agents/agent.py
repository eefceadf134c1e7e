"""``Agent`` and ``AgentNode``: an LLM agent loop whose every turn is a durable step.

Inside the node, each model response is a memoized step (``ctx.step_once``), so a resumed
or crashed node never asks the model again for a committed turn; each tool call runs
through ``ctx.dispatch_once``, so a call that ran is never run again. A call that needs
confirmation and has no decision becomes a ``tool_confirmation`` pause; the calls of the
same turn that need none still run before the node pauses.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from checkpoints.models import CallId, DecisionRecord, ThreadId
from graphflow.agents.messages import Message, ModelResponse, ToolCall, coerce_message
from graphflow.agents.models import Model
from graphflow.agents.tools import Tool, ToolArgumentError
from graphflow.agents.tools import tool as make_tool
from graphflow.decisions import Decision, tool_call_fingerprint
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
    """An LLM agent: a model, tools, an instruction and which tools need confirmation."""

    def __init__(
        self,
        name: str,
        model: Model,
        tools: Sequence[Tool | Callable[..., Any]] = (),
        instruction: str | None = None,
        require_confirmation: bool | Sequence[str] = False,
        confirmation_handler: HandlerLike | None = None,
        max_turns: int = 10,
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
        self.confirmation_handler = confirmation_handler
        self.max_turns = max_turns

    @property
    def may_need_confirmation(self) -> bool:
        """Whether any call of this agent may pause for a decision."""
        return self._confirm_all or bool(self._confirm)

    def needs_confirmation(self, tool_name: str) -> bool:
        """Whether a call of this tool waits for a decision before it runs."""
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
            resp: ModelResponse = await ctx.step_once(
                "model", agent.model.generate, convo, agent.tools
            )
            new.append(resp.to_message(f"{ctx.task_id}-t{turn}"))
            if not resp.tool_calls:
                break
            pauses: list[PauseRequest] = []
            results: list[Message] = []
            for call in resp.tool_calls:
                content = await self._handle_call(ctx, Proposal(ctx.task_id, turn, call), pauses)
                if content is not None:
                    results.append(
                        Message(
                            id=f"{ctx.task_id}-t{turn}-{call.id}",
                            role="tool",
                            content=content,
                            tool_call_id=call.id,
                            name=call.name,
                        )
                    )
            if pauses:
                ctx.pause(*pauses)
            new.extend(results)
        return {self.messages_key: new}

    async def _handle_call(
        self, ctx: NodeContext, proposal: Proposal, pauses: list[PauseRequest]
    ) -> str | None:
        """The tool result text for the model, or None when the call pauses.

        Everything about a call (its pause, a handler's decision, its dispatch record) is
        keyed by its ``Proposal``, never by the bare call id: providers number calls per
        response, so a later turn or run may propose another call under the same id, and
        that one is authorized and, where needed, confirmed afresh.
        """
        agent = self.agent
        call = proposal.call
        tool = agent.tools_by_name.get(call.name)
        if tool is None:
            return f"Error: unknown tool {call.name!r}; available: {sorted(agent.tools_by_name)}"
        try:
            args = tool.validate(call.args)
        except ToolArgumentError as e:
            return f"Error: invalid arguments for {call.name}: {e}"
        fingerprint = tool_call_fingerprint(call.name, call.args)
        request = ToolConfirmationRequest(
            call.name, call.id, dict(call.args), fingerprint, self.name
        )
        if agent.needs_confirmation(call.name):
            decision = await self._decision(ctx, proposal, request)
            if decision is None:
                pauses.append(_pause(proposal.key("tc"), request, None))
                return None
            if decision.verdict == "deny":
                why = f": {decision.reason}" if decision.reason else ""
                return f"Tool call {call.id} ({call.name}) was denied by a human{why}."

        async def run() -> Any:
            return await tool.arun(args)

        force = False
        if tool.idempotent:
            force = True
        else:
            found, ans = ctx.answer(proposal.key("unknown"))
            if found:
                d = Decision.coerce(ans)
                if d.verdict == "deny":
                    return (
                        f"Tool call {call.id} ({call.name}) may or may not have run before a "
                        "crash; a human chose not to run it again."
                    )
                force = True
        out = await ctx.dispatch_once(
            proposal.dispatch_key, call.name, fingerprint, run, force=force
        )
        if out.status == "unknown":
            pauses.append(_pause(proposal.key("unknown"), request, "unknown"))
            return None
        if out.status == "failed":
            return f"Error: tool {call.name} failed: {out.error}"
        return _as_text(out.result)

    async def _decision(
        self, ctx: NodeContext, proposal: Proposal, request: ToolConfirmationRequest
    ) -> Decision | None:
        found, ans = ctx.answer(proposal.key("tc"))
        if found:
            d = Decision.coerce(ans)
            # Decisions are matched to the call's fingerprint when stored; check it again.
            if d.fingerprint is not None and d.fingerprint != request.fingerprint:
                return None
            return d
        handler = self.agent.confirmation_handler
        if handler is None:
            return None

        async def ask() -> dict[str, Any] | None:
            decide: Any = getattr(handler, "decide", handler)
            res = decide(request)
            if inspect.isawaitable(res):
                res = await res
            if res is None:
                return None
            d = Decision.coerce(res)
            ok = d.fingerprint is None or d.fingerprint == request.fingerprint
            # Recorded inside the memoized step: once, however often the node reruns.
            await ctx.record_decision(
                DecisionRecord(
                    ThreadId(ctx.thread_id),
                    CallId(request.function_call_id),
                    d.verdict,
                    d.fingerprint,
                    d.by or "confirmation_handler",
                    d.reason,
                    applied=ok,
                    note=None if ok else "fingerprint does not match the proposed call",
                )
            )
            return d.as_answer() if ok else None

        raw = await ctx.step_once(proposal.key("handler"), ask)
        return Decision.coerce(raw) if raw is not None else None


@dataclass(frozen=True, slots=True)
class Proposal:
    """One proposed tool call: the call, in the model turn of the task that proposed it."""

    task_id: str
    turn: int
    call: ToolCall

    def key(self, what: str) -> str:
        """A key for this proposal's pause or memo, unique within its task."""
        return f"{what}:t{self.turn}:{self.call.id}"

    @property
    def dispatch_key(self) -> str:
        """The key of this proposal's dispatch record, unique in the thread: the call id,
        then the task and turn that proposed it."""
        return f"{self.call.id}@{self.task_id}:t{self.turn}"


def _pause(key: str, request: ToolConfirmationRequest, outcome: str | None) -> PauseRequest:
    value: dict[str, Any] = {
        "request": {
            "tool_name": request.tool_name,
            "function_call_id": request.function_call_id,
            "args": request.args,
            "fingerprint": request.fingerprint,
            "agent": request.agent,
        }
    }
    if outcome is not None:
        value["outcome"] = outcome
        value["message"] = (
            f"tool call {request.function_call_id} ({request.tool_name}) was claimed for "
            "dispatch but its outcome was never recorded (a crash?): approve to run it again, "
            "deny to tell the model it did not run"
        )
    return PauseRequest(key, "tool_confirmation", value)


def _read_messages(state: Any, key: str) -> list[Message]:
    raw = state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)
    return [coerce_message(m) for m in (raw or [])]


def _as_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    import json

    try:
        return json.dumps(result, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(result)
