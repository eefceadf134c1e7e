"""``graphflow policy check``: JSON on stdout; bad input is one line on stderr, exit 2 or 1."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from graphflow import cli

POLICY = """\
policies:
  - id: big-refund
    match: {tool: issue_refund}
    conditions: ["args.amount > 1000"]
    decision: escalate
    required_role: finance_manager
    reason: Large refunds need a finance manager
  - id: small-refund
    match: {tool: issue_refund}
    conditions: ["args.amount <= 1000"]
    decision: allow
  - id: interns
    match: {principal.roles: intern}
    decision: deny
  - id: outside
    match: {action_type: external_communication}
    conditions: ["destination.domain != corp.com"]
    decision: requires_human_approval
"""


@pytest.fixture
def policy(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY, encoding="utf-8")
    return path


def run(cwd: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "graphflow", "policy", "check", *args],
        cwd=cwd, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def run_here(
    cwd: pathlib.Path, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    """Run the command in this process (from ``cwd``); return (exit code, stdout, stderr)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        try:
            code = cli.main(["policy", "check", *args])
        except SystemExit as exc:  # pragma: no cover - main returns its exit code
            code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_decision_as_json_in_a_subprocess(policy: pathlib.Path) -> None:
    proc = run(policy.parent, "--policy", "policy.yaml", "--tool", "issue_refund",
               "--args", '{"amount": 5000}')  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    out = json.loads(proc.stdout)
    assert {k: out[k] for k in ("decision", "rule_id", "reason")} == {
        "decision": "escalate",
        "rule_id": "big-refund",
        "reason": "Large refunds need a finance manager",
    }
    assert out["version"].startswith("sha256:") and out["required_role"] == "finance_manager"


def test_options(policy: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    def check(*args: str) -> dict[str, object]:
        assert cli.main(["policy", "check", "--policy", str(policy), *args]) == 0
        result: dict[str, object] = json.loads(capsys.readouterr().out)
        return result

    small = ["--tool", "issue_refund", "--args", '{"amount": 5}']
    assert check(*small)["decision"] == "allow"
    tainted = check(*small, "--tainted")
    assert (tainted["decision"], tainted["rule_id"]) == ("escalate", "small-refund")
    intern = check(*small, "--principal", "ian", "--roles", "staff, intern")
    assert (intern["decision"], intern["rule_id"]) == ("deny", "interns")
    assert check("--tool", "x", "--args", "{}")["decision"] == "escalate"  # default risk high
    same = check("--tool", "x", "--args", "{}", "--json", "--db", "unused.db")  # (accepted)
    assert same["decision"] == "escalate" and not (policy.parent / "unused.db").exists()
    assert check("--tool", "x", "--args", "{}", "--risk", "low")["decision"] == "allow"
    mail = ["--tool", "send", "--args", "{}", "--risk", "low", "--category",
            "external_communication"]  # fmt: skip
    assert check(*mail, "--facts", '{"destination": {"domain": "x.org"}}')["rule_id"] == "outside"
    missing = check(*mail)
    assert missing["decision"] == "defer"
    assert str(missing["reason"]).startswith("authorization unavailable")


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--tool", "t", "--args", "{not json"], 2, "--args is not JSON"),
        (["--tool", "t", "--args", "[1]"], 2, "--args must be a JSON object"),
        (["--tool", "t", "--args", "{}", "--facts", "1"], 2, "--facts must be a JSON object"),
        (["--tool", "t", "--args", "{}", "--roles", "a"], 2, "--roles needs --principal"),
        (
            ["--tool", "t", "--args", "{}", "--risk", "severe"],
            2,
            "Invalid value for '--risk': 'severe' is not one of 'low', 'medium', 'high'",
        ),
        (
            ["--tool", "t", "--args", "{}", "--category", "money"],
            2,
            "Invalid value for '--category': 'money' is not one of",
        ),
        (["--args", "{}"], 2, "Missing option '--tool' (see 'graphflow policy check --help')"),
        (["--tool", "t", "--args", "{}", "--principal", ""], 2, "principal"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    policy: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    code: int,
    message: str,
) -> None:
    got, out, err = run_here(policy.parent, capsys, "--policy", "policy.yaml", *args)
    assert got == code, err
    assert out == "" and len(err.splitlines()) == 1, err
    assert message in err


def test_errors_in_a_subprocess_print_no_traceback(policy: pathlib.Path) -> None:
    usage = run(policy.parent, "--policy", "policy.yaml", "--tool", "t", "--args", "{x")
    assert usage.returncode == 2 and usage.stdout == ""
    assert usage.stderr.splitlines() == [
        "graphflow: error: --args is not JSON: Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1)"
    ]
    missing = run(policy.parent, "--policy", "absent.yaml", "--tool", "t", "--args", "{}")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.splitlines() == [
        "graphflow: error: cannot read policy file 'absent.yaml': No such file or directory"
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "cannot read policy file 'policy.yaml'"),
        ("policies: [", "invalid YAML"),
        ("policies:\n  - id: r\n    decision: perhaps\n", "policy rule 'r': decision 'perhaps'"),
        ("policies:\n  - id: r\n    decision: deny\n    conditions: ['a ?? 1']\n", "'a ?? 1'"),
    ],
)
def test_a_policy_that_does_not_load_is_one_line_and_exit_1(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], text: str | None, message: str
) -> None:
    if text is not None:
        (tmp_path / "policy.yaml").write_text(text, encoding="utf-8")
    code, out, err = run_here(tmp_path, capsys, "--policy", "policy.yaml", "--tool", "t",
                              "--args", "{}")  # fmt: skip
    assert code == 1, err
    assert out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("graphflow: error: ") and message in err
