"""``EvidenceLog``: the append-only, hash-chained evidence log, in its own SQLite file.

This module is the log's public face and its appending; the file, its connection and its
transactions are ``graphflow.evidence.store``'s, reading it back is
``graphflow.evidence.reading``'s.

- **Its own file**: ``X.evidence.db`` beside a checkpoint store ``X.db``
  (``EvidenceLog.beside``), or ``":memory:"``.
- **Appending**: an append prepares its events (redacted, JSON only) before it takes the
  lock; then, in one write transaction, it reads the head, numbers the events from it,
  makes each ``timestamp`` (once, as RFC 3339 UTC text), hashes each event's canonical bytes
  (``graphflow.evidence.chain``) and inserts them. An append is durable when it returns.
"""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import sniffio

from checkpoints.blocking import inline_io, per_loop
from graphflow.errors import InvalidArgumentError
from graphflow.evidence import reading
from graphflow.evidence.chain import GENESIS, EvidenceHead, chain_hash, with_hashes
from graphflow.evidence.errors import InvalidEventError
from graphflow.evidence.events import EventDraft, now
from graphflow.evidence.reading import EvidenceRecord
from graphflow.evidence.redact import DEFAULT_REDACT_KEYS, Redactor
from graphflow.evidence.store import (
    MEMORY,
    EvidenceStore,
    existing_keys,
    insert_rows,
    last_row,
)
from graphflow.evidence.verification import VerifyReport
from graphflow.jcs import dumps as jcs_dumps

T = TypeVar("T")

VALIDATE_ENV = "GRAPHFLOW_EVIDENCE_VALIDATE"


