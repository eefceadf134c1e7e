"""Every example runs as ``python examples/NAME.py`` from a fresh directory (STYLE.md #14)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

EXPECTED = {
    "audit_pauses.py": [
        "invoice 1: ACME 9500",
        "  an interrupt paused at the checkpoint of step -1, asked by graphflow",
        "    Pay ACME 9500? (waiting for human input)",
        "    answered: allow by maria",
        "  a tool confirmation paused at the checkpoint of step 0, asked by ap-clerk",
        "    run wire_funds {'vendor': 'ACME', 'amount': 9500}"
        " (the agent requires confirmation of this tool)",
        "    answered: allow by carol",
        "  executed: wire_funds (call wire)",
        "invoice 2: Globex 1200",
        "  an interrupt paused at the checkpoint of step -1, asked by graphflow",
        "    Pay Globex 1200? (waiting for human input)",
        "    answered: allow by maria",
        "  a tool confirmation paused at the checkpoint of step 0, asked by ap-clerk",
        "    run wire_funds {'vendor': 'Globex', 'amount': 1200}"
        " (the agent requires confirmation of this tool)",
        "    answered: deny by carol (duplicate invoice)",
        "  denied: wire_funds (call wire)",
        "invoice 3: Initech 700, waiting at 1 pause(s)",
        "  an interrupt paused at the checkpoint of step -1, asked by graphflow",
        "    Pay Initech 700? (waiting for human input)",
    ],
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
    "approval_workflow.py": [
        "paused",
        "paused at manager_review: {'review': 'manager', 'requester': 'dana',"
        " 'item': '3 x laptop', 'amount': 1350, 'question': 'approve 1350 for dana?'}",
        "manager approved (second process): paused",
        "paused at finance_review: {'review': 'finance', 'requester': 'dana',"
        " 'item': '3 x laptop', 'amount': 1350, 'question': 'approve 1350 for dana?'}",
        "after submit (nothing ran yet): next ['finance_review'],"
        " ['finance_review answered by frank']",
        "done {'requester': 'dana', 'item': 'laptop', 'quantity': 3, 'unit_price': 450,"
        " 'amount': 1350, 'status': 'ordered', 'order': 'PO for 3 x laptop'}",
        "  intake: 1350",
        "  manager: approved by maria",
        "  finance: approved by frank",
        "  order placed",
        "  notified dana: ordered",
        "replayed from before place_order: done PO for 3 x laptop",
        "history (oldest first):",
        "  step -1: input, next ['intake'] []",
        "  step 0: loop, next ['manager_review'] ['manager_review answered by maria']",
        "  step 1: loop, next ['finance_review'] ['finance_review answered by frank']",
        "  step 2: loop, next ['place_order'] []",
        "  step 3: loop, next ['notify'] []",
        "  step 4: loop, next [] []",
        "  step 2: fork, next ['place_order'] []",
        "  step 3: loop, next ['notify'] []",
        "  step 4: loop, next [] []",
        "orders placed: 1",
        "paused at manager_review: {'review': 'manager', 'requester': 'sam',"
        " 'item': '2 x monitor', 'amount': 240, 'question': 'approve 240 for sam?'}",
        "done {'requester': 'sam', 'item': 'monitor', 'quantity': 2, 'unit_price': 120,"
        " 'amount': 240, 'status': 'rejected by manager', 'order': None}",
        "  intake: 240",
        "  manager: denied by maria",
        "  notified sam: rejected by manager",
        "orders placed: 0",
    ],
    "file_manager_cli.py": [
        "user: Tidy up the sandbox: notes.txt says what can go.",
        "  ran list_files({}) -> ['draft.txt', 'notes.txt', 'old.log']",
        "  ran read_file({'path': 'notes.txt'}) -> 'old.log and draft.txt can go.'",
        "Approve delete_file {'path': 'old.log'}? [y/N] y",
        "Approve delete_file {'path': 'draft.txt'}? [y/N] n",
        "  ran delete_file({'path': 'old.log'}) -> {'deleted': 'old.log'}",
        '  the model was told: {"deleted": "old.log"}',
        "  the model was told: Tool call del_draft (delete_file) was denied by a human:"
        " the user said no.",
        "assistant: Deleted old.log. I did not delete draft.txt: you denied it.",
        "sandbox now: ['draft.txt', 'notes.txt']",
    ],
    "nested_review.py": [
        "paused",
        "  tool_confirmation at cleanup.file_manager: delete_file {'path':"
        " 'cache/old.log'} (call call_1)",
        "done ['triage', 'cleanup.plan', 'report']",
        "  user: Clear the old cache log.",
        "  assistant: delete_file({'path': 'cache/old.log'})",
        '  tool: {"deleted": "cache/old.log"}',
        "  assistant: Deleted cache/old.log.",
        "model requests in this process: 1",
        "ran: ['triage', 'cleanup.plan', 'delete_file cache/old.log', 'report']",
    ],
    "quickstart.py": ["paused [{'question': 'publish?'}]", "done ['drafted', 'review: yes']"],
    "resume_job.py": [
        "started 3 refund requests: paused, paused, paused",
        "approved refund-1, denied refund-2; refund-3 waits",
        "worker resumed 2 threads:",
        "  refund-1: done (answered)",
        "  refund-2: done (answered)",
        "refund-1: Refunded.",
        "refund-2: The refund was not issued.",
        "refund-3: paused on issue_refund",
        "refunds issued: ['A-1']",
    ],
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
            stdin=subprocess.DEVNULL, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        outputs.append(out.stdout.splitlines())
    assert outputs[0] == outputs[1] == EXPECTED[example.name]


def test_the_shell_job_resume_job_documents_runs_as_written(tmp_path: pathlib.Path) -> None:
    # From the directory the example ran in, as its docstring says, with what it wrote.
    import re
    import shlex
    import shutil

    source = ROOT / "examples" / "resume_job.py"
    [command] = re.findall(r"^    (graphflow worker .*--once)$", source.read_text(), re.M)
    (tmp_path / "examples").mkdir()
    shutil.copy(source, tmp_path / "examples" / "resume_job.py")
    run = subprocess.run(
        [sys.executable, "examples/resume_job.py"], cwd=tmp_path, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    argv = [sys.executable, "-m", "graphflow", *shlex.split(command)[1:], "--json"]
    job = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert job.returncode == 0, job.stderr
    assert json.loads(job.stdout) == []  # the example's own worker left nothing runnable
