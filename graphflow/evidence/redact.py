"""Making an event storable: JSON values only, and no secret in clear.

Everything an event holds passes through ``Redactor.prepare`` before it is hashed or
written, so the log file, its WAL and its exports never see a secret:

- **Secret keys** (in free-form data: tool arguments, results, answers, details): a key whose
  name, lower-cased with everything but letters and digits removed, contains one of
  ``redact_keys`` (also so reduced) keeps its key, and its value, whatever it is and at any
  depth, becomes ``"sha256:<hex>"``. So ``api_key``, ``X-Api-Key``, ``apiKey``,
  ``access_token``, ``client_secret`` and ``db_password`` are all redacted (and so is
  ``max_tokens``: a false positive costs a digest, a false negative a leak).
- **Secret-looking text** (everywhere, also inside longer strings and in keys): ``Bearer
  <token>`` (the word ``Bearer`` is kept), ``sk-...`` API keys, PEM private keys (to their
  ``END`` line, or to the end of the text when it is cut off), GitHub, AWS, Slack and Stripe
  key formats, ``name=value`` and ``"name": value`` (either quote: JSON, and Python's
  printing of a dict in an exception's text; the value quoted or not) where ``name`` is a
  secret key, the value of an ``Authorization:`` header line, ``Basic <base64>`` credentials
  (the word kept; base64 holding a digit, ``+`` or ``/``, so ``Basic plan`` stays text) and
  the password of a URL (``scheme://user:PASSWORD@host``). Each secret is replaced by
  ``"sha256:<hex>"``. A private key given as a list of lines (its ``BEGIN`` line one item)
  has every item to its ``END`` line replaced.
- **Digests** are SHA-256, lowercase hex, of: a string's UTF-8 bytes; a ``bytes`` value's
  bytes; any other value's RFC 8785 canonical JSON. They let an auditor who holds a value
  check it, and cannot be reversed; a low-entropy secret (a short password) can still be
  confirmed by guessing, as with any unkeyed digest.
- **JSON only**: ``dict``/``Mapping`` with string keys, ``list``/``tuple``, ``str``, ``bool``,
  ``None``, ``int`` (beyond +-(2**53 - 1), where JSON numbers lose precision, as a decimal
  string), ``float`` (NaN and infinities as the strings ``"NaN"``, ``"Infinity"``,
  ``"-Infinity"``), ``bytes`` (as a digest). Text that is not valid Unicode (lone
  surrogates) is stored as its digest. Anything else raises ``InvalidArgumentError`` naming
  where it is, before anything is written.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from graphflow.errors import InvalidArgumentError
from graphflow.jcs import dumps as jcs_dumps

DEFAULT_REDACT_KEYS = (
    "password",
    "passwd",
    "token",
    "secret",
    "api_key",
    "authorization",
    "credential",
    "private_key",
    "cookie",
)
"""The keys redacted when ``EvidenceLog`` is given no ``redact_keys``."""

_CACHE_SIZE = 4096
_CACHED_LENGTH = 200
_INT_MAX = 2**53 - 1
_INT_MIN = -(2**53 - 1)
_NOT_ALNUM = re.compile(r"[^a-z0-9]+")

# Secret formats recognised anywhere in text. The PEM body is matched lazily to its END
# line, or to the end of the text when the key was cut off; its header's words are bounded
# (unbounded, a long run of them took quadratic time).
_PEM_WORDS = r"[A-Z0-9 ]{0,40}PRIVATE KEY[A-Z0-9 ]{0,40}-----"
_FIXED_PATTERNS = (
    rf"(?P<pem>-----BEGIN{_PEM_WORDS}(?:.*?-----END{_PEM_WORDS}|.*))",
    r"(?P<bearer_word>\b(?i:bearer)\s+)(?P<bearer>[A-Za-z0-9\-._~+/]+=*)",
    # HTTP basic credentials (base64 with a digit, '+' or '/': "Basic plan" stays text)
    r"(?P<basic_word>\b(?i:basic)\s+)(?P<basic>(?=[A-Za-z0-9+/]*[0-9+/])[A-Za-z0-9+/]{8,}={0,2})",
    # a URL's password: scheme://user:PASSWORD@host
    r"(?P<url_user>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@\"']+:)(?P<url_pass>[^\s@/\"']+)(?=@)",
    r"(?P<key>\bsk-[A-Za-z0-9_\-]{16,}"
    r"|\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{30,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bxox[abposr]-[A-Za-z0-9\-]{10,})",
    r"(?P<header>\b(?i:authorization)[ \t]*:[ \t]*)(?P<header_value>[^\s\"'][^\r\n\"]*)",
)


def _squash(name: str) -> str:
    return _NOT_ALNUM.sub("", name.lower())


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest(value: Any, *, where: str = "the value") -> str:
    """``"sha256:<hex>"`` of a value (see the module docstring for the bytes hashed).

    Raises ``InvalidArgumentError`` naming ``where`` when ``value`` is not JSON-like."""
    try:
        return _digest(value)
    except _BadValue as e:
        raise e.error(where) from None


def _digest(value: Any) -> str:
    if type(value) is str:
        return _sha256(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bytes | bytearray | memoryview):
        return _sha256(bytes(value))
    return _sha256(jcs_dumps(_normalize(value)))


class _BadValue(Exception):
    """Raised inside the walk; collects the path on its way out."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what
        self.path: list[str] = []

    def error(self, where: str) -> InvalidArgumentError:
        path = "".join(reversed(self.path))
        return InvalidArgumentError(
            f"evidence cannot record {where}{path}: {self.what}; pass JSON-like values "
            "(dict with str keys, list, str, int, float, bool, None, bytes)"
        )


