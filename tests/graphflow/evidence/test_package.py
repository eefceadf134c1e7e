"""The evidence package's surface, its imports (a leaf), and its dependencies."""

from __future__ import annotations

import ast
import inspect
import os
import pathlib
import subprocess
import sys
import tomllib

import graphflow.evidence as evidence
from graphflow.errors import GraphflowError

ROOT = pathlib.Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "graphflow" / "evidence"

EXPECTED = [
    "AUDIT_STAGE",
    "CallFacts",
    "DEFAULT_REDACT_KEYS",
    "EventDraft",
    "EventType",
    "EvidenceError",
    "EvidenceHead",
    "EvidenceLog",
    "EvidenceRecord",
    "GENESIS",
    "InvalidEventError",
    "ProblemKind",
    "Stage",
    "VerifyProblem",
    "VerifyReport",
    "digest",
    "stages",
    "verify_jsonl",
]


def test_all_is_pinned_sorted_and_documented() -> None:
    assert list(evidence.__all__) == EXPECTED == sorted(EXPECTED)
    for name in evidence.__all__:
        obj = getattr(evidence, name)
        if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj):
            assert obj.__doc__, name
    assert issubclass(evidence.EvidenceError, GraphflowError)
    assert issubclass(evidence.InvalidEventError, evidence.EvidenceError)


def _imports(path: pathlib.Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_the_package_is_a_leaf() -> None:
    """It imports no engine, compiled graph or agents: the runtime calls it, not the reverse."""
    allowed = ("graphflow.errors", "graphflow.jcs", "graphflow.evidence", "checkpoints.blocking",
               "checkpoints.lockwait", "checkpoints.sqlite.wal",
               "checkpoints.sqlite.paths")  # fmt: skip
    for path in PACKAGE.rglob("*.py"):
        for module in _imports(path):
            if module.split(".")[0] in ("graphflow", "checkpoints"):
                assert module.startswith(allowed), (path.name, module)
            assert module.split(".")[0] not in ("pickle", "asyncio"), (path.name, module)


def test_validation_packages_load_only_when_validating() -> None:
    code = "import sys, graphflow.evidence; print('jsonschema' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "GRAPHFLOW_EVIDENCE_VALIDATE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env, timeout=60)  # fmt: skip
    assert out.stdout.strip() == "False"


def test_dependencies_are_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(d.startswith("rfc8785") for d in project["dependencies"])
    for extra in ("validate", "dev"):
        declared = project["optional-dependencies"][extra]
        for dist in ("jsonschema", "rfc3339-validator"):
            assert any(d.startswith(dist) for d in declared), (extra, dist)
