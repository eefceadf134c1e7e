"""Confirmation of one proposed call: the gate that policy or configuration puts before
it, the request an approver sees, and whether an answer counts (see
``graphflow.agents.pipeline`` for the whole pipeline)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from checkpoints.models import CallId, DecisionRecord, PauseId, ThreadId
from graphflow.agents.tools import Tool
from graphflow.auth.context import ToolCallContext
from graphflow.auth.vocab import HIGH_RISKS
from graphflow.decisions import Decision, tool_call_fingerprint
from graphflow.engine.context import NodeContext
from graphflow.engine.pauses import PauseRequest
from graphflow.messages import ToolCall
from graphflow.types import ToolConfirmationRequest

if TYPE_CHECKING:
    from graphflow.agents.agent import Agent
    from graphflow.agents.pipeline import Proposal

HUMAN_DECISIONS = frozenset(
    {"requires_human_approval", "escalate", "defer", "reauthorization_required"}
)
"""Policy decisions that wait for a human."""
_CONFIRM = "requires_human_approval"


@dataclass(frozen=True, slots=True)
class Gate:
    """What stands between a call and its dispatch, as decided by policy or configuration."""

    decision: str
    reason: str
    rule_id: str | None = None
    required_role: str | None = None
    expires_in: float | None = None
    version: str | None = None

    @property
    def needs_human(self) -> bool:
        return self.decision in HUMAN_DECISIONS


def gate_of(agent: Agent, tctx: ToolCallContext) -> Gate:
    """The policy's decision for the call (or ``require_confirmation``'s, without one).

    With a policy or access control, a high or critical risk call with no principal never
    runs on the policy's word: what the policy would allow (or ask a human, or defer) is
    escalated instead, keeping the role and expiry the policy names; a deny, freeze,
    reauthorization or escalation the policy gives stands."""
    if agent.policy is None:
        if agent.needs_confirmation(tctx.tool.name):
            gate = Gate("requires_human_approval", "the agent requires confirmation of this tool")
        else:
            gate = Gate("allow", "no policy; the tool needs no confirmation")
    else:
        res = agent.policy.evaluate_call(tctx)
        decision = res.decision
        if decision == "allow" and agent.needs_confirmation(tctx.tool.name):
            decision = "requires_human_approval"
        expires = float(res.expires_in) if res.expires_in is not None else None
        gate = Gate(decision, res.reason, res.rule_id, res.required_role, expires, res.version)
    guarded = agent.policy is not None or agent.access_control is not None
    if guarded and tctx.principal is None and tctx.risk in HIGH_RISKS and gate.decision in _SOFT:
        return Gate(
            "escalate",
            f"a {tctx.risk} risk call with no principal: it needs an approver"
            + (f" with the role {gate.required_role!r}" if gate.required_role else ""),
            gate.rule_id,
            gate.required_role,
            gate.expires_in,
            gate.version,
        )
    return gate


_SOFT = frozenset({"allow", "requires_human_approval", "defer"})
"""Decisions that a call with no principal does not get: it escalates instead."""


def request_of(
    agent: Agent,
    tool: Tool,
    call: ToolCall,
    args: dict[str, Any],
    tctx: ToolCallContext,
    gate: Gate,
    digest: str,
) -> ToolConfirmationRequest:
    """What an approver sees of the call (``expires_at`` is set per pause by
    ``decision_on``)."""
    try:
        facts = tool.describe_action(args)
    except Exception as e:  # (the policy already deferred on it; the approver sees why)
        facts = {"error": f"{type(e).__name__}: {e}"}
    return ToolConfirmationRequest(
        call.name,
        call.id,
        dict(call.args),
        tool_call_fingerprint(call.name, call.args),
        agent.name,
        principal=tctx.principal_id,
        action_digest=digest,
        risk=tctx.risk,
        category=tctx.category,
        policy_decision=gate.decision
        if agent.policy is not None or gate.decision != _CONFIRM
        else None,
        policy_rule=gate.rule_id,
        reason=gate.reason,
        required_role=gate.required_role,
        tainted=tctx.tainted,
        taint_sources=tctx.taint_sources,
        policy_version=gate.version,
        describe=facts or None,
    )


@dataclass(frozen=True, slots=True)
class Confirmation:
    """Where the confirmation of a call stands: the decision that counts (None: it pauses),
    the key and request of the pause it waits on, and why the last answer was refused."""

    decision: Decision | None
    key: str
    request: ToolConfirmationRequest
    refusal: str | None = None
    refusals: tuple[tuple[str, Decision, str], ...] = ()
    """Every answer refused on the way, with the key of the pause it answered and why."""
    by_handler: bool = False
    """Whether the decision came from the agent's confirmation handler."""


