"""The README's examples run as written (STYLE.md #14), each in a fresh directory."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index: int, tmp_path: pathlib.Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(BLOCKS[index], encoding="utf-8")
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr


def test_the_demo_pauses_is_approved_and_resumed_by_a_worker(tmp_path: pathlib.Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "graphflow.cli", "demo", "--db", str(tmp_path / "demo.db")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    stages = [line.split("]")[0] for line in out.stdout.splitlines() if line.startswith("[")]
    assert stages == ["[1 run", "[2 decide", "[3 worker", "[4 audit", "[5 verify"]
    assert "is paused" in out.stdout and "ran: refund A-1001 120" in out.stdout
    assert "hash chain intact" in out.stdout


def test_the_agent_example_pauses_in_one_process_and_resumes_in_another(
    tmp_path: pathlib.Path,
) -> None:
    """The example says the decision may come "later, in any process": run it that way."""
    (block,) = [b for b in BLOCKS if "ToolConfirmationPause" in b]
    setup, _, resume = block.partition("# later, in any process")
    define = setup.partition("for event in graph.stream(")[0]
    first = setup
    second = define + "\n".join(resume.splitlines()[1:]) + "\n"
    outputs = []
    for script in (first, second):
        path = tmp_path / "step.py"
        path.write_text(script, encoding="utf-8")
        out = subprocess.run(
            [sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        outputs.append(out.stdout)
    assert outputs[0].startswith("delete_file {'path': '/data/report.csv'} sha256:")
    assert outputs[1] == "done Deleted.\n"


def test_the_first_example_run_twice_prints_what_its_comments_say(tmp_path: pathlib.Path) -> None:
    block = BLOCKS[0]
    expected = [
        line.split("#", 1)[1].strip() for line in block.splitlines() if line.startswith("print(")
    ]
    (tmp_path / "example.py").write_text(block, encoding="utf-8")
    for _ in range(2):  # in one directory, on one database file
        out = subprocess.run(
            [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == expected


def test_every_test_the_readme_names_exists() -> None:
    """A guarantee's "the test that shows it" is a real file, and a real test in it."""
    root = README.parent
    text = README.read_text(encoding="utf-8")
    named = re.findall(r"`((?:tests/)?[\w/]*test_\w+\.py)((?:::\w+)?)`", text)
    named += [(f, t) for f, t in re.findall(r"`(test_\w+\.py)(::\w+)`", text)]
    assert len(named) >= 10
    for path, test in named:
        found = [root / path] if path.startswith("tests/") else root.glob(f"tests/**/{path}")
        matches = list(found)
        assert matches and matches[0].is_file(), f"README names {path}, which does not exist"
        if test:
            source = matches[0].read_text(encoding="utf-8")
            assert f"def {test[2:]}(" in source, f"README names {path}{test}, not in the file"
    for test in re.findall(r"`::(test_\w+)`", text):
        assert any(f"def {test}(" in p.read_text(encoding="utf-8")
                   for p in root.glob("tests/**/test_*.py")), test  # fmt: skip
