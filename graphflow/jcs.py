"""RFC 8785 canonical JSON (JCS), with a fast path for the values graphflow hashes.

``dumps(value)`` returns exactly the bytes of ``rfc8785.dumps(value)``. Most values hashed
here (evidence events, action digests) hold no float and only keys of the Basic
Multilingual Plane; for those, RFC 8785 and the standard library's encoder with sorted
keys, no whitespace and no ASCII escaping agree byte for byte:

- strings: both escape ``"``, ``\\`` and the control characters below U+0020 alike (``\\b``,
  ``\\t``, ``\\n``, ``\\f``, ``\\r``, else ``\\u00xx`` in lowercase hex) and nothing else;
- integers within +-(2**53 - 1), ``true``, ``false``, ``null``: the same text;
- key order: RFC 8785 sorts keys by UTF-16 code units, Python by code points; the two
  orders differ only between a key with a character beyond U+FFFF and one with a
  character in U+E000..U+FFFF, so a key beyond the BMP takes the slow path.

Anything else (a float, whose text RFC 8785 takes from ECMAScript, an integer beyond the
safe range, a key beyond the BMP, a type that is not JSON) goes to ``rfc8785.dumps``, which
formats it or raises its own error. ``tests/graphflow/test_jcs.py`` checks the equality on
generated values. The fast path is ~10x cheaper per event (benchmark W5: the pause event
of each thread).
"""

from __future__ import annotations

import json
from typing import Any

import rfc8785

__all__ = ["dumps"]

_MAX = 2**53 - 1
_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
)
_BMP_END = "\uffff"


def dumps(value: Any) -> bytes:
    """``value`` as RFC 8785 canonical JSON, UTF-8 encoded (``rfc8785.dumps``'s bytes)."""
    if _plain(value):
        try:
            return _ENCODER.encode(value).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: rfc8785 raises its own error
            pass
    return rfc8785.dumps(value)


def _plain(v: Any) -> bool:
    """Whether the fast path gives RFC 8785's bytes for ``v`` (see the module docstring)."""
    t = type(v)
    if t is str or t is bool or v is None:
        return True
    if t is int:
        n: int = v
        return -_MAX <= n <= _MAX
    if t is dict:
        for k, item in v.items():
            if type(k) is not str or (not k.isascii() and max(k) > _BMP_END):
                return False
            if not _plain(item):
                return False
        return True
    if t is list:
        return all(map(_plain, v))
    return False
