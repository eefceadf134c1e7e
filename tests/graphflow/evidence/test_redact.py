"""Redaction and normalization: no secret in clear, everything else as given."""

from __future__ import annotations

import hashlib
import math
import os
import pathlib
import subprocess
import sys
from collections import OrderedDict
from enum import Enum
from typing import Any

import pytest

from graphflow.errors import InvalidArgumentError
from graphflow.evidence import digest
from graphflow.evidence.redact import Redactor

ROOT = pathlib.Path(__file__).resolve().parents[3]
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEA1c7+9z5Pad7OejecsQ0bu3aozN3tihPmljnnudb9G3HECdnH\n"
    "-----END RSA PRIVATE KEY-----"
)


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def prepare(value: Any, keys: tuple[str, ...] | None = None) -> Any:
    redactor = Redactor() if keys is None else Redactor(keys)
    return redactor.prepare(value, keyed=True, where="the arguments")


@pytest.mark.parametrize(
    "key",
    ["password", "PASSWORD", "db_password", "token", "access_token", "refresh-token",
     "secret", "client_secret", "api_key", "apiKey", "X-API-KEY", "apikey", "authorization",
     "Proxy-Authorization", "passwd", "db_passwd", "credentials", "private_key", "privateKey",
     "Cookie", "set-cookie"],
)  # fmt: skip
def test_secret_keys_keep_the_key_and_store_a_digest(key: str) -> None:
    assert prepare({key: "hunter2"}) == {key: sha("hunter2")}


def test_secret_keys_are_redacted_at_any_depth_whatever_the_value() -> None:
    args = {
        "config": {"nested": [{"password": "p1"}, {"token": {"a": [1, 2]}}]},
        "headers": {"Authorization": 12345},
        "note": "refund the customer",
        "amount": 12.5,
        "count": 3,
        "ok": True,
        "nothing": None,
    }
    assert prepare(args) == {
        "config": {"nested": [{"password": sha("p1")}, {"token": digest({"a": [1, 2]})}]},
        "headers": {"Authorization": digest(12345)},
        "note": "refund the customer",
        "amount": 12.5,
        "count": 3,
        "ok": True,
        "nothing": None,
    }
    assert digest({"a": [1, 2]}) == "sha256:" + hashlib.sha256(b'{"a":[1,2]}').hexdigest()


@pytest.mark.parametrize(
    ("text", "kept", "gone"),
    [
        ("send it with Bearer eyJhbGciOi.J9x-y_z please", "Bearer ", "eyJhbGciOi.J9x-y_z"),
        ("bearer abc123", "bearer ", "abc123"),
        ("curl -H 'Authorization: Bearer eyJhbGciOi.J9x'", "curl -H 'Authorization: ", "eyJhb"),
        ("use key sk-proj-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c now", " now", "4f9a8b7c6d5e"),
        ("sk_live_4eC39HqLyjWDarjtT1zdp7dc", "", "4eC39HqLyjWD"),
        ("ghp_0123456789abcdefghijABCDEFGHIJ012345 in a commit", " in a commit", "abcdefghij"),
        ("AKIAIOSFODNN7EXAMPLE", "", "IOSFODNN7"),
        ("xoxb-1234567890-abcdefghij", "", "1234567890"),
        ("GET /v1/items?access_token=abc.def&page=2", "&page=2", "abc.def"),
        ("db --password=hunter2 --user=bob", "--user=bob", "hunter2"),
        ('{"client_secret": "s3cr\\"et", "id": 7}', '"id": 7', "s3cr"),
        ("Authorization: Basic dXNlcjpwYXNz", "Authorization: ", "dXNlcjpwYXNz"),
        ("X-Upstream: Basic dXNlcjpwYXNzd29yZA==", "X-Upstream: Basic ", "dXNlcjpwYXNz"),
        ("https://bob:hunter2pass@example.com/x", "https://bob:", "hunter2pass"),
        ("postgres://app:p%40ss@db:5432/main", "@db:5432/main", "p%40ss"),
    ],
)
def test_secret_looking_text_is_redacted_inside_longer_strings(
    text: str, kept: str, gone: str
) -> None:
    out = Redactor().text(text)
    assert kept in out and gone not in out and "sha256:" in out