async def decision_on(
    agent: Agent,
    ctx: NodeContext,
    proposal: Proposal,
    key: str,
    request: ToolConfirmationRequest,
    gate: Gate,
    *,
    other_digests: bool = True,
    handler: bool = True,
) -> Confirmation:
    """The decision on the call, or the pause it waits on (``other_digests``: look for answers
    given to this proposal for another action digest; ``handler``: ask the agent's
    confirmation handler when no one answered).

    An answer that does not count (the approver lacks the role, the approval expired, it
    answered another call) is recorded as refused, and the call pauses again under a new
    key (``KEY:r1``, ``KEY:r2`` ...), so the new pause names the reason and waits for a new
    decision. An answer to this proposal's pause for another action digest (the
    arguments, the principal or the policy version changed since) is refused the same way.
    """
    refusal: str | None = None
    refusals: list[tuple[str, Decision, str]] = []
    n = 0
    k = key
    while True:
        req = await _expiring(ctx, k, request, gate)
        found, ans = ctx.answer(k)
        answered, why = k, None
        if not found and n == 0 and other_digests and key != proposal.key("tc"):
            stale = _stale(ctx, proposal, req)
            if stale is not None:
                found = True
                answered, ans, why = stale
        if not found:
            break
        d = Decision.coerce(ans)
        # A guarded agent's approval is bound to the whole action digest (the simple form's
        # to the fingerprint only, as before).
        guarded = agent.policy is not None or agent.access_control is not None
        bound = ans.get("action_digest") if guarded and isinstance(ans, Mapping) else None
        if why is None and bound and req.action_digest and bound != req.action_digest:
            why = (
                f"the approval was given for action {bound}, and the call as it will run is "
                f"{req.action_digest}; decide again"
            )
        refusal = why or refusal_of(agent, d, req, gate)
        if refusal is None:
            return Confirmation(d, k, req, refusals=tuple(refusals))
        await _record_refusal(ctx, ctx.pause_id(answered), d, ans, req, refusal)
        refusals.append((answered, d, refusal))
        if answered != k:  # a stale answer: this key's pause is the new one
            return Confirmation(None, k, req, refusal, tuple(refusals))
        n += 1
        k = f"{key}:r{n}"
    confirm = gate.decision == "requires_human_approval"
    if handler and confirm and agent.confirmation_handler is not None:
        decided = await ask_handler(agent, ctx, proposal, req)
        return Confirmation(decided, k, req, refusal, tuple(refusals), decided is not None)
    return Confirmation(None, k, req, refusal, tuple(refusals))


async def _expiring(
    ctx: NodeContext, key: str, request: ToolConfirmationRequest, gate: Gate
) -> ToolConfirmationRequest:
    """The request of the pause ``key``: a rule's ``expires_in`` counts from when that
    pause was first created (a memo, the same on every rerun)."""
    if gate.expires_in is None:
        return request
    asked = datetime.fromisoformat(await ctx.step_once(f"asked:{key}", now_text))
    return replace(request, expires_at=asked + timedelta(seconds=gate.expires_in))


def _stale(
    ctx: NodeContext, proposal: Proposal, request: ToolConfirmationRequest
) -> tuple[str, Any, str] | None:
    """The latest answer this proposal got for another action digest (its key, the
    answer, the refusal), or None."""
    prefix = f"{proposal.key('tc')}:"
    stale = ctx.answers_under(prefix)
    if not stale:
        return None
    key, ans = next(reversed(stale.items()))
    given = key[len(prefix) :].split(":")[0]
    if request.action_digest and request.action_digest[7:19] == given:
        return (
            key,
            ans,
            "the policy now requires a new authorization of this call "
            "(reauthorization_required): an earlier approval does not count; decide again",
        )
    return (
        key,
        ans,
        f"the approval was given for action sha256:{given}..., and the call as it will run "
        f"is {request.action_digest}: its arguments, principal or policy version changed "
        "since; decide again",
    )


async def _record_refusal(
    ctx: NodeContext,
    pause_id: str,
    d: Decision,
    ans: Any,
    request: ToolConfirmationRequest,
    refusal: str,
) -> None:
    """Record that an answer was refused: once per answer, however often the node reruns."""

    async def refuse() -> bool:
        await ctx.record_decision(
            DecisionRecord(
                ThreadId(ctx.thread_id),
                CallId(request.function_call_id),
                d.verdict,
                d.fingerprint,
                d.by,
                d.reason,
                applied=False,
                note=f"refused: {refusal}",
                pause_id=PauseId(pause_id),
                extra={"refused": True},
            )
        )
        return True

    answer_id = tool_call_fingerprint("answer", {"answer": repr(sorted(ans.items()))})
    await ctx.step_once(f"refused:{pause_id}:{answer_id[7:19]}", refuse)


def refusal_of(
    agent: Agent, d: Decision, request: ToolConfirmationRequest, gate: Gate
) -> str | None:
    """Why an answer does not count for this call, or None."""
    if d.fingerprint is not None and d.fingerprint != request.fingerprint:
        return "the fingerprint does not match the proposed call"
    if d.verdict == "deny":
        return None
    if gate.required_role is not None:
        roles = set(d.roles)
        if agent.access_control is not None and d.by is not None:
            roles.update(agent.access_control.roles_of(d.by))
        if gate.required_role not in roles:
            who = d.by or "an anonymous approver"
            return f"approver {who!r} lacks the role {gate.required_role!r} this call needs"
    now = clock()
    for limit in (d.expires_at, request.expires_at):
        if limit is not None and now >= limit:
            return f"the approval expired at {limit.isoformat()}"
    return None


async def ask_handler(
    agent: Agent, ctx: NodeContext, proposal: Proposal, request: ToolConfirmationRequest
) -> Decision | None:
    handler = agent.confirmation_handler

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


def pause_request(
    key: str, request: ToolConfirmationRequest, outcome: str | None, refusal: str | None
) -> PauseRequest:
    req = {k: getattr(request, k) for k in request.__dataclass_fields__}
    req["taint_sources"] = list(request.taint_sources)
    value: dict[str, Any] = {"request": req}
    if refusal is not None:
        value["refused"] = refusal
    if outcome is not None:
        value["outcome"] = outcome
        value["message"] = (
            f"tool call {request.function_call_id} ({request.tool_name}) was claimed for "
            "dispatch but its outcome was never recorded (a crash?): approve to run it again, "
            "deny to tell the model it did not run"
        )
    return PauseRequest(key, "tool_confirmation", value)


def now_text() -> str:
    return clock().isoformat()


def clock() -> datetime:
    """The current time (UTC), against which approvals expire."""
    return datetime.now(UTC)
