"""``checkpoints`` never imports ``graphflow`` (DESIGN.md, "Layers and data flow")."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_checkpoints_source_never_imports_graphflow() -> None:
    offenders = [
        str(p.relative_to(SRC))
        for p in (SRC / "checkpoints").rglob("*.py")
        if any(m == "graphflow" or m.startswith("graphflow.") for m in _imports(p))
    ]
    assert offenders == []


def test_importing_checkpoints_loads_no_graphflow_module() -> None:
    code = (
        "import sys, checkpoints; "
        "print(any(m.split('.')[0] == 'graphflow' for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_msgpack_only_in_serde() -> None:
    offenders = [
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if "msgpack" in _imports(p) and p.name != "serde.py"
    ]
    assert offenders == []


def test_networkx_only_in_validation_and_drawing() -> None:
    offenders = [
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if "networkx" in _imports(p) and p.name not in ("validate.py", "drawing.py")
    ]
    assert offenders == []


def test_import_linter_contract() -> None:
    code = (
        "import sys; from importlinter.cli import lint_imports_command; "
        "sys.exit(lint_imports_command())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=SRC.parent
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 kept, 0 broken" in out.stdout
