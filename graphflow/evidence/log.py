"""``EvidenceLog``: the append-only, hash-chained evidence log, in its own SQLite file.

Decisions behind it:

- **Its own file**, independent of the checkpoint tables: ``X.evidence.db`` beside a
  checkpoint store ``X.db`` (``EvidenceLog.beside``). A file that holds other tables is
  refused. ``":memory:"`` is an in-memory SQLite database: one implementation for both.
- **One chain for many processes.** An append prepares its events (redacted, JSON only)
  before it takes the lock; then, under ``BEGIN IMMEDIATE`` (SQLite's write lock, waited
  for up to ``busy_timeout``), it reads the head, numbers the events from it, makes each
  ``timestamp`` (once, as RFC 3339 UTC text), hashes each event's canonical bytes
  (``graphflow.evidence.chain``) and inserts them. ``seq`` is the primary key and
  ``prev_hash`` is unique, so two writers that raced could not both commit. WAL with
  ``synchronous=FULL``: an append is durable when it returns.
- **Append-only**: triggers refuse ``UPDATE`` and ``DELETE``. That guards against mistakes;
  whoever can write the file can drop them, and ``verify`` is what detects a change.
- **Failure is typed**: an error of SQLite or of the file system becomes ``EvidenceError``
  naming the path; the connection is dropped and the next call opens the file again, so a
  log that is writable again is used again. Each call first checks that the file at the
  path is still the one opened: one that was removed (or replaced) is opened anew, which
  starts a new chain in a new file; a removed directory is an ``EvidenceError``, and so is
  an append to a file made read-only (checked with ``access``, so it holds for root when
  the file is immutable).
- **Reading trusts nothing it did not check**: ``events`` returns the stored events as
  they are; ``verify`` recomputes every hash. Bytes are read as stored (``CAST(body AS
  BLOB)``), never canonicalized again.
- A process forked while a connection is open does not use it (SQLite's locks are per
  process): the child opens its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import rfc8785
import sniffio

from checkpoints.blocking import inline_io
from graphflow.errors import InvalidArgumentError
from graphflow.evidence import chain
from graphflow.evidence.chain import EvidenceHead, StoredRow, VerifyReport
from graphflow.evidence.errors import EvidenceError, InvalidEventError
from graphflow.evidence.events import EventDraft, now
from graphflow.evidence.redact import DEFAULT_REDACT_KEYS, Redactor

T = TypeVar("T")

MEMORY = ":memory:"
APPLICATION_ID = 0x47464556  # "GFEV": marks a SQLite file as a graphflow evidence log
FORMAT_VERSION = 1
VALIDATE_ENV = "GRAPHFLOW_EVIDENCE_VALIDATE"

_SCHEMA = (
    """CREATE TABLE evidence_events (
        seq INTEGER PRIMARY KEY,
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL,
        thread_id TEXT,
        event_type TEXT NOT NULL,
        body TEXT NOT NULL
    )""",
    "CREATE UNIQUE INDEX evidence_events_prev_hash ON evidence_events (prev_hash)",
    "CREATE INDEX evidence_events_thread ON evidence_events (thread_id, seq)",
    """CREATE TRIGGER evidence_events_no_update BEFORE UPDATE ON evidence_events
        BEGIN SELECT RAISE(ABORT, 'evidence events are append-only'); END""",
    """CREATE TRIGGER evidence_events_no_delete BEFORE DELETE ON evidence_events
        BEGIN SELECT RAISE(ABORT, 'evidence events are append-only'); END""",
    f"PRAGMA application_id = {APPLICATION_ID}",
    f"PRAGMA user_version = {FORMAT_VERSION}",
)
_ROWS = (
    "SELECT seq, prev_hash, hash, CAST(body AS BLOB), thread_id, event_type FROM evidence_events"
)
_BATCH = 2000


@dataclass(frozen=True, slots=True)
class EvidenceRecord:
    """One stored event: ``seq``, ``prev_hash`` and ``hash`` (lowercase hex), ``event`` (the
    AAEF event, with ``extensions.graphflow.prev_hash`` and ``evidence.evidence_hash``),
    ``event_type`` and ``thread_id`` (None for an event of no thread)."""

    seq: int
    prev_hash: str
    hash: str
    event: dict[str, Any]
    event_type: str
    thread_id: str | None


def _env_validate() -> bool:
    return os.environ.get(VALIDATE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _on_event_loop() -> bool:
    try:
        sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return False
    return True


class EvidenceLog:
    """The append-only, hash-chained log of evidence events in one SQLite file.

    Args:
        path: the SQLite file (created when missing; its directory must exist), or
            ``":memory:"`` for a log that lives as long as this object.
        redact_keys: keys whose values are stored as digests (``graphflow.evidence.redact``).
        busy_timeout: seconds to wait for another process's append.
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
        validate: bool | None = None,
    ) -> None:
        self.path = os.fspath(path)
        if not isinstance(self.path, str) or not self.path:
            raise InvalidArgumentError(f"EvidenceLog needs a file path or ':memory:', not {path!r}")
        self._redactor = Redactor(redact_keys)
        self.redact_keys = self._redactor.redact_keys
        self.busy_timeout = busy_timeout
        self.validate = _env_validate() if validate is None else validate
        if self.validate:
            from graphflow.evidence import validation

            validation.event_errors({})  # raises now when the packages are missing
        self._lock = threading.Lock()
        self._limiter = anyio.CapacityLimiter(1)
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
        self._writable = False  # whether the file could be written when it was opened
        self._pid = 0
        if not _on_event_loop():  # on an event loop's thread, the first call opens it
            with self._lock:
                self._connection()

    @classmethod
    def beside(cls, checkpoint_path: str | os.PathLike[str], **options: Any) -> EvidenceLog:
        """The log kept beside a checkpoint store: ``X.db`` -> ``X.evidence.db`` (``X`` ->
        ``X.evidence.db``); ``":memory:"`` -> an in-memory log. ``options`` as for the
        constructor."""
        path = os.fspath(checkpoint_path)
        if path == MEMORY:
            return cls(MEMORY, **options)
        root, ext = os.path.splitext(path)
        return cls(root + ".evidence.db" if ext == ".db" else path + ".evidence.db", **options)

    def __repr__(self) -> str:
        return f"EvidenceLog({self.path!r})"

    # -- connection -----------------------------------------------------------------------
    def _fail(self, what: str, error: BaseException) -> EvidenceError:
        """Drop the connection (the next call opens the file again) and name the path."""
        self._drop()
        return EvidenceError(f"evidence log {self.path!r}: {what}: {error}", path=self.path)

    def _drop(self) -> None:
        conn, self._conn, self._identity = self._conn, None, None
        if conn is not None and self._pid == os.getpid():
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def _connection(self, *, write: bool = False) -> sqlite3.Connection:
        """The open connection, after checking that the file is still the one opened (and,
        to ``write``, that it may be written: a file made read-only is, even though the
        descriptor SQLite holds could still write it)."""
        conn = self._conn
        if conn is not None and self._pid != os.getpid():  # a forked child: never reuse it
            self._conn = conn = None
        if conn is not None and self.path != MEMORY and self._stat() != self._identity:
            self._drop()
            conn = None
        if conn is not None and write and not self._writable and self._may_write():
            self._drop()  # SQLite opened it read-only: now it may be written, open it again
            conn = None
        if conn is None:
            conn = self._open()
        if write and not self._may_write():
            self._drop()
            raise EvidenceError(
                f"evidence log {self.path!r} cannot be written: the file is read-only; make "
                "it writable again (nothing was written)",
                path=self.path,
            )
        return conn

    def _may_write(self) -> bool:
        return self.path == MEMORY or os.access(self.path, os.W_OK)

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _open(self) -> sqlite3.Connection:
        if self.path != MEMORY:
            directory = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(directory):
                raise EvidenceError(
                    f"evidence log {self.path!r}: its directory {directory!r} does not exist; "
                    "create it (the log file itself is created when missing)",
                    path=self.path,
                )
            if os.path.isdir(self.path):
                raise EvidenceError(
                    f"evidence log {self.path!r} is a directory; give a file path",
                    path=self.path,
                )
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,  # transactions are explicit
                check_same_thread=False,  # guarded by self._lock; used by worker threads
            )
        except sqlite3.Error as e:
            raise self._fail("cannot be opened", e) from e
        try:
            if self.path != MEMORY:
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            self._setup(conn)
        except EvidenceError:
            conn.close()
            raise
        except sqlite3.Error as e:
            conn.close()
            raise self._fail("cannot be opened", e) from e
        self._conn, self._pid = conn, os.getpid()
        self._identity = self._stat() if self.path != MEMORY else None
        self._writable = self._may_write()
        return conn

    def _setup(self, conn: sqlite3.Connection) -> None:
        """Create the tables of a new file; refuse a file that is not an evidence log."""
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if app_id == 0:
            conn.execute("BEGIN IMMEDIATE")
            try:
                app_id = conn.execute("PRAGMA application_id").fetchone()[0]  # a racing opener
                tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if app_id == 0 and tables == 0:
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    app_id = APPLICATION_ID
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        if app_id != APPLICATION_ID:
            raise EvidenceError(
                f"{self.path!r} is not an evidence log (it holds other tables): keep evidence "
                "in its own file, e.g. EvidenceLog.beside(checkpoint_path)",
                path=self.path,
            )
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > FORMAT_VERSION:
            raise EvidenceError(
                f"evidence log {self.path!r} has format {version}, newer than this graphflow "
                f"reads ({FORMAT_VERSION}); upgrade graphflow",
                path=self.path,
            )

    def close(self) -> None:
        """Close the connection; a later call opens the file again."""
        with self._lock:
            self._drop()

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
        with self._lock:
            conn = self._connection(write=True)
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    records = self._write(conn, prepared)
                    conn.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:
                raise self._fail("cannot be written", e) from e
            except (ValueError, TypeError) as e:  # a damaged head row
                if isinstance(e, InvalidEventError):
                    raise
                raise self._fail("its last event is damaged (run verify)", e) from e
        return records

    def _write(
        self, conn: sqlite3.Connection, events: list[dict[str, Any]]
    ) -> list[EvidenceRecord]:
        head = conn.execute("SELECT seq, hash FROM evidence_events ORDER BY seq DESC LIMIT 1")
        row = head.fetchone()
        seq, prev = (row[0], row[1]) if row is not None else (0, chain.GENESIS)
        rows = []
        records = []
        for event in events:
            seq += 1
            event["timestamp"] = now()
            graphflow = event["extensions"]["graphflow"]
            graphflow["seq"] = seq
            body = rfc8785.dumps(event)
            digest = chain.chain_hash(prev, seq, body)
            full = _with_hashes(event, prev, digest)
            if self.validate:
                self._check(full, seq)
            rows.append(
                (seq, prev, digest, graphflow["thread_id"], event["event_type"], body.decode())
            )
            records.append(
                EvidenceRecord(seq, prev, digest, full, event["event_type"], graphflow["thread_id"])
            )
            prev = digest
        conn.executemany(
            "INSERT INTO evidence_events (seq, prev_hash, hash, thread_id, event_type, body) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
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

    async def aevents(
        self, thread_id: str | None = None, since: int | None = None
    ) -> list[EvidenceRecord]:
        """``events`` off the event loop."""
        return await self._run(lambda: self.events(thread_id, since))

    async def _run(self, fn: Callable[[], T]) -> T:
        if inline_io.get():
            return fn()
        return await anyio.to_thread.run_sync(fn, limiter=self._limiter)

    # -- reading --------------------------------------------------------------------------
    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """One read transaction (one snapshot) under the lock; errors name the path."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN")
                try:
                    yield conn
                finally:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("COMMIT")
            except sqlite3.Error as e:
                raise self._fail("cannot be read", e) from e

    def events(
        self, thread_id: str | None = None, since: int | None = None
    ) -> list[EvidenceRecord]:
        """The stored events in seq order: all, or ``thread_id``'s; after seq ``since``.

        Raises:
            EvidenceError: the log cannot be read, or an event is not valid JSON (run
                ``verify``).
        """
        if thread_id is not None and not isinstance(thread_id, str):
            raise InvalidArgumentError(f"thread_id must be a str or None, not {thread_id!r}")
        if since is not None and (type(since) is not int or since < 0):
            raise InvalidArgumentError(f"since must be a seq (an int >= 0) or None, not {since!r}")
        where, params = self._filter(thread_id, since)
        with self._reading() as conn:
            rows = conn.execute(f"{_ROWS}{where} ORDER BY seq", params).fetchall()
        return [self._record(StoredRow(*row)) for row in rows]

    @staticmethod
    def _filter(thread_id: str | None, since: int | None) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if thread_id is not None:
            clauses.append("thread_id = ?")
            params.append(thread_id)
        if since is not None:
            clauses.append("seq > ?")
            params.append(since)
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params

    def _record(self, row: StoredRow) -> EvidenceRecord:
        try:
            event = json.loads(row.body)
            if not isinstance(event, dict):
                raise ValueError("not a JSON object")
            full = _with_hashes(event, str(row.prev_hash), str(row.hash))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise EvidenceError(
                f"evidence log {self.path!r}: the event at seq {row.seq} is damaged ({e}); "
                "run verify() to see what was changed",
                path=self.path,
            ) from e
        return EvidenceRecord(
            row.seq,
            str(row.prev_hash),
            str(row.hash),
            full,
            str(row.event_type),
            row.thread_id if isinstance(row.thread_id, str) else None,
        )

    def _stream(self, conn: sqlite3.Connection) -> Iterator[StoredRow]:
        cursor = conn.execute(f"{_ROWS} ORDER BY seq")
        while batch := cursor.fetchmany(_BATCH):
            for row in batch:
                yield StoredRow(*row)

    def head(self) -> EvidenceHead:
        """The last event's seq and hash (``EvidenceHead(0, GENESIS)`` for an empty log)."""
        with self._reading() as conn:
            row = conn.execute(
                "SELECT seq, hash FROM evidence_events ORDER BY seq DESC LIMIT 1"
            ).fetchone()
        if row is None:
            return EvidenceHead(0, chain.GENESIS)
        try:
            return EvidenceHead(row[0], row[1])
        except InvalidArgumentError as e:
            raise EvidenceError(
                f"evidence log {self.path!r}: its last event is damaged ({e}); run verify()",
                path=self.path,
            ) from e

    def verify(self, expected_head: EvidenceHead | None = None) -> VerifyReport:
        """Recompute the chain and report every modification, deletion, insertion,
        reordering, fork, and (against ``expected_head``, a head kept elsewhere) truncation.
        See ``graphflow.evidence.chain`` for what each kind means."""
        if expected_head is not None and not isinstance(expected_head, EvidenceHead):
            raise InvalidArgumentError(
                f"expected_head must be an EvidenceHead, not {type(expected_head).__name__}"
            )
        with self._reading() as conn:
            scanned = chain.scan(self._stream(conn), expected_head)
            if scanned.problem is None:
                return scanned.report()
            rows = list(self._stream(conn))
        return chain.classify(rows, expected_head)

    def export_jsonl(self, path: str | os.PathLike[str]) -> int:
        """Write every event, one JSON object per line, in seq order (for a SIEM); returns
        the number written. Each line carries its seq, prev_hash and hash, so the export can
        be checked on its own (``verify_jsonl``)."""
        out_path = os.fspath(path)
        count = 0
        try:
            with (
                open(out_path, "w", encoding="utf-8", newline="\n") as out,
                self._reading() as conn,
            ):
                for row in self._stream(conn):
                    record = self._record(row)
                    out.write(json.dumps(record.event, ensure_ascii=False, separators=(",", ":")))
                    out.write("\n")
                    count += 1
        except OSError as e:
            raise EvidenceError(
                f"cannot export evidence log {self.path!r} to {out_path!r}: {e}", path=out_path
            ) from e
        return count


def _with_hashes(event: dict[str, Any], prev_hash: str, digest: str) -> dict[str, Any]:
    """``event`` with its hash fields (a copy of the two objects that hold them)."""
    full = dict(event)
    extensions = dict(full["extensions"])
    extensions["graphflow"] = {**extensions["graphflow"], "prev_hash": prev_hash}
    full["extensions"] = extensions
    full["evidence"] = {**full["evidence"], "evidence_hash": "sha256:" + digest}
    return full


def verify_jsonl(
    path: str | os.PathLike[str], expected_head: EvidenceHead | None = None
) -> VerifyReport:
    """Verify an ``export_jsonl`` file on its own: line N must be the event of seq N.

    Raises:
        EvidenceError: the file cannot be read.
    """
    file_path = os.fspath(path)
    events: list[dict[str, Any]] = []
    try:
        with open(file_path, encoding="utf-8") as f:
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:
                    event = {}
                events.append(event if isinstance(event, dict) else {})
    except (OSError, UnicodeDecodeError) as e:
        raise EvidenceError(
            f"cannot read evidence export {file_path!r}: {e}", path=file_path
        ) from e
    return chain.verify_rows(chain.rows_from_events(events), expected_head)
