"""Every example runs as ``python examples/NAME.py`` from a fresh directory (STYLE.md #14)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

EXPECTED = {
    "approval_policy.py": [
        "paused",
        "  refund: issue_refund {'order': 'A-1001', 'amount': 250} (escalate, needs finance)",
        "  email: send_email {'to': 'dana@customer.org', 'body': 'Your refund is on its way.'}"
        " (requires_human_approval)",
        "paused",
        "  refund: issue_refund {'order': 'A-1001', 'amount': 250} (escalate, needs finance)"
        " refused: approver 'bob' lacks the role 'finance' this call needs",
        "  email: send_email {'to': 'dana@customer.org', 'body': 'Your refund is on its way.'}"
        " (requires_human_approval)",
        "done",
        "  Refunded 250 on A-1001 and told the customer.",
        "decisions:",
        "  refund approve by bob: refused: approver 'bob' lacks the role 'finance' this call needs",
        "  refund approve by carol: applied",
        "  email approve by bob: applied",
        "ran: ['refund A-1001 250', 'email dana@customer.org']",
    ],
    "quickstart.py": ["paused [{'question': 'publish?'}]", "done ['drafted', 'review: yes']"],
}


def test_every_example_has_expected_output() -> None:
    assert sorted(EXPECTED) == [p.name for p in EXAMPLES]


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs_twice_with_the_same_output(
    example: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    outputs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, str(example)], cwd=tmp_path, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        outputs.append(out.stdout.splitlines())
    assert outputs[0] == outputs[1] == EXPECTED[example.name]
