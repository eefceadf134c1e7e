"""The AAEF evidence event schema (shipped in ``schema/``) and validation against it.

Validation needs the optional packages ``jsonschema`` and ``rfc3339-validator`` (the extra
``graphflow-engine[validate]``); without the second, ``jsonschema`` would skip every
``date-time`` check, so validation refuses to run without it. The runtime does not validate
by default: events are built by ``graphflow.evidence.stages`` and validating one costs about
as much as several appends. ``EvidenceLog(validate=True)`` (or the environment variable
``GRAPHFLOW_EVIDENCE_VALIDATE=1``, which the test suite sets) validates every event before
it is written.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from importlib import resources
from typing import Any

SCHEMA_FILE = "agentic-action-evidence-event.schema.json"
SCHEMA_NAME = "aaef.agentic_action_evidence_event"
SCHEMA_VERSION = "0.2.0-draft"
"""The AAEF schema version that graphflow's events follow (the shipped schema's)."""


@functools.cache
def schema_text() -> str:
    """The shipped AAEF schema file, as text."""
    return (
        resources.files("graphflow.evidence")
        .joinpath("schema", SCHEMA_FILE)
        .read_text(encoding="utf-8")
    )


def schema() -> dict[str, Any]:
    """The AAEF evidence event JSON Schema (draft 2020-12), a fresh copy."""
    loaded: dict[str, Any] = json.loads(schema_text())
    return loaded


def missing_packages() -> list[str]:
    """The packages validation needs that are not installed (empty: it can run)."""
    return [
        dist
        for dist, module in (
            ("jsonschema", "jsonschema"),
            ("rfc3339-validator", "rfc3339_validator"),
        )
        if importlib.util.find_spec(module) is None
    ]


@functools.cache
def _validator() -> Any:
    missing = missing_packages()
    if missing:
        raise ModuleNotFoundError(
            f"validating evidence events needs {' and '.join(missing)}: "
            "pip install 'graphflow-engine[validate]'"
        )
    from jsonschema import Draft202012Validator, FormatChecker

    return Draft202012Validator(schema(), format_checker=FormatChecker())


def event_errors(event: Any) -> list[str]:
    """Each way ``event`` fails the schema, as ``"<json path>: <message>"`` (empty: valid).

    Raises ``ModuleNotFoundError`` when the validation packages are not installed."""
    errors = sorted(_validator().iter_errors(event), key=lambda e: list(map(str, e.path)))
    return [f"{e.json_path}: {e.message}" for e in errors]
