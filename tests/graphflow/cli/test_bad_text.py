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
}


def recorded(cli: Cli) -> list[str]:
    """What the store and the log hold of t1: its state, its pauses and its trail."""
    return [cli(c, "t1", "--json").stdout for c in ("show", "pauses", "audit")]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_text_that_cannot_be_stored_is_one_line_naming_it(cli: Cli, command: str) -> None:
    cli.start("t1")
    before = recorded(cli)
    got = cli(*COMMANDS[command], "--json")
    assert got.code == 1 and got.stdout == "", (got.code, got.stdout)
    assert got.error.count("\n") <= 1 and "Traceback" not in got.error
    assert "is not valid text" in got.error or "control character" in got.error, got.error
    assert "UnicodeEncodeError" not in got.error
    assert recorded(cli) == before
