"""How long ``EvidenceLog.verify`` takes on a large log, and what one append costs.

    python benchmarks/evidence_verify.py [--events 100000] [--appends 300] [--dir DIR]

Builds a log of ``--events`` tool-call events (a realistic mix of stages, appended in
batches with ``append_many``), then times ``verify`` (intact, and with one event edited so
that the slow path that classifies problems runs), and the latency of single ``append``
calls (each one durable transaction) with and without schema validation. The goal:
``verify`` of 100,000 events under 5 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _results import emit, row

from graphflow.evidence import CallFacts, EventDraft, EvidenceLog, stages


def drafts(count: int) -> Iterator[EventDraft]:
    """``count`` events: proposal, policy decision, dispatch and execution of calls."""
    for i in range(count):
        call = CallFacts(
            thread_id=f"thread-{i // 40}",
            call_id=f"call-{i // 4}",
            tool="issue_refund",
            args={"order_id": f"A-{i}", "amount": 12.5, "note": "customer asked twice"},
            agent="support",
            node="agent",
            principal_id="alice@example.com",
            risk="high",
            category="financial",
            checkpoint_id=f"ck-{i // 4}",
            policy_version="sha256:" + "c" * 64,
            action_digest="sha256:" + "d" * 64,
        )
        stage = i % 4
        if stage == 0:
            yield stages.proposed(call)
        elif stage == 1:
            yield stages.policy_decision(call, decision="allow", rule_id="small-refunds")
        elif stage == 2:
            yield stages.dispatch_claimed(call, nonce=f"nonce-{i}")
        else:
            yield stages.executed(call, result={"refund_id": f"r-{i}"})


def build(path: str, count: int) -> float:
    start = time.perf_counter()
    log = EvidenceLog(path, validate=False)
    batch: list[EventDraft] = []
    for draft in drafts(count):
        batch.append(draft)
        if len(batch) == 1000:
            log.append_many(batch)
            batch = []
    if batch:
        log.append_many(batch)
    log.close()
    return time.perf_counter() - start


def time_verify(path: str, runs: int = 3) -> tuple[float, int, bool]:
    best = float("inf")
    count, ok = 0, False
    for _ in range(runs):
        log = EvidenceLog(path, validate=False)  # a fresh connection each run
        start = time.perf_counter()
        report = log.verify(expected_head=log.head())
        best = min(best, time.perf_counter() - start)
        count, ok = report.count, report.ok
        log.close()
    return best, count, ok


def time_appends(path: str, count: int, *, validate: bool) -> list[float]:
    log = EvidenceLog(path, validate=validate)
    times = []
    for draft in drafts(count):
        start = time.perf_counter()
        log.append(draft)
        times.append(time.perf_counter() - start)
    log.close()
    return times


def validation_available() -> bool:
    """Whether ``EvidenceLog(validate=True)`` can run here (the ``validate`` extra)."""
    from importlib.util import find_spec

    return all(find_spec(m) is not None for m in ("jsonschema", "rfc3339_validator"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--dir", default=None, help="where to build the logs (default: a temp dir)")
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="evidence-bench-")
    try:
        path = os.path.join(directory, "big.evidence.db")
        built = build(path, args.events)
        size = os.path.getsize(path)
        print(f"built {args.events} events in {built:.1f} s ({size / 1e6:.1f} MB)")
        seconds, count, ok = time_verify(path)
        print(f"verify, intact: {seconds:.2f} s for {count} events (ok={ok}; goal: < 5 s)")
        rows = [
            row(f"verify of {count} events", round(seconds, 2), "s", "< 5", f"ok={ok}"),
            row(f"verify of {count} events / 5 s target", round(seconds / 5, 2), "ratio", "< 1"),
        ]

        tampered = os.path.join(directory, "tampered.evidence.db")
        shutil.copy(path, tampered)
        with sqlite3.connect(tampered) as db:
            db.execute("DROP TRIGGER evidence_events_no_update")
            edited = db.execute(
                "UPDATE evidence_events SET body = replace(body, 'issue_refund', 'issue_refunD') "
                "WHERE seq = ?",
                (args.events // 2,),
            ).rowcount
            assert edited == 1
        db.close()
        seconds, count, ok = time_verify(tampered, runs=1)
        assert not ok, "the edit was not detected"
        print(f"verify, one event edited (the slow path): {seconds:.2f} s (ok={ok})")
        rows.append(row("verify with one event edited (slow path)", round(seconds, 2), "s"))

        for validate in (False, True):
            if validate and not validation_available():
                print("append with validate=True: skipped (pip install -e '.[validate]')")
                continue
            times = time_appends(
                os.path.join(directory, f"appends-{validate}.evidence.db"),
                args.appends,
                validate=validate,
            )
            p50 = statistics.median(times) * 1e3
            p90 = statistics.quantiles(times, n=10)[-1] * 1e3
            print(
                f"append (durable, validate={validate}): p50 {p50:.2f} ms, p90 {p90:.2f} ms "
                f"over {len(times)}"
            )
            rows.append(row(f"one append (durable, validate={validate}) p50", round(p50, 2),
                            "ms", note=f"p90 {p90:.2f} over {len(times)}"))  # fmt: skip
        emit("evidence_verify", rows)
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