def _normalize(value: Any) -> Any:
    """``value`` as JSON values only (no redaction): what ``digest`` hashes."""
    return _PLAIN._walk(value, False)


class Redactor:
    """Turns values into storable JSON with secrets replaced by digests.

    Args:
        redact_keys: names of secret keys (see the module docstring for how they match).
    """

    def __init__(self, redact_keys: Iterable[str] = DEFAULT_REDACT_KEYS, *, _text: bool = True):
        self._redact_text = _text
        if isinstance(redact_keys, str):
            raise InvalidArgumentError(
                f"redact_keys must be a sequence of key names, not the string {redact_keys!r}"
            )
        keys = tuple(redact_keys)
        needles: set[str] = set()
        for key in keys:
            if not isinstance(key, str) or not _squash(key):
                raise InvalidArgumentError(
                    f"redact_keys: {key!r} is not a key name (a non-empty string with letters "
                    "or digits)"
                )
            needles.add(_squash(key))
        self.redact_keys = keys
        self._needles = tuple(sorted(needles))
        self._secret_key: dict[str, bool] = {}
        self._texts: dict[str, str] = {}
        # ``name=value`` and ``"name": "value"`` are found whatever the name (a linear scan:
        # each match starts at a word's start) and replaced only when the name is a secret
        # key (``_replace``); the value of another name is scanned in turn, once, without
        # the quoted form (a URL's query in a dict's value: ``'url': '...?token=x'``).
        word = r"[A-Za-z0-9_.\-]"
        assign = (
            rf"(?<!{word})(?P<assign>(?P<assign_name>{word}+)=)(?P<assign_value>[^\s&;,\"'<>]+)"
        )
        # (either quote, for JSON and for Python's printing of a dict: an exception's text;
        # a bare value whole: a number, b'...', or a list, dict or tuple to its first close)
        quoted = (
            rf"(?P<quoted>(?P<q1>[\"'])(?P<quoted_name>{word}+)(?P=q1)[ \t]*:[ \t]*"
            r"(?:(?P<q2>[\"'])|(?=[^\s\"',}\]])))"
            r"(?P<quoted_value>(?(q2)(?:(?!(?P=q2))[^\\]|\\.)+"
            r"|(?:b?(?:'[^']*'?|\"[^\"]*\"?)|\[[^\]]*\]?|\{[^}]*\}?|\([^)]*\)?|[^\s\"',}\]]+)))"
        )
        never = "(?!)"  # (the form's groups are kept, and never match)

        def compiled(*forms: str) -> re.Pattern[str]:
            return re.compile("|".join([*_FIXED_PATTERNS, *forms]), re.DOTALL)

        self._pattern = compiled(assign, quoted)
        self._inner = compiled(assign, never + quoted)

    def is_secret_key(self, key: str) -> bool:
        """Whether values under ``key`` are stored as digests."""
        known = self._secret_key.get(key)
        if known is None:
            squashed = _squash(key)
            known = any(needle in squashed for needle in self._needles)
            if len(self._secret_key) < _CACHE_SIZE:  # keys come from model text: bounded
                self._secret_key[key] = known
        return known

    def text(self, s: str) -> str:
        """``s`` with every secret-looking part replaced by its digest."""
        if len(s) <= _CACHED_LENGTH:
            # Most strings of an event (names, ids, enum values) recur from event to event.
            done = self._texts.get(s)
            if done is None:
                if len(self._texts) >= _CACHE_SIZE:
                    self._texts.clear()
                done = self._texts[s] = self._redact_text_now(s)
            return done
        return self._redact_text_now(s)

    def _redact_text_now(self, s: str) -> str:
        if self._pattern.search(s) is None:
            return s
        return self._pattern.sub(self._replace, s)

    def prepare(self, value: Any, *, keyed: bool, where: str) -> Any:
        """``value`` as storable JSON: text redacted everywhere, secret keys' values too when
        ``keyed``. ``where`` names the value in an error (e.g. ``"tool arguments"``)."""
        try:
            return self._walk(value, keyed)
        except _BadValue as e:
            raise e.error(where) from None

    def _walk(self, v: Any, keyed: bool) -> Any:
        t = type(v)
        if t is str:
            return self._str(v)
        if v is None or t is bool:
            return v
        if t is int:
            return v if _INT_MIN <= v <= _INT_MAX else str(v)
        if t is float:
            return v if math.isfinite(v) else _non_finite(v)
        if t is dict or isinstance(v, Mapping):
            out: dict[str, Any] = {}
            # Text already seen (``_texts``: the runtime's names, ids and enum values recur
            # in every event) and scalars are taken here, without a call each: most of an
            # event's members are such (benchmark W5: an event per paused thread).
            texts = self._texts if self._redact_text else None
            for k, item in v.items():
                key = texts.get(k) if texts is not None and type(k) is str else None
                if key is None:
                    if not isinstance(k, str):
                        raise _BadValue(f"key {k!r} is a {type(k).__name__}, not a str")
                    key = self._str(str.__add__("", k))
                try:
                    if keyed and self.is_secret_key(key):
                        out[key] = _digest(item)
                        continue
                    ti = type(item)
                    if ti is str and texts is not None:
                        done = texts.get(item)
                        out[key] = done if done is not None else self._str(item)
                    elif item is None or ti is bool:
                        out[key] = item
                    else:
                        out[key] = self._walk(item, keyed)
                except _BadValue as e:
                    e.path.append(f"[{k!r}]")
                    raise
            return out
        if t is list or t is tuple:
            items = []
            for i, item in enumerate(v):
                try:
                    items.append(self._walk(item, keyed))
                except _BadValue as e:
                    e.path.append(f"[{i}]")
                    raise
            if self._redact_text:
                _pem_lines(v, items)
            return items
        # Subclasses of the JSON types (enums, named tuples) become their plain values.
        if isinstance(v, bool):
            return bool(v)
        if isinstance(v, str):
            return self._str(str.__add__("", v))
        if isinstance(v, int):
            return self._walk(int(v), keyed)
        if isinstance(v, float):
            return self._walk(float(v), keyed)
        if isinstance(v, list | tuple):
            return self._walk(list(v), keyed)
        if isinstance(v, bytes | bytearray | memoryview):
            return _digest(v)
        raise _BadValue(f"a {t.__module__}.{t.__qualname__} is not JSON-like")

    def _replace(self, m: re.Match[str]) -> str:
        return self._replaced(m, True)

    def _replace_inner(self, m: re.Match[str]) -> str:
        return self._replaced(m, False)

    def _replaced(self, m: re.Match[str], deep: bool) -> str:
        """A match's text with its secret replaced; with ``deep``, the value of a name that
        is no secret key scanned in turn (once: a value inside it is not)."""
        if m.group("bearer") is not None:
            return m.group("bearer_word") + digest(m.group("bearer"))
        if m.group("basic") is not None:
            return m.group("basic_word") + digest(m.group("basic"))
        if m.group("url_pass") is not None:
            return m.group("url_user") + digest(m.group("url_pass"))
        if m.group("header_value") is not None:
            return m.group("header") + digest(m.group("header_value"))
        for kind in ("assign", "quoted"):
            value = m.group(f"{kind}_value")
            if value is not None:
                if not self.is_secret_key(m.group(f"{kind}_name")):
                    if not deep or self._inner.search(value) is None:
                        return m.group(0)
                    return m.group(kind) + self._inner.sub(self._replace_inner, value)
                return m.group(kind) + digest(value)
        return digest(m.group(0))

    def _str(self, s: str) -> str:
        if not s.isascii():
            try:
                s.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates: not text that JSON can carry
                return _digest(s)
        return self.text(s) if self._redact_text else s


_PLAIN = Redactor((), _text=False)

_PEM_BEGIN = re.compile(f"-----BEGIN{_PEM_WORDS}")
_PEM_END = re.compile(f"-----END{_PEM_WORDS}")


def _pem_lines(v: Any, items: list[Any]) -> None:
    """A private key given as a list of lines (its ``BEGIN`` line one item, its body the
    next ones): the items after a ``BEGIN`` item without its ``END``, to the ``END`` item,
    become digests too (the ``BEGIN`` item itself already is one)."""
    inside = False
    for i, item in enumerate(v):
        if type(item) is not str:
            inside = False
        elif inside:
            items[i] = _digest(item)
            inside = _PEM_END.search(item) is None
        elif "-----BEGIN" in item and (begin := _PEM_BEGIN.search(item)) is not None:
            inside = _PEM_END.search(item, begin.end()) is None


def _non_finite(f: float) -> str:
    if math.isnan(f):
        return "NaN"
    return "Infinity" if f > 0 else "-Infinity"
