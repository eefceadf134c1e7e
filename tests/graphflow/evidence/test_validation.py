"""The shipped AAEF schema: its attribution, the upstream examples, and real date-time checks."""

from __future__ import annotations

import copy
import hashlib
import importlib
import importlib.util
import json
import pathlib
import tomllib
from typing import Any

import pytest

from graphflow.evidence import EvidenceLog, validation

ROOT = pathlib.Path(__file__).resolve().parents[3]
FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "aaef"
SCHEMA_DIR = ROOT / "graphflow" / "evidence" / "schema"
VALID = ["minimal", "valid", "high-impact", "audit-grade", "approval-binding"]
# The upstream file at commit 5d4898c: the copy is unmodified.
SCHEMA_SHA256 = "f561333b3991e801b5186c6d5c9036830c7bd34a0ecdb01b3f3363b5f0cb48ff"


def example(name: str) -> Any:
    path = FIXTURES / f"agentic-action-evidence-event.{name}.json"
    return json.loads(path.read_text(encoding="utf-8"))


def test_date_time_checks_are_really_on(schema_validator: Any) -> None:
    """Without rfc3339-validator jsonschema skips every date-time check, silently."""
    assert importlib.util.find_spec("rfc3339_validator") is not None
    importlib.import_module("rfc3339_validator")
    event = example("minimal")
    assert not list(schema_validator.iter_errors(event))
    for bad in ("2026-13-01T00:00:00Z", "2026-04-25 00:00:00", "yesterday"):
        event["timestamp"] = bad
        assert [e.json_path for e in schema_validator.iter_errors(event)] == ["$.timestamp"]
    assert validation.event_errors(event) == ["$.timestamp: 'yesterday' is not a 'date-time'"]


def test_the_shipped_schema_is_the_unmodified_upstream_file_with_its_attribution() -> None:
    data = (SCHEMA_DIR / "agentic-action-evidence-event.schema.json").read_bytes()
    assert hashlib.sha256(data).hexdigest() == SCHEMA_SHA256
    assert validation.schema_text().encode() == data
    for attribution in (SCHEMA_DIR / "ATTRIBUTION.md", FIXTURES / "ATTRIBUTION.md"):
        text = " ".join(attribution.read_text(encoding="utf-8").split())
        for needed in (
            "AAEF: Agentic Authority & Evidence Framework",
            "mkz0010",
            "github.com/mkz0010/agentic-authority-evidence-framework",
            "5d4898c",
            "Creative Commons Attribution 4.0 International License",
            "https://creativecommons.org/licenses/by/4.0/",
        ):
            assert needed in text, (attribution, needed)


def test_the_schema_and_its_attribution_are_package_data() -> None:
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["graphflow"]
    assert "evidence/schema/*.json" in package_data and "evidence/schema/*.md" in package_data
    assert validation.schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("name", VALID)
def test_the_upstream_examples_validate(name: str, schema_validator: Any) -> None:
    assert list(schema_validator.iter_errors(example(name))) == []
    assert validation.event_errors(example(name)) == []


def test_the_upstream_invalid_example_fails_eight_ways(schema_validator: Any) -> None:
    errors = validation.event_errors(example("invalid"))
    assert len(errors) == 8 == len(list(schema_validator.iter_errors(example("invalid"))))
    paths = sorted(e.split(":")[0] for e in errors)
    assert paths == sorted(
        [
            "$.timestamp",
            "$.agent",
            "$.delegation.authority_scope",
            "$.requested_action.risk_level",
            "$.authorization",
            "$.authorization.decision",
            "$.result",
            "$.evidence",
        ]
    )


def test_validation_refuses_to_run_without_rfc3339_validator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "rfc3339_validator" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    validation._validator.cache_clear()
    try:
        assert validation.missing_packages() == ["rfc3339-validator"]
        with pytest.raises(ModuleNotFoundError, match=r"rfc3339-validator.*\[validate\]"):
            EvidenceLog(":memory:", validate=True)
        EvidenceLog(":memory:", validate=False).close()  # without validation it works
    finally:
        validation._validator.cache_clear()


def test_schema_returns_a_fresh_copy() -> None:
    first = validation.schema()
    original = copy.deepcopy(first)
    first["title"] = "changed"
    assert validation.schema() == original
