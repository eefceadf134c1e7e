"""Checks of the text the public API takes and stores (thread ids, reasons, actors), made
before anything is read or written: text that SQLite cannot store (a lone surrogate, as a
terminal that is not UTF-8 hands over) or that would print as another value (a control
character) is refused here, by name, instead of failing half-way through a write."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from graphflow.errors import InvalidArgumentError

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""Characters that do not print as themselves: C0 and C1 controls, the line and paragraph
separators, and the bidirectional overrides (which reorder what follows them on screen)."""


MAX_THREAD_ID = 1000
"""The longest thread id, in characters (an id, not a document: tables print it whole)."""


def thread_id(value: Any, name: str = "thread_id") -> str:
    """``value`` as a thread id: a non-empty string of printable text, at most
    ``MAX_THREAD_ID`` characters; errors name it ``name`` (a command line's ``THREAD``)."""
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{name} must be a non-empty string, not {value!r:.80}")
    if len(value) > MAX_THREAD_ID:
        raise InvalidArgumentError(
            f"{name} {value!r:.40}... is {len(value):,} characters long; use at most "
            f"{MAX_THREAD_ID:,}"
        )
    _printable(name, value)
    return value


def text(name: str, value: Any) -> str | None:
    """``value`` as stored text (a reason, an actor's id): a string that UTF-8 can encode
    (control characters allowed, as in a multi-line reason), or None."""
    return None if value is None else _text(name, value, "a string or None")


def required_text(name: str, value: Any) -> str:
    """``value`` as stored text that must be given (``reason=`` of a cancel): ``text``, not
    None and not blank."""
    if isinstance(value, str) and not value.strip():
        raise InvalidArgumentError(f"{name} must be a non-empty string, not {value!r:.80}")
    return _text(name, value, "a non-empty string")


def _text(name: str, value: Any, need: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be {need}, not {value!r:.80}")
    _encodable(name, value)
    return value


def _printable(name: str, value: str) -> None:
    _encodable(name, value)
    if CONTROL.search(value):
        raise InvalidArgumentError(
            f"{name} {value!r:.80} holds a control character (a newline, a tab, NUL...); "
            "use printable text"
        )


def _encodable(name: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            f"{name} {value!r:.80} is not valid text (it holds a lone surrogate, as a terminal "
            "that is not UTF-8 sends); use UTF-8 text"
        ) from None


def principal(value: Any) -> None:
    """``principal=`` (and a ``by`` that may be one): a ``Principal`` (an object with a
    non-empty string ``id``), an id string, or None."""
    if value is None:
        return
    ident = value if isinstance(value, str) else getattr(value, "id", None)
    if not isinstance(ident, str) or not ident:
        raise InvalidArgumentError(
            f"a principal must be a graphflow.auth.Principal or its id (a non-empty string), "
            f"not {type(value).__name__} {value!r:.60}"
        )
    identity("a principal's id", ident)


def identity(name: str, value: str) -> str:
    """``value`` as the id of who acts (a principal, a decision's ``by``): printable text
    (a newline in it would forge lines of an audit trail as printed) that is not blank."""
    if not value.strip():
        raise InvalidArgumentError(f"{name} must be a non-blank id, not {value!r:.80}")
    _printable(name, value)
    if any(unicodedata.category(c) == "Cf" for c in value):
        raise InvalidArgumentError(
            f"{name} {value!r:.80} holds an invisible format character (a zero-width space, "
            "joiner or mark): it would print as another id; use printable text"
        )
    return value


def actor(value: Any) -> str | None:
    """The id to record for ``by=`` (checked as ``principal``)."""
    principal(value)
    return value if value is None or isinstance(value, str) else str(value.id)
