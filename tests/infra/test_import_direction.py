"""``checkpoints`` never imports ``graphflow`` (DESIGN.md, "Layers and data flow")."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("graphflow", "checkpoints")


def _sources() -> list[pathlib.Path]:
    return [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]


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
        str(p.relative_to(ROOT))
        for p in (ROOT / "checkpoints").rglob("*.py")
        if any(m == "graphflow" or m.startswith("graphflow.") for m in _imports(p))
    ]
    assert offenders == []


def test_importing_checkpoints_loads_no_graphflow_module() -> None:
    code = (
        "import sys, checkpoints; print(any(m.split('.')[0] == 'graphflow' for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_msgpack_only_in_serde() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in _sources()
        if "msgpack" in _imports(p) and p.parent.relative_to(ROOT).as_posix() != "checkpoints/serde"
    ]
    assert offenders == []


def test_networkx_only_in_validation_and_drawing() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in _sources()
        if "networkx" in _imports(p) and p.name not in ("validate.py", "drawing.py")
    ]
    assert offenders == []


def test_import_linter_contract() -> None:
    code = (
        "import sys; from importlinter.cli import lint_imports_command; "
        "sys.exit(lint_imports_command())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 kept, 0 broken" in out.stdout


def test_import_and_compile_load_neither_networkx_nor_sqlite_utils() -> None:
    """A process that resumes a thread pays for neither (about 0.25 s each to import)."""
    code = (
        "import sys, tempfile, os\n"
        "from typing import TypedDict\n"
        "from graphflow import StateGraph, START, END\n"
        "from checkpoints import SqliteCheckpointer\n"
        "class S(TypedDict):\n    x: int\n"
        "path = os.path.join(tempfile.mkdtemp(), 'f.db')\n"
        "SqliteCheckpointer(path).close\n"  # creates the file: sqlite_utils may load here
        "del sys.modules['sqlite_utils']\n"
        "g = StateGraph(S).add_node('a', lambda s: {'x': 1}).add_edge(START, 'a')\n"
        "g = g.add_edge('a', END).compile(checkpointer=SqliteCheckpointer(path))\n"
        "g.invoke({'x': 0}, thread_id='t')\n"
        "print(sorted(m for m in ('networkx', 'sqlite_utils') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _all_imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    """Project modules a module imports anywhere in its code (functions included), except
    in ``if TYPE_CHECKING:`` blocks (types only: nothing is imported when it runs)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        out.update(n for n in names if n in modules and n != here)
    return out


def test_no_import_cycle_counting_imports_inside_functions() -> None:
    """Explicit imports between project modules form no cycle, imports made inside
    functions included (a lazy import hides a cycle; it does not remove it)."""
    files = {_module_name(p): p for p in _sources()}
    modules = set(files)
    graph = {m: _all_imports(p, modules) for m, p in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    assert cycles == []


@pytest.mark.parametrize(
    "package",
    ["graphflow", "checkpoints"],
)
def test_no_module_is_over_400_lines(package: str) -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / package).rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert long == {}


def test_no_engine_module_is_over_300_lines() -> None:
    """The engine is read more than any other part: each of its modules stays short."""
    long = {
        p.name: n
        for p in (ROOT / "graphflow" / "engine").glob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 300
    }
    assert long == {}


def test_the_worker_layer_is_imported_only_from_the_command_line() -> None:
    """``graphflow.worker`` chooses what to run on top of the engine: only the CLI (and
    nothing the engine or the compiled graph imports) depends on it, and importing it loads
    neither the command line (click) nor networkx."""
    files = {_module_name(p): p for p in _sources()}
    modules = set(files)
    users = sorted(m for m, p in files.items() if "graphflow.worker" in _all_imports(p, modules))
    assert users == ["graphflow.cli.worker"]
    code = (
        "import sys, graphflow.worker; "
        "print(sorted(m for m in ('click', 'networkx') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
