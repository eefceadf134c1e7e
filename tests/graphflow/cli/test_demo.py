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


def test_demo_interactive_asks_once_the_run_paused(tmp_path: pathlib.Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "graphflow", "demo", "--interactive", "--db", "d.db"],
        cwd=tmp_path, input="deny\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    start, _, rest = proc.stdout.partition("Approve the refund? (approve/deny)")
    assert "paused" in start and "pause " in start  # the pause is shown before the question
    assert "human said 'deny'" in rest and "refused refund of 120" in rest


def test_demo_answer(tmp_path: pathlib.Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "graphflow", "--db", "d.db", "demo", "--answer", "deny"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "refused refund of 120" in proc.stdout and (tmp_path / "d.db").exists()


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
