"""Text a terminal that is not UTF-8 hands over (a byte such as 0xff reaches ``sys.argv`` as
a lone surrogate) and control characters in a thread id: every command that takes a thread,
a reason or an actor refuses it in one line naming the argument, and writes nothing."""

from __future__ import annotations

import pytest

from .conftest import CALL, Cli

BAD = "t1\udcff"
COMMANDS = {
    "show": ["show", BAD],
    "history": ["history", BAD],
    "pauses": ["pauses", BAD],
    "audit": ["audit", BAD],
    "approve": ["approve", BAD, CALL, "--by", "alice"],
    "deny": ["deny", BAD, CALL, "--by", "alice", "--reason", "no"],
    "answer": ["answer", BAD, "0123456789abcdef:i0", '"yes"', "--by", "alice"],
    "cancel": ["cancel", BAD, "--reason", "done"],
    "freeze": ["freeze", BAD, "--reason", "incident"],
    "unfreeze": ["unfreeze", BAD, "--reason", "cleared"],
    "resume": ["resume", BAD, "--graph", "flows:graph"],
    "control character": ["show", "t\x01"],
    "approve by": ["approve", "t1", CALL, "--by", "alice\udcff"],
    "cancel reason": ["cancel", "t1", "--reason", "done\udcff"],
    "freeze by": ["freeze", "t1", "--reason", "incident", "--by", "sec\udcffops"],
    "approve reason": ["approve", "t1", CALL, "--by", "alice", "--reason", "ok\udcff"],
    "deny reason": ["deny", "t1", CALL, "--reason", "no\udcff"],
    "answer reason": ["answer", "t1", "0123456789abcdef:i0", '"yes"', "--reason", "\udcff"],
    "answer value": ["answer", "t1", "0123456789abcdef:i0", '"y\udcff"'],
    "run input": ["run", "--graph", "flows:graph", "--thread", "t9", "--input", '{"a": "\udcff"}'],
    "policy args": ["policy", "check", "--policy", "p.yaml", "--tool", "t", "--args", '"\udcff"'],
}


def recorded(cli: Cli) -> list[str]:
    """What the store and the log hold of t1: its state, its pauses and its trail."""
    return [cli(c, "t1", "--json").stdout for c in ("show", "pauses", "audit")]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_text_that_cannot_be_stored_is_one_line_naming_it(cli: Cli, command: str) -> None:
    cli.start("t1")
    before = recorded(cli)
    got = cli(*COMMANDS[command], "--json")
    # Every argument is checked as it is parsed: a usage error (2), whichever it is.
    assert got.code == 2, (got.code, got.stdout)
    assert got.stdout == ""
    assert got.error.count("\n") <= 1 and "Traceback" not in got.error
    assert "is not valid text" in got.error or "control character" in got.error, got.error
    assert "UnicodeEncodeError" not in got.error
    assert recorded(cli) == before


IDS = {
    "empty thread": (["approve", "", CALL], "THREAD must be a non-empty string"),
    "long thread": (["show", "t" * 1001], "THREAD 'tttt"),
    "empty by": (["approve", "t1", CALL, "--by", ""], "--by must be a non-blank id"),
    "blank by": (["deny", "t1", CALL, "--reason", "r", "--by", "  "], "--by must be a non-bl"),
    "newline by": (["approve", "t1", CALL, "--by", "bo\nb"], "--by 'bo\\nb' holds a control"),
    "NUL by": (["cancel", "t1", "--reason", "r", "--by", "a\x00"], "holds a control character"),
    "empty --thread": (
        ["run", "--graph", "flows:graph", "--thread", "", "--input", "{}"],
        "--thread must be a non-empty string",
    ),
    "nan poll": (
        ["worker", "--graph", "flows:graph", "--poll-interval", "nan"],
        "'nan' is not a positive, finite number of seconds",
    ),
    "inf lease": (
        ["worker", "--graph", "flows:graph", "--lease-seconds", "inf"],
        "'inf' is not a positive, finite number of seconds",
    ),
}


@pytest.mark.parametrize("case", sorted(IDS))
def test_bad_ids_and_numbers_are_usage_errors_naming_the_option(cli: Cli, case: str) -> None:
    """An approver id that would print as two lines of the audit trail, a blank one, an
    empty or over-long thread id, a number of seconds that is not one: exit 2, one line
    naming the argument, nothing written."""
    cli.start("t1")
    before = recorded(cli)
    args, message = IDS[case]
    got = cli(*args)
    assert got.code == 2 and got.stdout == "", (got.code, got.stdout, got.error)
    assert got.error.count("\n") <= 1 and message in got.error, got.error
    assert recorded(cli) == before


ESCAPES = "x\x1b[31mRED\x1b]0;pwned\x07\u202eY"


def test_reasons_print_escaped_where_they_are_echoed(cli: Cli) -> None:
    """A reason is stored as given, and printed with its control characters escaped: it
    never recolours, retitles or reorders the operator's terminal (an outside finding)."""
    cli.start("t1")
    approved = cli("approve", "t1", CALL, "--by", "alice", "--reason", ESCAPES)
    frozen = cli("freeze", "t1", "--reason", ESCAPES, "--by", "ops")
    listed = cli("pauses", "t1")
    unfrozen = cli("unfreeze", "t1", "--reason", ESCAPES, "--by", "ops")
    cancelled = cli("cancel", "t1", "--reason", ESCAPES, "--by", "ops")
    for got in (approved, frozen, listed, unfrozen, cancelled):
        assert got.code == 0, got.error
        assert not any(c in got.stdout for c in "\x1b\x07\u202e"), got.stdout
    for got in (frozen, unfrozen, cancelled):
        assert "x\\x1b[31mRED\\x1b]0;pwned\\x07\\u202eY" in got.stdout, got.stdout
    assert "\\x1b[31mRED" in listed.stdout, listed.stdout


def test_an_error_line_escapes_what_it_quotes(capsys: pytest.CaptureFixture[str]) -> None:
    from graphflow.cli.common import fail

    assert fail(ValueError(f"node said {ESCAPES}\nsecond line")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not any(c in err for c in "\x1b\x07\u202e"), err
    assert "node said x\\x1b[31mRED" in err and "second line" in err