@pytest.mark.parametrize(
    "text",
    ["Basic plan for you", "Basic information", "see https://example.com/a:b@c",
     "ssh://git@github.com:22/repo", "mailto:me@example.org"],
)  # fmt: skip
def test_text_that_only_looks_like_a_credential_is_kept(text: str) -> None:
    assert Redactor().text(text) == text


def test_a_secret_in_text_becomes_its_digest() -> None:
    assert Redactor().text("a Bearer tok.en b") == f"a Bearer {sha('tok.en')} b"
    assert Redactor().text("x=1&token=abc") == f"x=1&token={sha('abc')}"
    assert Redactor().text("k sk-abcdefghijklmnopqrst") == f"k {sha('sk-abcdefghijklmnopqrst')}"


def test_pem_private_keys_are_redacted_whole_or_cut_off() -> None:
    text = f"key:\n{PEM}\nend"
    assert Redactor().text(text) == f"key:\n{sha(PEM)}\nend"
    cut = PEM[:60]
    assert Redactor().text("x " + cut) == "x " + sha(cut)
    pgp = "-----BEGIN PGP PRIVATE KEY BLOCK-----\nabc\n-----END PGP PRIVATE KEY BLOCK-----"
    assert Redactor().text(pgp) == sha(pgp)


def test_python_reprs_of_secret_keys_are_redacted_too() -> None:
    """An exception's text (a tool's error, in a ``failed`` event) shows a dict as Python
    prints it: single quotes, and values that are not strings."""
    r = Redactor()
    err = "could not apply config {'password': 'hunter2-PWSECRET', 'host': 'db'}"
    assert r.text(err) == (
        f"could not apply config {{'password': '{sha('hunter2-PWSECRET')}', 'host': 'db'}}"
    )
    its = "it's"
    assert r.text("{'token': \"it's\"}") == "{'token': \"" + sha(its) + '"}'
    assert (
        r.text("{'db_password': 12345, 'n': 1}") == "{'db_password': " + sha("12345") + ", 'n': 1}"
    )
    assert r.text('{"api_key": 99}') == f'{{"api_key": {sha("99")}}}'
    for kept in ("{'host': 'db', 'port': 5432}", "{'n': 1}", "'a': 'b'"):
        assert r.text(kept) == kept


def test_a_secret_in_the_value_of_an_ordinary_key_is_redacted() -> None:
    """The value of a key that is no secret is scanned in turn: a provider's error message,
    a header, a URL's query (as a dict's value, or as ``name=value``)."""
    r = Redactor()
    sk = "sk-proj-AAAABBBBCCCCDDDD1111"
    openai = f"{{'error': {{'message': 'Incorrect API key provided: {sk}', 'type': 'x'}}}}"
    assert r.text(openai) == openai.replace(sk, sha(sk))
    assert r.text("{'headers': 'Authorization: Bearer abc.def'}") == (
        "{'headers': 'Authorization: " + sha("Bearer abc.def") + "'}"
    )
    assert r.text("{'url': 'https://h/?token=abc&x=1'}") == (
        "{'url': 'https://h/?token=" + sha("abc") + "&x=1'}"
    )
    assert r.text("url=https://h/?token=abc") == "url=https://h/?token=" + sha("abc")
    assert r.text('{"msg": "Bearer xyz"}') == '{"msg": "Bearer ' + sha("xyz") + '"}'
    assert r.text("{'e': 'x " + PEM + "'}") == "{'e': 'x " + sha(PEM) + "'}"


def test_a_secret_keys_bare_value_is_redacted_whole() -> None:
    r = Redactor()
    assert r.text("{'password': b'hunter2'}") == "{'password': " + sha("b'hunter2'") + "}"
    assert r.text("{'token': ['hunter2', 'x']}") == "{'token': " + sha("['hunter2', 'x']") + "}"
    assert r.text("{'secret': {'a': 1}}") == "{'secret': " + sha("{'a': 1}") + "}"
    assert r.text("{'secret': ('a', 1)}") == "{'secret': " + sha("('a', 1)") + "}"


