"""The ``graphflow`` command line: errors are one line on stderr, never a traceback."""

from __future__ import annotations

import pathlib
import sqlite3
import subprocess
import sys
from typing import Any

import pytest

from checkpoints.errors import CorruptCheckpointError
from graphflow import cli


def test_demo_on_a_missing_directory_says_so_in_one_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "missing" / "x.db")
    assert cli.main(["demo", "--db", db]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("graphflow: error: "), err
    assert repr(db) in err and "does not exist" in err and "--db" in err
    assert not (tmp_path / "missing").exists()  # nothing was created


def test_demo_on_a_missing_directory_prints_no_traceback(tmp_path: pathlib.Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "graphflow", "demo", "--db", "missing/x.db"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "graphflow: error: cannot create the database 'missing/x.db': directory 'missing' "
        "does not exist; create it first or pass --db with a file in an existing directory"
    ]


@pytest.mark.parametrize(
    "error",
    [
        CorruptCheckpointError("thread 't': a damaged\nrecord", thread_id="t"),
        sqlite3.OperationalError("unable to open database file"),
        PermissionError(13, "Permission denied"),
    ],
    ids=["checkpoint error", "sqlite error", "os error"],
)
def test_errors_of_a_command_are_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: Exception
) -> None:
    def failing(*args: Any) -> int:
        raise error

    monkeypatch.setattr("graphflow.demo.main", failing)
    assert cli.main(["demo", "--db", "some.db"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("graphflow: error: "), err
    if not isinstance(error, CorruptCheckpointError):
        assert "'some.db'" in err  # the store that could not be used is named
    else:
        assert "thread 't': a damaged record" in err


def _demo(tmp_path: pathlib.Path, *args: str, stdin: str = "") -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "graphflow", "--db", "d.db", "demo", *args],
        cwd=tmp_path, input=stdin, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def _stages(lines: list[str]) -> list[str]:
    return [line.split("]")[0] + "]" for line in lines if line.startswith("[")]


def test_demo_pauses_is_approved_elsewhere_runs_once_and_verifies(tmp_path: pathlib.Path) -> None:
    lines = _demo(tmp_path)
    out = "\n".join(lines)
    assert _stages(lines) == ["[1 run]", "[2 decide]", "[3 worker]", "[4 audit]", "[5 verify]"]
    assert "refunds wants issue_refund {'order': 'A-1001', 'amount': 120}" in out
    assert "rule refunds-need-finance: escalate, needs the role 'finance'" in out
    assert "graphflow approve refund-" in out and "--by carol" in out
    ran = [line.strip() for line in lines if line.strip().startswith("ran: ")]
    assert [r.split(" (pid")[0] for r in ran] == [
        "ran: refund A-1001 120",
        "ran: email dana@customer.example",
    ]
    pids = {line.split("pid ")[1].rstrip(")") for line in ran}
    run_pid = lines[0].split("pid ")[1].split(":")[0]
    assert run_pid not in pids  # the calls ran in the worker's process, not the first one
    assert "outcome: Refunded 120 on A-1001 and emailed the customer." in out
    trail = [line.split()[1] for line in lines if line.startswith("      ") and
             line.split()[0].isdigit()]  # fmt: skip
    assert trail[:6] == ["proposal", "policy", "pause", "decision", "dispatch", "result"]
    assert "hash chain intact" in out and "NOT APPLIED" not in out


def test_demo_twice_in_one_directory(tmp_path: pathlib.Path) -> None:
    first = _demo(tmp_path)
    second = _demo(tmp_path)
    for lines in (first, second):
        assert sum("ran: refund A-1001 120" in line for line in lines) == 1
    assert first[0].split("case ")[1] != second[0].split("case ")[1]  # a new thread each time
    assert "hash chain intact" in second[-3]


def test_demo_deny_runs_no_refund(tmp_path: pathlib.Path) -> None:
    lines = _demo(tmp_path, "--answer", "deny")
    out = "\n".join(lines)
    assert "graphflow deny refund-" in out
    assert not [line for line in lines if line.strip().startswith("ran: ")]
    assert "outcome: No refund was issued" in out


def test_demo_interactive_asks_once_the_run_paused(tmp_path: pathlib.Path) -> None:
    out = "\n".join(_demo(tmp_path, "--interactive", stdin="deny\n"))
    start, _, rest = out.partition("Approve the refund? (approve/deny)")
    assert rest.startswith(" [approve]: "), rest[:40]  # the choices are named once
    assert "[1 run]" in start and "issue_refund" in start and "[2 decide]" not in start
    assert "graphflow deny refund-" in rest and "No refund was issued" in rest


def test_demo_interactive_and_answer_together_is_a_usage_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "d.db")
    assert cli.main(["demo", "--interactive", "--answer", "deny", "--db", db]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "--interactive" in err
    assert not (tmp_path / "d.db").exists()


def test_demo_interactive_without_an_answer_is_one_line(tmp_path: pathlib.Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "graphflow", "demo", "--interactive", "--db", "d.db"],
        cwd=tmp_path, input="", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr == "graphflow: error: aborted: no answer was given\n"


def test_ctrl_c_at_the_interactive_prompt_is_exit_130(tmp_path: pathlib.Path) -> None:
    """A Ctrl-C at the approver's prompt: interrupted (130), not "no answer was given"."""
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-m", "graphflow", "demo", "--interactive", "--db", "d.db"],
        cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    seen = ""
    while "Approve the refund?" not in seen:  # (the prompt has no newline: read by chars)
        char = proc.stdout.read(1)
        assert char, "the demo ended before it asked"
        seen += char
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, err)
    assert err == "graphflow: error: interrupted\n"
