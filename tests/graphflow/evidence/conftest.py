"""Every event these tests write is validated against the AAEF schema as it is appended
(``GRAPHFLOW_EVIDENCE_VALIDATE``, inherited by the subprocesses the tests start)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator, FormatChecker

from graphflow.evidence import validation
from graphflow.evidence.walsync import WalSync


@pytest.fixture(autouse=True)
def _validate_every_event(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("GRAPHFLOW_EVIDENCE_VALIDATE", "1")
    yield


@pytest.fixture
def schema_validator() -> Any:
    """A validator of the shipped schema, made here (not by the package under test)."""
    return Draft202012Validator(validation.schema(), format_checker=FormatChecker())


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Our syncs of a WAL after an append, in order: True for a new WAL's (its directory
    synced too)."""
    done: list[bool] = []
    real = WalSync._sync

    def counted(self: WalSync, new: bool) -> None:
        real(self, new)
        done.append(new)

    monkeypatch.setattr(WalSync, "_sync", counted)
    return done
