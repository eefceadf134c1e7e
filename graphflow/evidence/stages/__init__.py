"""One ``EventDraft`` per stage of a tool call (and of a thread), in AAEF's terms.

Every call event has ``action_id`` = ``CallFacts.action_id``, ``agent`` = {the agent's name,
``"<thread_id>/<node>"``}, ``principal`` = the run's principal (``unknown``/``"unknown"``
when there is none), ``delegation.authority_scope`` = the call's scope (default
``["tool:<name>"]``), ``requested_action`` = {``action_type``: the category or
``"tool_call"``, ``resource`` (default ``"tool:<name>"``), ``purpose``, ``risk_level``,
``tool_name``, ``argument_digest``, ``high_impact_category``, ``external_effect_expected``},
``context`` = {``correlation_id``: the thread, taint as ``untrusted_content_influenced_action``
and ``input_sources``}, and ``retention_class`` ``high_impact_action`` for high and critical
risk (``agentic_action`` otherwise). The tool's arguments are stored (redacted) in the
``proposed`` and ``gap`` events' ``detail.arguments``; every event carries their digest.

The mapping (``authorization.decision`` / ``result.status``; external_effect is false
unless said):

============================  ===========================  ==================================
stage                         event_type                   decision / status, other sections
============================  ===========================  ==================================
proposed                      agentic_action_attempted     requires_additional_verification /
                                                           deferred (not yet authorized)
access_denied                 agentic_action_denied        deny / denied, non_execution denied
callback_skipped              agentic_action_denied        deny / safely_terminated,
                                                           non_execution safely_terminated
policy_decision               by decision: allow ->        the policy's decision / allowed,
                              allowed, deny -> denied,     denied, deferred, escalated,
                              requires_human_approval,     frozen, reauthorization_requested
                              defer, requires_additional_
                              verification -> deferred,
                              escalate -> escalated,
                              freeze -> authority_frozen,
                              reauthorization_required ->
                              reauthorization_requested
paused                        as policy_decision           the pause's decision, approval
                                                           (required, pending), an
                                                           authorization_decision_artifact
                                                           bound to the action digest
decision_received, applied,   agentic_action_allowed       allow / allowed_after_approval,
approve                                                    approval approved
decision_received, applied,   agentic_action_denied        deny / denied, approval denied
deny
decision_received, not        agentic_action_deferred      requires_human_approval / deferred,
applied                                                    approval expired or unknown,
                                                           ``applied: false`` and the reason
dispatch_claimed              agentic_action_allowed       allow / allowed or
                                                           allowed_after_approval, approval
                                                           enforcement_result allow at the
                                                           execution boundary, the nonce
executed                      agentic_action_executed      allow / allowed or
                                                           allowed_after_approval,
                                                           tool_invoked, result_digest,
                                                           external_effect as expected
failed                        agentic_action_failed        allow / failed, error_code (the
                                                           exception's type)
outcome_unknown               agentic_action_failed        allow / quarantined, error_code
                                                           ``outcome_unknown``, external_effect
                                                           as expected (it may have run)
denied                        agentic_action_denied        deny / denied, non_execution
deferred                      agentic_action_deferred      defer / deferred, non_execution
escalated                     agentic_action_escalated     escalate / escalated, non_execution
                                                           escalation_target = required role
reauthorization_requested     reauthorization_requested    reauthorization_required /
                                                           reauthorization_requested,
                                                           reauthorization
frozen                        authority_frozen             freeze / frozen, non_execution,
                                                           state_checks authority_frozen,
                                                           override emergency_stop (by a human)
unfrozen                      human_override_recorded      allow / allowed, override other
cancelled                     agentic_action_revoked       deny / safely_terminated,
                                                           non_execution, response
                                                           revocation_triggered
interrupt_paused              agentic_action_deferred      defer / deferred, the value's digest
interrupt_resumed             agentic_action_allowed       allow / allowed, the answer's digest
gap                           agentic_action_executed      allow / allowed, ``gap`` (reason,
                                                           missed stages, since)
============================  ===========================  ==================================

Thread events (``frozen``, ``unfrozen``, ``cancelled`` without a call, interrupts) describe
the operation as the requested action: ``action_type`` ``graphflow.thread.freeze`` (and so
on), ``resource`` ``"thread:<id>"`` or ``"node:<name>"``, ``risk_level`` ``unknown``; their
agent is ``graphflow`` and their principal the actor (``system``/``graphflow`` when none).
Interrupt values and answers are stored as digests only: they may carry model text.

The helpers are defined by topic (``proposal``: before any human decides; ``decisions``:
pauses, human decisions and calls that do not run now; ``execution``: dispatch, outcome and
gaps; ``thread``: freeze, unfreeze, cancel and interrupts) from the sections ``build``
makes; this module is their home.
"""

from __future__ import annotations

import types

from graphflow.evidence.stages.build import AuthorizationDecision, PauseDecision
from graphflow.evidence.stages.decisions import (
    decision_received,
    deferred,
    denied,
    escalated,
    paused,
    reauthorization_requested,
)
from graphflow.evidence.stages.execution import (
    dispatch_claimed,
    executed,
    failed,
    gap,
    outcome_unknown,
)
from graphflow.evidence.stages.proposal import (
    access_denied,
    callback_skipped,
    policy_decision,
    proposed,
)
from graphflow.evidence.stages.thread import (
    cancelled,
    frozen,
    interrupt_paused,
    interrupt_resumed,
    unfrozen,
)

__all__ = [
    "AuthorizationDecision",
    "PauseDecision",
    "access_denied",
    "callback_skipped",
    "cancelled",
    "decision_received",
    "deferred",
    "denied",
    "dispatch_claimed",
    "escalated",
    "executed",
    "failed",
    "frozen",
    "gap",
    "interrupt_paused",
    "interrupt_resumed",
    "outcome_unknown",
    "paused",
    "policy_decision",
    "proposed",
    "reauthorization_requested",
    "unfrozen",
]

# Each helper is documented, listed and named (``help``, ``inspect``, ``vars(stages)``) as
# this module's, where callers find it; the submodule defining it is an implementation detail.
for _name in __all__:
    _helper = globals()[_name]
    if isinstance(_helper, types.FunctionType):
        _helper.__module__ = __name__
del _name, _helper
