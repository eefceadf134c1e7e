"""The authorization pipeline of one proposed tool call: a proposal, never an authority.

For every call the model proposes, in order (API.md, "Decisions and authorization"):

1. **access control**: the agent's ``AccessControl`` (RBAC); a denied call does not run and
   the model is told;
2. **before-tool callbacks**: ``None`` goes on, any other value skips the tool and becomes
   its result, raising aborts the run (``NodeError``); memoized, so a rerun of the node
   gets the same answer;
3. **policy and confirmation**: the agent's ``Policy`` (or, without one,
   ``require_confirmation``) decides; a call that needs a human pauses with a
   ``ToolConfirmationRequest`` carrying everything an approver needs; a decision on an
   escalated call counts only from an approver holding the required role;
4. **dispatch enforcement**: the approval is bound to the call's ``action_digest`` (tool,
   arguments as they will run, principal, thread, policy version): the pause id carries
   it, so an approval given for another digest (changed arguments, another principal, a
   new policy version) answers nothing and the call pauses again with the reason; an
   approval also expires (``Decision.approve(expires_at=...)`` or the rule's
   ``expires_in``, counted from when the call first paused). The call's evidence is
   written before it runs: a high or critical risk call whose evidence cannot be written
   does not run (it pauses, deferred, with ``"evidence unavailable: ..."``, evaluated again
   on every run); a low risk one runs and its gap is recorded;
5. **execute**: at most once per proposal (``NodeContext.dispatch_once``);
6. **after-tool callbacks**: inspect or replace the result; memoized like the first ones.

Every stage's outcome is an evidence event (``graphflow.agents.trail``). A high or critical
call with no principal never runs when the agent has a policy or access control: it
escalates. Results of
``untrusted_output`` tools, and input messages marked untrusted, taint the transcript: a
policy ``allow`` of a high or critical call from a tainted transcript becomes ``escalate``
(``Policy``); text inside a tool result never counts as an approval (approvals come only
through ``decisions=``).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from graphflow.agents.confirm import (
    Gate,
    decision_on,
    gate_of,
    pause_request,
    request_of,
)
from graphflow.agents.tools import Tool, ToolArgumentError
from graphflow.agents.trail import CallTrail
from graphflow.auth.context import ToolCallContext
from graphflow.auth.digest import action_digest
from graphflow.auth.principal import Principal
from graphflow.decisions import Decision, tool_call_fingerprint
from graphflow.engine.context import FreezeSignal, NodeContext
from graphflow.engine.pauses import PauseRequest
from graphflow.messages import ToolCall
from graphflow.types import ToolConfirmationRequest

if TYPE_CHECKING:
    from graphflow.agents.agent import Agent


@dataclass(frozen=True, slots=True)
class Proposal:
    """One proposed tool call: the call, in the model turn of the task that proposed it."""

    task_id: str
    turn: int
    call: ToolCall
    replayed: bool = False
    """The model turn was replayed from its memo (a rerun of the node): the call may have
    been decided, or run, by an earlier execution."""
    slot: str = ""
    """What tells apart a call whose id is unusable (it repeats an earlier call's): its
    place in the response (``#2``)."""

    def key(self, what: str) -> str:
        """A key for this proposal's pause or memo, unique within its task."""
        return f"{what}:t{self.turn}:{self.call.id}{self.slot}"

    @property
    def dispatch_key(self) -> str:
        """The key of this proposal's dispatch record, unique in the thread: the call id,
        then the task and turn that proposed it."""
        return f"{self.call.id}@{self.task_id}:t{self.turn}"


@dataclass(slots=True)
class CallOutcome:
    """What became of one proposed call: the tool result text for the model (None when the
    call paused), and whether it is untrusted content."""

    content: str | None = None
    untrusted: bool = False


async def handle_call(
    agent: Agent,
    ctx: NodeContext,
    proposal: Proposal,
    taint: tuple[bool, tuple[str, ...]],
    pauses: list[PauseRequest],
    unusable: str | None = None,
) -> CallOutcome:
    """Run one proposed call through the pipeline (see the module docstring); ``unusable``:
    why the call cannot run whatever it is (its id), recorded as such."""
    call = proposal.call
    out = CallOutcome()
    tool = agent.tools_by_name.get(call.name)
    principal = Principal.coerce(ctx.principal)
    problem = unusable
    if problem is None and tool is None:
        problem = f"unknown tool {call.name!r}; available: {sorted(agent.tools_by_name)}"
    elif problem is None and tool is not None:
        try:
            args = tool.validate(call.args)
        except ToolArgumentError as e:
            problem = str(e)
    if problem is not None or tool is None:
        trail = CallTrail.about(
            ctx,
            proposal,
            tool=call.name,
            agent=agent.name,
            principal=principal,
            taint=taint,
            risk=tool.effective_risk if tool is not None else "high",
            category=tool.category if tool is not None else None,
        )
        trail.unrunnable(problem or "")
        out.content = f"Error: {problem}"
        return out
    tctx = ToolCallContext.of(
        tool,
        args,
        call_id=call.id,
        thread_id=ctx.thread_id,
        node=ctx.node,
        agent=agent.name,
        principal=principal,
        tainted=taint[0],
        taint_sources=taint[1],
    )
    trail = CallTrail.of(ctx, proposal, tctx)
    if proposal.replayed:  # decided before: never judged again (another principal, expiry)
        if ctx.has_memo(proposal.key("refused")):
            return await _refused(ctx, proposal, out, "")  # (the stored text)
        done = await ctx.dispatched(proposal.dispatch_key)
        if done is not None:
            ran = done.status == "succeeded"
            return await _settle(agent, ctx, proposal, tool, tctx, trail,
                                 done.result if ran else done.error, ran, None)  # fmt: skip
    trail.proposed()
    # 1. access control
    if agent.access_control is not None:
        access = agent.access_control.check(principal, tool)
        if not access.allowed:
            trail.access_denied(access.reason)
            why = f"Tool call {call.id} ({call.name}) was refused: access denied ({access.reason})."
            return await _refused(ctx, proposal, out, why)
    # 2. before-tool callbacks
    if agent.before_tool:
        skipped = await ctx.step_once(proposal.key("before"), _before, agent.before_tool, tctx)
        if skipped is not None:
            trail.skipped(agent.before_tool[skipped["index"]], skipped["result"])
            out.content = as_text(skipped["result"])
            return out
    # 3. policy and confirmation
    gate = gate_of(agent, tctx)
    digest = action_digest(
        tool,
        args,
        principal_id=tctx.principal_id,
        thread_id=ctx.thread_id,
        policy_version=gate.version,
    )
    trail.policy(gate, digest)
    if gate.decision == "deny":
        why = f"Tool call {call.id} ({call.name}) was denied by policy: {gate.reason}."
        return await _refused(ctx, proposal, out, why)
    if gate.decision == "freeze":
        reason = f"policy froze the thread at tool call {call.id} ({call.name}): {gate.reason}"
        trail.frozen(gate, reason)
        ctx.freeze(reason)
    approval: tuple[str, Decision] | None = None
    if gate.needs_human:
        request = request_of(agent, tool, call, args, tctx, gate, digest)
        # A guarded agent's approval is bound to the digest (the pause id carries it); the
        # simple form (require_confirmation only) binds it to the call's fingerprint.
        key = proposal.key("tc")
        if agent.policy is not None or agent.access_control is not None:
            key = f"{key}:{digest[7:19]}"
        if gate.decision == "reauthorization_required":  # no earlier approval satisfies it
            key = f"{key}:reauth"
        conf = await decision_on(agent, ctx, proposal, key, request, gate)
        for refused_key, refused, why in conf.refusals:
            trail.refused(refused_key, refused, why)
        decision = conf.decision
        if decision is None:
            trail.paused(conf.key, conf.request, gate)
            pauses.append(pause_request(conf.key, conf.request, None, conf.refusal))
            return out
        if conf.by_handler:
            trail.handler_decided(conf.key, decision)
        if decision.verdict == "deny":
            trail.denied(conf.key, decision)
            why = f": {decision.reason}" if decision.reason else ""
            text = f"Tool call {call.id} ({call.name}) was denied by a human{why}."
            return await _refused(ctx, proposal, out, text)
        approval = (conf.key, decision)
    # 4. dispatch enforcement: not after a freeze by a sibling task; the evidence first
    # (fail closed for high and critical risk)
    ctx.check_not_frozen()
    unavailable = await trail.dispatch(approval)
    if unavailable is not None and trail.high:
        why = f"evidence unavailable: {unavailable}"
        hold = proposal.key("ev")
        found, ans = ctx.answer(hold)
        if found and Decision.coerce(ans).verdict == "deny":
            text = f"Tool call {call.id} ({call.name}) was denied by a human: {why}."
            return await _refused(ctx, proposal, out, text)
        request = request_of(agent, tool, call, args, tctx, gate, digest)
        request = dataclasses.replace(request, policy_decision="defer", reason=why)
        pauses.append(pause_request(hold, request, None, None))
        return out
    # 5. execute, at most once
    content = await _dispatch(
        agent,
        ctx,
        proposal,
        tool,
        args,
        pauses,
        trail,
        gate,
        lambda: request_of(agent, tool, call, args, tctx, gate, digest),
    )
    if content is None:
        return out
    result, ran = content
    return await _settle(agent, ctx, proposal, tool, tctx, trail, result, ran, unavailable)


async def _settle(
    agent: Agent,
    ctx: NodeContext,
    proposal: Proposal,
    tool: Tool,
    tctx: ToolCallContext,
    trail: CallTrail,
    result: Any,
    ran: bool,
    gap: str | None,
) -> CallOutcome:
    """The outcome of a call that was dispatched (now or by an earlier execution of the
    node): its evidence (written once), the after-tool callbacks (memoized), the text."""
    if ran:
        trail.executed(result, gap=gap)
    else:
        trail.failed(str(result))
    # 6. after-tool callbacks
    if agent.after_tool and ran:
        final = await ctx.step_once(proposal.key("after"), _after, agent.after_tool, tctx, result)
        result = final["result"]
    name = proposal.call.name
    out = CallOutcome(as_text(result) if ran else f"Error: tool {name} failed: {result}")
    # An untrusted tool's error text may quote what it read: it taints like its results.
    out.untrusted = tool.untrusted_output
    return out


async def _refused(
    ctx: NodeContext, proposal: Proposal, out: CallOutcome, text: str
) -> CallOutcome:
    """A refusal is final: memoized, so a rerun of the node (resumed by another principal,
    under a later policy, after an approval expired) tells the model the same and never
    judges the call again."""
    out.content = await ctx.step_once(proposal.key("refused"), _same, text)
    return out


async def _same(text: str) -> str:
    return text


async def _dispatch(
    agent: Agent,
    ctx: NodeContext,
    proposal: Proposal,
    tool: Tool,
    args: dict[str, Any],
    pauses: list[PauseRequest],
    trail: CallTrail,
    gate: Gate,
    make_request: Callable[[], ToolConfirmationRequest],
) -> tuple[Any, bool] | None:
    """Run the call at most once: (result, True), or (error text, False), or None when its
    outcome is unknown (a crash between claim and outcome) and it pauses for a human.

    Running it again after such a crash takes a human's approval under the call's own rules
    (the role an escalation requires, expiry, the fingerprint), and each approval runs it
    once: a crash during that run pauses again (``KEY:1``, ``KEY:2`` ...) for a new one."""
    call = proposal.call
    force = tool.idempotent
    base = proposal.key("unknown")
    reruns = 0
    while ctx.has_memo(f"rerun:{base}:{reruns}"):
        reruns += 1
    key = base if reruns == 0 else f"{base}:{reruns}"
    refusal: str | None = None
    if not force and (ctx.answer(key)[0] or ctx.answers_under(f"{key}:r")):
        conf = await decision_on(
            agent, ctx, proposal, key, make_request(), gate, other_digests=False, handler=False
        )
        for refused_key, refused, why in conf.refusals:
            trail.refused(refused_key, refused, why)
        key, refusal = conf.key, conf.refusal
        if conf.decision is not None and conf.decision.verdict == "deny":
            return (
                f"Tool call {call.id} ({call.name}) may or may not have run before a "
                "crash; a human chose not to run it again.",
                True,
            )
        if conf.decision is not None:
            await ctx.step_once(f"rerun:{base}:{reruns}", _consumed)
            force = True

    async def run() -> Any:
        return await tool.arun(args)

    fp = tool_call_fingerprint(call.name, call.args)
    try:
        out = await ctx.dispatch_once(proposal.dispatch_key, call.name, fp, run, force=force)
    except FreezeSignal as e:  # frozen since it was judged (graph.freeze): never dispatched
        trail.frozen(gate, e.reason)
        raise
    if out.status == "unknown":
        trail.outcome_unknown(key)
        pauses.append(pause_request(key, make_request(), "unknown", refusal))
        return None
    if out.status == "failed":
        return out.error, False
    return out.result, True


def _consumed() -> bool:
    """The memo that uses up an approval to run a call again after a crash."""
    return True


async def _before(
    callbacks: Sequence[Callable[..., Any]], tctx: ToolCallContext
) -> dict[str, Any] | None:
    for i, cb in enumerate(callbacks):
        res = cb(tctx)
        if inspect.isawaitable(res):
            res = await res
        if res is not None:
            return {"result": res, "index": i}
    return None


async def _after(
    callbacks: Sequence[Callable[..., Any]], tctx: ToolCallContext, result: Any
) -> dict[str, Any]:
    replaced = False
    for cb in callbacks:
        res = cb(tctx, result)
        if inspect.isawaitable(res):
            res = await res
        replaced = replaced or res is not result
        result = res
    return {"result": result, "replaced": replaced}


def as_text(result: Any) -> str:
    """A tool result as the text the model reads."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(result)


def taint_of(messages: Sequence[Any]) -> tuple[bool, tuple[str, ...]]:
    """Whether a transcript holds untrusted content, and its sources in order."""
    sources: dict[str, None] = {}
    tainted = False
    for m in messages:
        if getattr(m, "untrusted", False):
            tainted = True
            sources[getattr(m, "source", None) or "untrusted input"] = None
    return tainted, tuple(sources)
