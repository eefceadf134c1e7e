"""The evidence of one proposed tool call: an event per stage of the pipeline.

``CallTrail`` turns what the pipeline decided into ``graphflow.evidence.stages`` events and
queues them on the run's witness (``graphflow.engine.witness``), each under a key of its
proposal and stage, so a stage that a rerun of the node passes again (after a pause) is
written once. Only the proposed call itself (tool and arguments) comes from the model; every
other field is the runtime's.

``dispatch`` is the fail-closed point: the events of a high or critical risk call are written
before it runs, or it does not run.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from graphflow.auth.context import ToolCallContext
from graphflow.auth.vocab import HIGH_RISKS
from graphflow.engine.context import NodeContext, runtime_witness
from graphflow.engine.witness import opaque
from graphflow.evidence import CallFacts, EvidenceError, stages

if TYPE_CHECKING:
    from graphflow.agents.confirm import Gate
    from graphflow.agents.pipeline import Proposal
    from graphflow.auth.principal import Principal
    from graphflow.decisions import Decision
    from graphflow.types import ToolConfirmationRequest

_PAUSED = {
    "requires_human_approval": "requires_human_approval",
    "escalate": "escalate",
    "defer": "defer",
    "reauthorization_required": "reauthorization_required",
}


class CallTrail:
    """The events of one proposal, queued on the run's witness."""

    def __init__(self, ctx: NodeContext, proposal: Proposal, facts: CallFacts):
        self.ctx = ctx
        self.proposal = proposal
        self.witness = runtime_witness(ctx)
        self.facts = facts
        self.high = facts.risk in HIGH_RISKS
        self.nonce: str | None = None
        self.approved_by: str | None = None

    @classmethod
    def of(cls, ctx: NodeContext, proposal: Proposal, tctx: ToolCallContext) -> CallTrail:
        """The trail of a call of a known tool whose arguments are valid."""
        return cls.about(
            ctx,
            proposal,
            tool=tctx.tool.name,
            agent=tctx.agent,
            principal=tctx.principal,
            risk=tctx.risk,
            category=tctx.category,
            taint=(tctx.tainted, tctx.taint_sources),
        )

    @classmethod
    def about(
        cls,
        ctx: NodeContext,
        proposal: Proposal,
        *,
        tool: str,
        agent: str,
        principal: Principal | None,
        taint: tuple[bool, tuple[str, ...]],
        risk: str = "high",
        category: str | None = None,
    ) -> CallTrail:
        """The trail of any proposal, also of one that names no tool of the agent or whose
        arguments do not validate (its risk then is unclassified: high)."""
        facts = CallFacts(
            thread_id=ctx.thread_id,
            call_id=proposal.call.id,
            tool=tool,
            args=dict(proposal.call.args),
            agent=agent,
            node=ctx.node,
            action_id=f"{ctx.thread_id}:{proposal.dispatch_key}",
            principal_id=principal.id if principal is not None else None,
            principal_type=principal.type if principal is not None else "unknown",
            risk=risk,  # type: ignore[arg-type]
            category=category,
            checkpoint_id=ctx.checkpoint_id,
            tainted=taint[0],
            taint_sources=taint[1],
        )
        return cls(ctx, proposal, facts)

    def _add(self, what: str, draft: Any) -> None:
        self.witness.add(f"{self.ctx.task_id}:{self.proposal.key(what)}", draft)

    def proposed(self) -> None:
        self._add("ev-proposed", stages.proposed(self.facts))

    def access_denied(self, reason: str) -> None:
        self._add("ev-access", stages.access_denied(self.facts, reason=reason))

    def skipped(self, callback: Any, result: Any) -> None:
        name = getattr(callback, "__qualname__", None) or type(callback).__name__
        draft = stages.callback_skipped(self.facts, callback=name, result=opaque(result))
        self._add("ev-skipped", draft)

    def policy(self, gate: Gate, digest: str) -> None:
        """The policy's decision (one event per decision and action digest: a deferred call
        evaluated again records each new outcome)."""
        self.facts = dataclasses.replace(
            self.facts, action_digest=digest, policy_version=gate.version
        )
        draft = stages.policy_decision(
            self.facts,
            decision=gate.decision,  # type: ignore[arg-type]
            rule_id=gate.rule_id,
            reason=gate.reason,
            required_role=gate.required_role,
        )
        self._add(f"ev-policy:{gate.decision}:{digest[7:19]}", draft)

    def frozen(self, gate: Gate, reason: str) -> None:
        draft = stages.frozen(
            thread_id=self.ctx.thread_id,
            reason=reason,
            call=self.facts,
            policy_id=gate.rule_id,
            checkpoint_id=self.ctx.checkpoint_id,
        )
        self._add("ev-frozen", draft)

    def paused(self, key: str, request: ToolConfirmationRequest, gate: Gate) -> None:
        draft = stages.paused(
            self.facts,
            pause_id=self.ctx.pause_id(key),
            checkpoint_id=self.ctx.checkpoint_id,
            decision=_PAUSED.get(gate.decision, "requires_human_approval"),  # type: ignore[arg-type]
            reason=request.reason,
            policy_id=gate.rule_id,
            required_role=gate.required_role,
            expires_at=request.expires_at,
        )
        self.witness.add(f"ev-paused:{self.ctx.pause_id(key)}", draft)

    def refused(self, key: str, decision: Decision, refusal: str) -> None:
        draft = stages.decision_received(
            self.facts,
            pause_id=self.ctx.pause_id(key),
            approve=decision.verdict == "approve",
            by=decision.by,
            applied=False,
            reason=decision.reason,
            refusal=refusal,
            expired="expired" in refusal,
            refuses=True,
        )
        self.witness.add(f"ev-refused:{self.ctx.pause_id(key)}", draft)

    def handler_decided(self, key: str, decision: Decision) -> None:
        draft = stages.decision_received(
            self.facts,
            pause_id=self.ctx.pause_id(key),
            approve=decision.verdict == "approve",
            by=decision.by or "confirmation_handler",
            applied=True,
            reason=decision.reason,
            by_type="system",
        )
        self.witness.add(f"ev-handler:{self.ctx.pause_id(key)}", draft)

    def denied(self, key: str, decision: Decision) -> None:
        draft = stages.denied(
            self.facts,
            reason=decision.reason,
            by=decision.by,
            pause_id=self.ctx.pause_id(key),
        )
        self._add("ev-denied", draft)

    async def dispatch(self, approval: tuple[str, Decision] | None) -> str | None:
        """Record the claim about to be made; for a high or critical risk call, write the
        call's evidence now. Returns why the evidence could not be written (the call must
        not run when it is high risk; a low risk one runs and its gap is recorded)."""
        key, decision = approval if approval is not None else (None, None)
        nonce = self.ctx.pause_id(key) if key is not None else None
        draft = stages.dispatch_claimed(
            self.facts,
            nonce=nonce,
            approved_by=(decision.by or "a human") if decision is not None else None,
            pause_id=nonce,
        )
        self._add("ev-dispatch", draft)
        self.nonce = nonce
        self.approved_by = decision.by if decision is not None else None
        try:
            await self.witness.require()
        except EvidenceError as e:
            return str(e)
        return None

    def executed(self, result: Any, *, gap: str | None) -> None:
        self._add(
            "ev-result",
            stages.executed(
                self.facts,
                result=opaque(result),
                approved_by=self.approved_by,
                nonce=self.nonce,
            ),
        )
        if gap is not None and self.witness.failed_at is not None:
            draft = stages.gap(
                self.facts,
                reason=gap,
                missed=["proposed", "policy_decision", "dispatch_claimed", "executed"],
                since=self.witness.failed_at,
                result=opaque(result),
            )
            self._add("ev-gap", draft)

    def unrunnable(self, error: str) -> None:
        """A proposal that cannot run at all (unknown tool, invalid arguments): its
        proposal and its refusal (a deny of policy ``graphflow.tool_check``: it was never
        authorized nor dispatched), so the trail holds every call the model proposed."""
        self.proposed()
        draft = stages.denied(self.facts, reason=error, policy_id="graphflow.tool_check")
        self._add("ev-denied", draft)

    def failed(self, error: str) -> None:
        draft = stages.failed(
            self.facts, error=error, approved_by=self.approved_by, nonce=self.nonce
        )
        self._add("ev-result", draft)

    def outcome_unknown(self, key: str) -> None:
        draft = stages.outcome_unknown(self.facts, pause_id=self.ctx.pause_id(key))
        self._add("ev-unknown", draft)
