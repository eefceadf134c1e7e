"""The hash chain's links: the exact bytes hashed, the hash, and the head of a chain.

**Bytes.** An event's bytes are the RFC 8785 canonical JSON (the ``rfc8785`` package) of the
event without its hash fields: ``extensions.graphflow.prev_hash`` and
``evidence.evidence_hash`` are removed (``extensions.graphflow.seq`` stays). They are stored
as they were hashed (the ``body`` column, UTF-8 text), so verifying never canonicalizes
again.

**Hash.** ``hash = SHA-256(prev || seq || bytes)``, as lowercase hex, where ``prev`` is the
32 raw bytes of the previous event's hash (32 zero bytes before the first event: its
``prev_hash`` is ``GENESIS``, 64 zeros), and ``seq`` the event's sequence number as 8 bytes,
unsigned big-endian. ``seq`` runs 1, 2, 3, ... without gaps. The event as read carries
``extensions.graphflow.prev_hash`` (hex) and ``evidence.evidence_hash``
(``"sha256:" + hash``), so an exported event can be checked on its own (``verify_jsonl``).

What ``verify`` makes of a chain that does not hold is ``graphflow.evidence.verification``'s.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, NamedTuple

from graphflow.errors import InvalidArgumentError
from graphflow.jcs import dumps as jcs_dumps

GENESIS = "0" * 64
"""The ``prev_hash`` of the first event, and the ``hash`` of an empty log's head."""

_HEX = frozenset("0123456789abcdef")


def canonical_bytes(event: dict[str, Any]) -> bytes:
    """The bytes hashed for ``event`` (a prepared event: JSON values only)."""
    return jcs_dumps(without_hash_fields(event))


def without_hash_fields(event: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy of ``event`` without ``prev_hash`` and ``evidence_hash``."""
    out = dict(event)
    ext = out.get("extensions")
    if isinstance(ext, dict) and isinstance(ext.get("graphflow"), dict):
        graphflow = dict(ext["graphflow"])
        graphflow.pop("prev_hash", None)
        out["extensions"] = {**ext, "graphflow": graphflow}
    evidence = out.get("evidence")
    if isinstance(evidence, dict) and "evidence_hash" in evidence:
        out["evidence"] = {k: v for k, v in evidence.items() if k != "evidence_hash"}
    return out


def with_hashes(event: dict[str, Any], prev_hash: str, digest: str) -> dict[str, Any]:
    """``event`` with its hash fields (a copy of the two objects that hold them): the event
    as read, the converse of ``without_hash_fields``."""
    full = dict(event)
    extensions = dict(full["extensions"])
    extensions["graphflow"] = {**extensions["graphflow"], "prev_hash": prev_hash}
    full["extensions"] = extensions
    full["evidence"] = {**full["evidence"], "evidence_hash": "sha256:" + digest}
    return full


def chain_hash(prev_hash: str, seq: int, body: bytes) -> str:
    """``SHA-256(prev || seq || body)`` as lowercase hex (see this module's docstring)."""
    return hashlib.sha256(bytes.fromhex(prev_hash) + seq.to_bytes(8, "big") + body).hexdigest()


def is_hash(value: object) -> bool:
    """Whether ``value`` is a hash as stored: 64 lowercase hex digits."""
    return type(value) is str and len(value) == 64 and _HEX.issuperset(value)


@dataclass(frozen=True, slots=True)
class EvidenceHead:
    """The last event of a log: ``count`` its seq (the number of events) and ``hash``.

    Keep a head outside the log (a ticket, another system) and pass it to ``verify``: a log
    cut short or rewritten after it no longer matches. An empty log's head is
    ``EvidenceHead(0, GENESIS)``.
    """

    count: int
    hash: str

    def __post_init__(self) -> None:
        if type(self.count) is not int or self.count < 0:
            raise InvalidArgumentError(
                f"EvidenceHead.count must be an int >= 0, not {self.count!r}"
            )
        if not is_hash(self.hash):
            raise InvalidArgumentError(
                f"EvidenceHead.hash must be 64 lowercase hex digits, not {self.hash!r}"
            )
        if self.count == 0 and self.hash != GENESIS:
            raise InvalidArgumentError(
                f"EvidenceHead(0, {self.hash!r}) is no log's head: the empty log's is "
                "EvidenceHead(0, GENESIS), 64 zeros"
            )


class StoredRow(NamedTuple):
    """A row as read from the store: where it sits (``seq``) and what it holds."""

    seq: int
    prev_hash: object
    hash: object
    body: bytes
    thread_id: object
    event_type: object
