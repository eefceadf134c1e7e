"""How each benchmark hands its figures to ``benchmarks/run.py``.

A benchmark prints its own readable report; it also calls ``emit`` with its figures as
rows (``metric``, ``value``, ``unit``, ``target``, ``note``). Run on its own, ``emit`` does
nothing; under ``run.py`` (which sets ``GRAPHFLOW_BENCH_RESULTS`` to a file) it appends one
JSON line to that file.
"""

from __future__ import annotations

import json
import os
from typing import Any

RESULTS_ENV = "GRAPHFLOW_BENCH_RESULTS"


def row(
    metric: str, value: float | None, unit: str | None, target: str | None = None,
    note: str = "",
) -> dict[str, Any]:  # fmt: skip
    """One row of the results table."""
    return {"metric": metric, "value": value, "unit": unit, "target": target, "note": note}


def emit(benchmark: str, rows: list[dict[str, Any]]) -> None:
    """Hand ``rows`` to ``run.py`` when it runs this benchmark (else do nothing)."""
    path = os.environ.get(RESULTS_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"benchmark": benchmark, "rows": rows}) + "\n")
