"""Packaging: the version, ``python -m graphflow``, project metadata and the license."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tomllib
from importlib import metadata

import pytest

import graphflow

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_version_is_the_installed_distributions() -> None:
    assert graphflow.__version__ == metadata.version("graphflow-engine")
    assert (
        graphflow.__version__
        == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    )


def test_version_without_installed_metadata_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    monkeypatch.delitem(vars(graphflow), "__version__", raising=False)
    try:
        assert graphflow.__version__ == "0+unknown"
    finally:
        vars(graphflow).pop("__version__", None)  # read again when next asked
    with pytest.raises(AttributeError, match="no_such_name"):
        graphflow.no_such_name  # noqa: B018


def test_python_dash_m_graphflow_is_the_console_script(tmp_path: pathlib.Path) -> None:
    run = [sys.executable, "-m", "graphflow"]
    proc = subprocess.run([*run, "--help"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.lower().startswith("usage: graphflow ") and "demo" in proc.stdout
    proc = subprocess.run([*run, "--version"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout == f"graphflow {graphflow.__version__}\n"
    proc = subprocess.run([*run, "nonsense"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_project_urls_and_license() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for key in ("Homepage", "Source"):
        assert project["urls"][key].startswith("https://github.com/graphflow-engine/")
    assert project["license"] == "Apache-2.0"  # an SPDX expression (PEP 639)
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX" in text