def _env_validate() -> bool:
    return os.environ.get(VALIDATE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _one_at_a_time() -> anyio.CapacityLimiter:
    return anyio.CapacityLimiter(1)


def on_event_loop() -> bool:
    """Whether this thread runs an event loop (where a file is never opened inline)."""
    try:
        sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return False
    return True


def beside_path(checkpoint_path: str | os.PathLike[str]) -> str:
    """The path of the log kept beside a checkpoint store (see ``EvidenceLog.beside``)."""
    path = os.fspath(checkpoint_path)
    if path == MEMORY:
        return MEMORY
    root, ext = os.path.splitext(path)
    return root + ".evidence.db" if ext == ".db" else path + ".evidence.db"


class EvidenceLog:
    """The append-only, hash-chained log of evidence events in one SQLite file.

    Args:
        path: the SQLite file (created when missing; its directory must exist), or
            ``":memory:"`` for a log that lives as long as this object.
        redact_keys: keys whose values are stored as digests (``graphflow.evidence.redact``).
        busy_timeout: seconds to wait for another process's append.
        durability: ``"fsync"`` (default): an append returns once it is on disk (it survives
            a power loss); ``"process"``: once the operating system has it (it survives a
            crash of the process, not a power loss; as ``SqliteCheckpointer``'s, which a log
            made beside a store follows).
        validate: validate every event against the AAEF schema before writing it (needs the
            ``validate`` extra); None (default): when the environment variable
            ``GRAPHFLOW_EVIDENCE_VALIDATE`` is ``1``.

    Raises:
        EvidenceError: the path's directory does not exist, the path is a directory, or the
            file cannot be opened or is not an evidence log.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        redact_keys: Sequence[str] = DEFAULT_REDACT_KEYS,
        *,
        busy_timeout: float = 10.0,
        durability: str = "fsync",
        validate: bool | None = None,
    ) -> None:
        self.path = os.fspath(path)
        if not isinstance(self.path, str) or not self.path:
            raise InvalidArgumentError(f"EvidenceLog needs a file path or ':memory:', not {path!r}")
        self._redactor = Redactor(redact_keys)
        self.redact_keys = self._redactor.redact_keys
        self.busy_timeout = busy_timeout
        if validate is not None and type(validate) is not bool:
            raise InvalidArgumentError(
                f"EvidenceLog validate must be True, False or None, not {validate!r}"
            )
        self.validate = _env_validate() if validate is None else validate
        if self.validate:
            from graphflow.evidence import validation

            validation.event_errors({})  # raises now when the packages are missing
        if durability not in ("fsync", "process"):
            raise InvalidArgumentError(
                f"EvidenceLog durability must be 'fsync' or 'process', not {durability!r}"
            )
        if type(busy_timeout) not in (int, float) or not 0 <= busy_timeout < math.inf:
            raise InvalidArgumentError(
                f"EvidenceLog busy_timeout must be a number of seconds, 0 or more, not "
                f"{busy_timeout!r}"
            )
        self.durability = durability
        self._store = EvidenceStore(
            self.path, busy_timeout=busy_timeout, fsync=durability == "fsync"
        )
        if not on_event_loop():  # on an event loop's thread, the first call opens it
            self._store.open()

    @classmethod
    def beside(cls, checkpoint_path: str | os.PathLike[str], **options: Any) -> EvidenceLog:
        """The log kept beside a checkpoint store: ``X.db`` -> ``X.evidence.db`` (``X`` ->
        ``X.evidence.db``); ``":memory:"`` -> an in-memory log. ``options`` as for the
        constructor."""
        return cls(beside_path(checkpoint_path), **options)

    def __repr__(self) -> str:
        return f"EvidenceLog({self.path!r})"

    def close(self) -> None:
        """Close the connection; a later call opens the file again."""
        self._store.close()

    def __enter__(self) -> EvidenceLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- appending ------------------------------------------------------------------------
    def _prepare(self, draft: EventDraft) -> dict[str, Any]:
        """The event of ``draft`` as storable JSON, secrets redacted (before the lock)."""
        if not isinstance(draft, EventDraft):
            raise InvalidArgumentError(
                f"EvidenceLog.append takes an EventDraft (see graphflow.evidence.stages), not "
                f"{type(draft).__name__}"
            )
        event = self._redactor.prepare(draft.sections(), keyed=False, where="the event")
        if draft.detail is not None:
            event["extensions"]["graphflow"]["detail"] = self._redactor.prepare(
                draft.detail, keyed=True, where="the event's detail"
            )
        event["extensions"]["graphflow"].pop("prev_hash", None)
        return event  # type: ignore[no-any-return]

    def append(self, draft: EventDraft) -> EvidenceRecord:
        """Record one event at the end of the chain; durable when this returns.

        Raises:
            EvidenceError: the log cannot be written (nothing was written).
            InvalidEventError: validation is on and the event does not fit the schema.
            InvalidArgumentError: the draft holds a value that is not JSON-like.
        """
        return self.append_many((draft,))[0]

    def append_many(self, drafts: Iterable[EventDraft]) -> list[EvidenceRecord]:
        """Record several events, in order, in one transaction: all or none."""
        prepared = [self._prepare(d) for d in drafts]
        if not prepared:
            return []
        with self._store.writing() as conn:
            return self._write(conn, prepared, [None] * len(prepared))

    def append_once(
        self, items: Iterable[tuple[str, EventDraft]], *, sync: bool = True
    ) -> list[EvidenceRecord]:
        """Record the events whose key no stored event carries, in order, in one
        transaction; return those written. The runtime keys each event by the stage it
        records, so a stage passed again (a node rerun after a pause) is written once.
        ``sync=False``: for events a durable record elsewhere lets the runtime write again
        (``graphflow.evidence.walsync``): durable once a later append is, or at ``close``."""
        listed = list(items)
        if not listed:
            return []
        with self._store.writing(sync=sync) as conn:
            have = existing_keys(conn, [k for k, _ in listed])
            keys: list[str | None] = []
            prepared = []
            for key, draft in listed:
                if key not in have:
                    have.add(key)
                    keys.append(key)
                    prepared.append(self._prepare(draft))
            return self._write(conn, prepared, keys) if prepared else []

    def _write(
        self,
        conn: sqlite3.Connection,
        events: list[dict[str, Any]],
        keys: Sequence[str | None],
    ) -> list[EvidenceRecord]:
        row = last_row(conn)
        seq, prev = (row[0], row[1]) if row is not None else (0, GENESIS)
        rows = []
        records = []
        for event, key in zip(events, keys, strict=True):
            seq += 1
            event["timestamp"] = now()
            graphflow = event["extensions"]["graphflow"]
            graphflow["seq"] = seq
            body = jcs_dumps(event)
            digest = chain_hash(prev, seq, body)
            full = with_hashes(event, prev, digest)
            if self.validate:
                self._check(full, seq)
            thread = graphflow["thread_id"]
            rows.append((seq, prev, digest, thread, event["event_type"], body.decode(), key))
            records.append(
                EvidenceRecord(seq, prev, digest, full, event["event_type"], graphflow["thread_id"])
            )
            prev = digest
        insert_rows(conn, rows)
        return records

    def _check(self, event: dict[str, Any], seq: int) -> None:
        from graphflow.evidence import validation

        errors = validation.event_errors(event)
        if errors:
            raise InvalidEventError(
                f"evidence log {self.path!r}: the {event.get('event_type')} event for seq "
                f"{seq} does not fit the AAEF schema: {'; '.join(errors[:5])}",
                path=self.path,
                errors=tuple(errors),
            )

    async def aappend(self, draft: EventDraft) -> EvidenceRecord:
        """``append`` off the event loop (inline on graphflow's private sync loops)."""
        return (await self._run(lambda: self.append_many((draft,))))[0]

    async def aappend_many(self, drafts: Iterable[EventDraft]) -> list[EvidenceRecord]:
        """``append_many`` off the event loop."""
        listed = list(drafts)
        return await self._run(lambda: self.append_many(listed))

    async def aappend_once(
        self, items: Iterable[tuple[str, EventDraft]], *, sync: bool = True
    ) -> list[EvidenceRecord]:
        """``append_once`` off the event loop."""
        listed = list(items)
        return await self._run(lambda: self.append_once(listed, sync=sync))

    async def aevents(
        self, thread_id: str | None = None, since: int | None = None
    ) -> list[EvidenceRecord]:
        """``events`` off the event loop."""
        return await self._run(lambda: self.events(thread_id, since))

    async def _run(self, fn: Callable[[], T]) -> T:
        if inline_io.get():
            return fn()
        # One limiter per event loop (``checkpoints.blocking.per_loop``; the store's lock
        # orders appends across loops), made at its first hop: made in __init__, it would
        # import anyio's asyncio backend, which the sync API never needs (W4).
        limiter = per_loop(self, _one_at_a_time)
        return await anyio.to_thread.run_sync(fn, limiter=limiter)

    # -- reading (graphflow.evidence.reading) ---------------------------------------------
    def events(
        self, thread_id: str | None = None, since: int | None = None
    ) -> list[EvidenceRecord]:
        """The stored events in seq order: all, or ``thread_id``'s; after seq ``since``.

        Raises:
            EvidenceError: the log cannot be read, or an event is not valid JSON (run
                ``verify``).
        """
        return reading.events(self._store, thread_id, since)

    def head(self) -> EvidenceHead:
        """The last event's seq and hash (``EvidenceHead(0, GENESIS)`` for an empty log)."""
        return reading.head(self._store)

    def verify(self, expected_head: EvidenceHead | None = None) -> VerifyReport:
        """Recompute the chain and report every modification, deletion, insertion,
        reordering, fork, and (against ``expected_head``, a head kept elsewhere) truncation.
        See ``graphflow.evidence.verification`` for what each kind means."""
        return reading.verify(self._store, expected_head)

    def export_jsonl(self, path: str | os.PathLike[str]) -> int:
        """Write every event, one JSON object per line, in seq order (for a SIEM); returns
        the number written. Each line carries its seq, prev_hash and hash, so the export can
        be checked on its own (``verify_jsonl``)."""
        return reading.export_jsonl(self._store, path)
