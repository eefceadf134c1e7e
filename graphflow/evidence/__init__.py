"""Evidence of agent tool calls: an append-only, hash-chained log of AAEF events.

The runtime writes one event per stage of every proposed tool call (and per pause and
resume of an interrupt); node code gets no handle to the log::

    from graphflow.evidence import CallFacts, EvidenceLog, stages

    log = EvidenceLog.beside("graphflow.db")          # graphflow.evidence.db
    call = CallFacts(thread_id="t1", call_id="c1", tool="issue_refund",
                     args={"order_id": "A-1", "amount": 5}, agent="support",
                     principal_id="alice@co.com", risk="high")
    log.append(stages.proposed(call))
    log.append(stages.policy_decision(call, decision="requires_human_approval"))
    assert log.verify().ok

Modules: ``events`` (drafts and call facts), ``stages`` (one draft per stage, and the
mapping to AAEF event types), ``redact`` (what is never stored in clear), ``chain`` (the
bytes hashed and the hash), ``verification`` (what ``verify`` reports), ``store`` (the
SQLite file), ``log`` (``EvidenceLog`` and appending), ``reading`` (events, head, verify and
the JSONL export), ``validation`` (the shipped AAEF schema).

This package is a leaf: it imports nothing from the engine, the compiled graph or agents.
"""

from graphflow.evidence import stages
from graphflow.evidence.chain import GENESIS, EvidenceHead
from graphflow.evidence.errors import EvidenceError, InvalidEventError
from graphflow.evidence.events import (
    AUDIT_STAGE,
    CallFacts,
    EventDraft,
    EventType,
    Stage,
)
from graphflow.evidence.log import EvidenceLog
from graphflow.evidence.reading import EvidenceRecord, verify_jsonl
from graphflow.evidence.redact import DEFAULT_REDACT_KEYS, digest
from graphflow.evidence.verification import ProblemKind, VerifyProblem, VerifyReport

__all__ = [
    "AUDIT_STAGE",
    "CallFacts",
    "DEFAULT_REDACT_KEYS",
    "EventDraft",
    "EventType",
    "EvidenceError",
    "EvidenceHead",
    "EvidenceLog",
    "EvidenceRecord",
    "GENESIS",
    "InvalidEventError",
    "ProblemKind",
    "Stage",
    "VerifyProblem",
    "VerifyReport",
    "digest",
    "stages",
    "verify_jsonl",
]
