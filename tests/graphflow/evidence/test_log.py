"""``EvidenceLog``: appends, reads, files, failures, exports, and many writers at once."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import shutil
import sqlite3
import subprocess
import sys
from typing import Any

import pytest
import rfc8785

from checkpoints import SqliteCheckpointer
from graphflow.errors import InvalidArgumentError
from graphflow.evidence import (
    GENESIS,
    EvidenceError,
    EvidenceHead,
    EvidenceLog,
    stages,
    verify_jsonl,
)

from ._support import AT, facts, fill

ROOT = pathlib.Path(__file__).resolve().parents[3]
WORKER = pathlib.Path(__file__).with_name("_append_worker.py")
PEM = (
    "-----BEGIN PRIVATE KEY-----\n"
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n"
    "-----END PRIVATE KEY-----\n"
)
SECRETS = {
    "api_key": "key-7f3a9c2e1b8d4f6a0e5c",
    "bearer": "tok.9d8c7b6a5f4e3d2c1b0a",
    "pem": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
    "sk": "sk-live0a1b2c3d4e5f6a7b8c9d0e1f2",
}


def test_append_then_read_back(tmp_path: pathlib.Path) -> None:
    log = EvidenceLog(tmp_path / "e.db")
    assert log.head() == EvidenceHead(0, GENESIS)
    first = log.append(stages.proposed(facts()))
    second = log.append(stages.executed(facts(), result={"ok": 1}))
    assert (first.seq, second.seq) == (1, 2)
    assert first.prev_hash == GENESIS and second.prev_hash == first.hash
    assert log.head() == EvidenceHead(2, second.hash)
    assert log.events() == [first, second]
    assert [r.event_type for r in log.events()] == [
        "agentic_action_attempted",
        "agentic_action_executed",
    ]
    assert all(r.thread_id == "t1" for r in log.events())


def test_the_hash_is_the_documented_encoding(tmp_path: pathlib.Path) -> None:
    """hash = SHA-256(32 raw bytes of prev_hash || seq as 8 bytes big-endian || RFC 8785
    bytes of the event without prev_hash and evidence_hash), worked out independently."""
    log = EvidenceLog(tmp_path / "e.db")
    for i in range(3):
        log.append(stages.proposed(facts(call_id=f"c{i}")))
    prev = GENESIS
    for record in log.events():
        event = json.loads(json.dumps(record.event))
        assert event["extensions"]["graphflow"].pop("prev_hash") == record.prev_hash == prev
        assert event["evidence"].pop("evidence_hash") == "sha256:" + record.hash
        assert event["extensions"]["graphflow"]["seq"] == record.seq
        data = bytes.fromhex(prev) + record.seq.to_bytes(8, "big") + rfc8785.dumps(event)
        assert hashlib.sha256(data).hexdigest() == record.hash
        prev = record.hash
    with sqlite3.connect(tmp_path / "e.db") as db:
        body = db.execute("SELECT body FROM evidence_events WHERE seq = 1").fetchone()[0]
    assert "prev_hash" not in body and "evidence_hash" not in body  # bytes as hashed


def test_events_filter_by_thread_and_since(tmp_path: pathlib.Path) -> None:
    log = fill(tmp_path / "e.db", 6, threads=2)
    assert [r.seq for r in log.events(thread_id="t0")] == [2, 4, 6]
    assert [r.seq for r in log.events(since=4)] == [5, 6]
    assert [r.seq for r in log.events(thread_id="t1", since=1)] == [3, 5]
    assert log.events(thread_id="nobody") == []
    for bad in (-1, True, "3"):
        with pytest.raises(InvalidArgumentError, match="since must be a seq"):
            log.events(since=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="thread_id must be a str"):
        log.events(thread_id=3)  # type: ignore[arg-type]


def test_beside_a_checkpoint_store_is_its_own_file(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "graphflow.db"
    SqliteCheckpointer(store)
    log = EvidenceLog.beside(store)
    assert log.path == str(tmp_path / "graphflow.evidence.db")
    log.append(stages.proposed(facts()))
    with sqlite3.connect(log.path) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"evidence_events"}
    with sqlite3.connect(store) as db:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
    assert not any(name.startswith("evidence") for name in names)
    assert EvidenceLog.beside(tmp_path / "plain").path == str(tmp_path / "plain.evidence.db")
    memory = EvidenceLog.beside(":memory:")
    assert memory.path == ":memory:" and memory.head().count == 0


def test_a_checkpoint_store_is_not_taken_for_an_evidence_log(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "graphflow.db"
    SqliteCheckpointer(store)
    with pytest.raises(EvidenceError, match="is not an evidence log") as e:
        EvidenceLog(store)
    assert e.value.path == str(store)


def test_memory_logs_are_separate() -> None:
    a, b = EvidenceLog(":memory:"), EvidenceLog(":memory:")
    a.append(stages.proposed(facts()))
    assert (a.head().count, b.head().count) == (1, 0)
    assert a.verify().ok and a.verify().count == 1


def test_a_reopened_file_continues_its_chain(tmp_path: pathlib.Path) -> None:
    fill(tmp_path / "e.db", 3).close()
    log = EvidenceLog(tmp_path / "e.db")
    assert log.append(stages.proposed(facts())).seq == 4
    assert log.verify().ok and log.verify().count == 4


def test_a_missing_directory_is_named(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "no" / "such" / "e.db"
    with pytest.raises(EvidenceError, match=r"its directory .* does not exist") as e:
        EvidenceLog(path)
    assert e.value.path == str(path) and str(path) in str(e.value)
    assert not (tmp_path / "no").exists()
    with pytest.raises(EvidenceError, match="is a directory"):
        EvidenceLog(tmp_path)


def test_the_log_is_append_only_for_plain_sql(tmp_path: pathlib.Path) -> None:
    fill(tmp_path / "e.db", 2).close()
    with sqlite3.connect(tmp_path / "e.db") as db:
        for sql in ("UPDATE evidence_events SET thread_id = 'x'", "DELETE FROM evidence_events"):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                db.execute(sql)
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            db.execute("INSERT INTO evidence_events SELECT 9, prev_hash, hash, thread_id, "
                       "event_type, body, event_key FROM evidence_events "
                       "WHERE seq = 1")  # fmt: skip


def test_a_read_only_file_cannot_be_appended_to(tmp_path: pathlib.Path, read_only: Any) -> None:
    path = tmp_path / "e.db"
    log = fill(path, 2)
    with read_only(path):
        with pytest.raises(EvidenceError, match="cannot be written") as e:
            log.append(stages.proposed(facts()))
        assert e.value.path == str(path) and str(path) in str(e.value)
        assert log.verify().ok and log.head().count == 2  # still readable
        with contextlib.suppress(EvidenceError):  # opening may fail too: either names it
            other = EvidenceLog(path)
            with pytest.raises(EvidenceError, match=str(path)):
                other.append(stages.proposed(facts()))
            other.close()
    assert log.append(stages.proposed(facts())).seq == 3  # writable again: used again
    assert log.verify().ok


def test_a_log_in_a_read_only_directory_is_read_and_verified(
    tmp_path: pathlib.Path, read_only: Any
) -> None:
    """Where SQLite cannot make its ``-shm`` beside the file (a read-only directory or file
    system), the log is opened read-only: audits and ``verify`` work, appends say why not."""
    directory = tmp_path / "logs"
    directory.mkdir()
    path = directory / "e.db"
    fill(path, 3).close()
    with read_only(directory):
        log = EvidenceLog(path)
        assert log.verify().ok and [r.seq for r in log.events()] == [1, 2, 3]
        assert log.head().count == 3
        with pytest.raises(EvidenceError, match=r"read-only; make it writable again"):
            log.append(stages.proposed(facts()))
        log.close()
    again = EvidenceLog(path)
    assert again.append(stages.proposed(facts())).seq == 4 and again.verify().ok
    again.close()


def test_a_removed_directory_fails_appends_until_it_is_back(tmp_path: pathlib.Path) -> None:
    directory = tmp_path / "ev"
    directory.mkdir()
    path = directory / "e.db"
    log = fill(path, 2)
    shutil.rmtree(directory)
    with pytest.raises(EvidenceError, match="does not exist") as e:
        log.append(stages.proposed(facts()))
    assert e.value.path == str(path)
    with pytest.raises(EvidenceError):
        log.events()
    directory.mkdir()
    record = log.append(stages.proposed(facts()))  # a new file: a new chain
    assert record.seq == 1 and os.path.exists(path) and log.verify().ok


def test_a_damaged_event_is_reported_by_events(tmp_path: pathlib.Path) -> None:
    fill(tmp_path / "e.db", 2).close()
    with sqlite3.connect(tmp_path / "e.db") as db:
        db.execute("DROP TRIGGER evidence_events_no_update")
        db.execute("UPDATE evidence_events SET body = '{oops' WHERE seq = 2")
    with pytest.raises(EvidenceError, match="event at seq 2 is damaged"):
        EvidenceLog(tmp_path / "e.db").events()


def secret_args() -> dict[str, Any]:
    return {
        "to": "ops@example.com",
        "api_key": SECRETS["api_key"],
        "headers": {"X-Trace": f"Bearer {SECRETS['bearer']}"},
        "attachment": "here is the key:\n" + PEM,
        "note": f"use {SECRETS['sk']} for the retry",
    }


def test_secrets_never_reach_the_file_nor_the_export(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "e.db"
    log = EvidenceLog(path)
    call = facts(args=secret_args())
    log.append(stages.proposed(call))
    log.append(stages.gap(call, reason=f"failed with {SECRETS['sk']}", missed=["x"], since=AT))
    log.append(stages.failed(call, error=RuntimeError(f"auth Bearer {SECRETS['bearer']} refused")))
    stored = log.events()[0].event["extensions"]["graphflow"]["detail"]["arguments"]
    assert stored["to"] == "ops@example.com" and stored["api_key"].startswith("sha256:")
    files = [p for p in tmp_path.iterdir() if p.name.startswith("e.db")]
    raw = b"".join(p.read_bytes() for p in files)  # the database and its WAL
    export = tmp_path / "out.jsonl"
    assert log.export_jsonl(export) == 3
    log.close()
    raw += path.read_bytes() + export.read_bytes()
    for secret in SECRETS.values():
        assert secret.encode() not in raw, secret
        assert secret[4:16].encode() not in raw, secret  # not even a part of it
    assert b"BEGIN PRIVATE KEY" not in raw


def test_export_jsonl_writes_every_event_and_verifies_on_its_own(tmp_path: pathlib.Path) -> None:
    log = fill(tmp_path / "e.db", 5)
    out = tmp_path / "e.jsonl"
    assert log.export_jsonl(out) == 5
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [r.event for r in log.events()]
    report = verify_jsonl(out, expected_head=log.head())
    assert report.ok and report.count == 5 and report.head == log.head()
    lines[2] = lines[2].replace('"A-3"', '"A-9"')
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert [(p.seq, p.kind) for p in verify_jsonl(out).problems] == [(3, "modified")]
    del lines[2]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert [(p.seq, p.kind) for p in verify_jsonl(out).problems] == [(3, "deleted")]
    lines[0] = "not json"
    lines[1] = lines[1].replace('"prev_hash":"', '"prev_hash":["x"],"was":"')
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert [(p.seq, p.kind) for p in verify_jsonl(out).problems] == [
        (1, "modified"),
        (2, "modified"),
        (3, "deleted"),
    ]
    with pytest.raises(EvidenceError, match="no-such-dir") as e:
        log.export_jsonl(tmp_path / "no-such-dir" / "x.jsonl")
    assert e.value.path == str(tmp_path / "no-such-dir" / "x.jsonl")
    with pytest.raises(EvidenceError, match="cannot read evidence export"):
        verify_jsonl(tmp_path / "missing.jsonl")


def test_a_line_of_an_export_repeated_is_one_inserted_copy(tmp_path: pathlib.Path) -> None:
    """A copy of an event (the same bytes, the same hash) is the copy alone: the events
    after it still continue the chain (they were all reported ``forked``)."""
    log = fill(tmp_path / "e.db", 5)
    out = tmp_path / "e.jsonl"
    log.export_jsonl(out)
    lines = out.read_text(encoding="utf-8").splitlines()
    for at in (2, 4, 5):  # (the copy right after its event, further on, and at the end)
        copied = [*lines[:at], lines[1], *lines[at:]]
        out.write_text("\n".join(copied) + "\n", encoding="utf-8")
        report = verify_jsonl(out)
        assert [(p.seq, p.kind) for p in report.problems] == [(at + 1, "inserted")], report
        assert report.problems[0].detail == "it is a copy of the event of seq 2"


def test_append_takes_only_drafts() -> None:
    with pytest.raises(InvalidArgumentError, match="takes an EventDraft"):
        EvidenceLog(":memory:").append({"event_type": "x"})  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_async_appends_do_not_block_the_event_loop(tmp_path: pathlib.Path) -> None:
    log = EvidenceLog(tmp_path / "e.db")  # made on the loop: opened by the first call
    record = await log.aappend(stages.proposed(facts()))
    more = await log.aappend_many([stages.proposed(facts(call_id="c2"))] * 2)
    assert [record.seq, *(r.seq for r in more)] == [1, 2, 3]
    assert [r.seq for r in await log.aevents(since=1)] == [2, 3]


def test_six_processes_appending_at_once_form_one_chain(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "e.db"
    EvidenceLog(path).close()  # created once, as the runtime does before any worker runs
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(path), f"p{i}", "50"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(6)
    ]
    try:
        for proc in procs:  # the barrier: every worker has opened the log
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.close()
        for proc in procs:
            assert proc.wait(timeout=120) == 0
            assert proc.stdout is not None and proc.stdout.read() == "done\n"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
    log = EvidenceLog(path)
    report = log.verify()
    assert report.ok and report.count == 300, report.problems
    records = log.events()
    assert [r.seq for r in records] == list(range(1, 301))
    for i in range(6):
        mine = [
            r.event["extensions"]["graphflow"]["call_id"] for r in records if r.thread_id == f"p{i}"
        ]
        assert mine == [f"p{i}-{n}" for n in range(50)]  # each writer's order is kept


def test_append_once_writes_each_key_once(tmp_path: pathlib.Path) -> None:
    log = EvidenceLog(tmp_path / "e.db")
    first = log.append_once([("k1", stages.proposed(facts())), ("k1", stages.proposed(facts()))])
    assert [r.seq for r in first] == [1]
    again = log.append_once(
        [("k1", stages.proposed(facts())), ("k2", stages.executed(facts(), result=1))]
    )
    assert [(r.seq, r.event_type) for r in again] == [(2, "agentic_action_executed")]
    log.append(stages.proposed(facts()))  # unkeyed events never collide
    log.append(stages.proposed(facts()))
    reopened = EvidenceLog(tmp_path / "e.db")
    assert reopened.append_once([("k2", stages.proposed(facts()))]) == []
    assert reopened.head().count == 4 and reopened.verify().ok


def test_a_format_1_log_gains_event_keys_and_keeps_its_chain(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "old.evidence.db"
    log = fill(path, 3)
    log.close()
    head = log.head()
    with contextlib.closing(sqlite3.connect(path)) as conn:  # undo the format 2 change
        conn.execute("DROP INDEX evidence_events_key")
        conn.execute("ALTER TABLE evidence_events DROP COLUMN event_key")
        conn.execute("PRAGMA user_version = 1")
        conn.commit()
    reopened = EvidenceLog(path)
    assert reopened.head() == head and reopened.verify().ok
    assert [r.seq for r in reopened.append_once([("k", stages.proposed(facts()))])] == [4]
    assert reopened.append_once([("k", stages.proposed(facts()))]) == []
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2


def _hold_write_lock(path: pathlib.Path, seconds: float) -> Any:
    """Another client holding the log's write lock for ``seconds`` (in a thread)."""
    import threading
    import time

    held = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(seconds)
        conn.execute("ROLLBACK")
        conn.close()

    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    return t