def test_a_private_key_given_as_a_list_of_lines_is_redacted_whole() -> None:
    lines = ["-----BEGIN PRIVATE KEY-----", "MIIEvAIBADANBgkqhkiG9w0BAQEFAASC",
             "BKcwggSjAgEAAoIBAQC7", "-----END PRIVATE KEY-----", "after"]  # fmt: skip
    out = prepare({"cfg": {"key": lines}, "other": ["MIIEvAIBADANBgkqhkiG9w0BAQEFAASC"]})
    assert out["cfg"]["key"] == [sha(x) for x in lines[:4]] + ["after"]
    assert out["other"] == ["MIIEvAIBADANBgkqhkiG9w0BAQEFAASC"]  # (no BEGIN line before it)
    cut = prepare(["x", "-----BEGIN RSA PRIVATE KEY-----", "MIIEow", "MIIEox"])  # no END
    assert cut == ["x", *(sha(x) for x in ("-----BEGIN RSA PRIVATE KEY-----", "MIIEow", "MIIEox"))]
    assert prepare([PEM, "MIIEow"]) == [sha(PEM), "MIIEow"]  # a whole key in one item


def test_secret_text_is_redacted_in_any_value_and_key_even_without_keyed() -> None:
    value = {"note": ["sk-abcdefghijklmnopqrstuvwx"], "sk-abcdefghijklmnopqrstuvwx": 1}
    out = Redactor().prepare(value, keyed=False, where="x")
    assert "sk-abcdefghijklmnopqrstuvwx" not in repr(out)
    assert Redactor().prepare({"password": "p"}, keyed=False, where="x") == {"password": "p"}


def test_ordinary_text_is_kept() -> None:
    for text in ("please refund order A-1234", "the task-runner", "max=5", "bearer", "ask-me"):
        assert Redactor().text(text) == text


def test_custom_redact_keys() -> None:
    assert prepare({"ssn": "123", "password": "p"}, ("ssn",)) == {
        "ssn": sha("123"),
        "password": "p",
    }
    assert prepare({"password": "p"}, ()) == {"password": "p"}
    with pytest.raises(InvalidArgumentError, match="not the string 'password'"):
        Redactor("password")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="redact_keys: '--' is not a key name"):
        Redactor(("--",))


def test_redaction_stays_linear_on_adversarial_text() -> None:
    """Text comes from the model: a pattern that backtracks quadratically would hang an
    append for minutes on half a megabyte (it did). Linear, this takes a fraction of a
    second; the timeout only guards against a hang."""
    code = (
        "from graphflow.evidence.redact import Redactor\n"
        "r = Redactor()\n"
        "texts = ('token' * 100_000, 'token=' * 100_000, '\"token\":' * 100_000, 'A' * 500_000,\n"
        "         \"'token': \" * 100_000, \"'token': '\" * 100_000, \"'a': 1, \" * 100_000,\n"
        "         '-----BEGIN ' + 'PRIVATE KEY ' * 40_000, \"'a': [\" * 100_000,\n"
        "         \"'a': {'b': '\" * 50_000, 'x=y=' * 100_000, \"'u': 'a=b' \" * 50_000)\n"
        "for text in texts:\n"
        "    r.text(text)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=30)


class Color(Enum):
    RED = "red"


def test_values_become_json() -> None:
    out = prepare(
        {
            "big": 2**53,
            "small": -(2**53),
            "safe": 2**53 - 1,
            "nan": math.nan,
            "inf": math.inf,
            "ninf": -math.inf,
            "raw": b"\x00\x01",
            "tuple": (1, "a"),
            "ordered": OrderedDict(b=1),
            "surrogate": "\ud800x",
            "flag": False,
        }
    )
    assert out == {
        "big": str(2**53),
        "small": str(-(2**53)),
        "safe": 2**53 - 1,
        "nan": "NaN",
        "inf": "Infinity",
        "ninf": "-Infinity",
        "raw": "sha256:" + hashlib.sha256(b"\x00\x01").hexdigest(),
        "tuple": [1, "a"],
        "ordered": {"b": 1},
        "surrogate": "sha256:"
        + hashlib.sha256("\ud800x".encode("utf-8", "surrogatepass")).hexdigest(),
        "flag": False,
    }


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ({"a": [1, {"b": object()}]}, r"the arguments\['a'\]\[1\]\['b'\]: a builtins.object"),
        ({1: "x"}, r"the arguments: key 1 is a int, not a str"),
        ({"s": {1, 2}}, r"the arguments\['s'\]: a builtins.set"),
        ({"e": Color.RED}, r"the arguments\['e'\]: a .*Color is not JSON-like"),
    ],
)
def test_values_that_are_not_json_like_are_refused_naming_where(value: Any, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        prepare(value)
