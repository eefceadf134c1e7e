"""Errors raised by ``graphflow.evidence``.

The tree (both are ``GraphflowError``\\ s)::

    EvidenceError            the log cannot be written or read (names the path)
    └── InvalidEventError    an event does not validate against the AAEF schema

A value that cannot be recorded at all (a type that is not JSON-like, a non-string key)
raises ``graphflow.errors.InvalidArgumentError`` naming where in the event it is.
"""

from __future__ import annotations

from graphflow.errors import GraphflowError


class EvidenceError(GraphflowError):
    """The evidence log cannot be written or read; ``path`` names its file."""

    def __init__(self, message: str, *, path: str):
        super().__init__(message)
        self.path = path


class InvalidEventError(EvidenceError, ValueError):
    """An event failed AAEF schema validation (a builder or caller bug): nothing is written.

    ``errors`` lists each failure as ``"<json path>: <message>"``.
    """

    def __init__(self, message: str, *, path: str, errors: tuple[str, ...]):
        super().__init__(message, path=path)
        self.errors = errors