def test_an_append_waits_for_another_writer_in_short_tries(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append that finds the log locked by another writer waits for it in jittered
    pauses of at most ``checkpoints.lockwait.CAP`` (not SQLite's up to 100 ms), then
    writes; past ``busy_timeout`` it is an ``EvidenceError`` and nothing is written."""
    from checkpoints import lockwait
    from graphflow.evidence import walsync

    pauses: list[float] = []
    real = lockwait.pause
    monkeypatch.setattr(walsync, "pause", lambda n: pauses.append(real(n)) or pauses[-1])
    path = tmp_path / "e.db"
    log = EvidenceLog(path)
    log.append(stages.proposed(facts()))
    holder = _hold_write_lock(path, 0.2)
    record = log.append(stages.proposed(facts(call_id="c2")))
    holder.join()
    assert record.seq == 2 and pauses and max(pauses) <= lockwait.CAP
    log.close()
    impatient = EvidenceLog(path, busy_timeout=0.05)
    holder = _hold_write_lock(path, 0.5)
    with pytest.raises(EvidenceError, match="cannot be written"):
        impatient.append(stages.proposed(facts(call_id="c3")))
    holder.join()
    assert impatient.head().count == 2
    impatient.close()


@pytest.mark.parametrize(
    ("option", "value"),
    [("busy_timeout", "5"), ("busy_timeout", -1), ("busy_timeout", float("nan")),
     ("busy_timeout", True), ("durability", "sometimes"), ("validate", "yes")],
)  # fmt: skip
def test_options_of_the_wrong_kind_are_refused_before_the_file_is_made(
    tmp_path: pathlib.Path, option: str, value: object
) -> None:
    path = tmp_path / "e.db"
    with pytest.raises(InvalidArgumentError, match=f"EvidenceLog {option} must be"):
        EvidenceLog(path, **{option: value})  # type: ignore[arg-type]
    assert not path.exists()
