"""``SqliteCheckpointer`` given a path it cannot use as is, or a file another client locks.

Each case raises a ``CheckpointError`` subclass naming the path and saying what to do,
never a bare ``sqlite3`` error; a foreign file is "not a graphflow database", never
"damaged". Read-only files and directories are tested for real in a child process that
drops root's privileges (root may write anything), and in this process otherwise.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from checkpoints import (
    CheckpointError,
    CorruptCheckpointError,
    ReadOnlyStoreError,
    SqliteCheckpointer,
    StoreLockedError,
    StorePathError,
)
from checkpoints.lease import new_owner
from checkpoints.models import ThreadId
from checkpoints.sqlite import migrations
from checkpoints.testing import support as c

T1 = c.T1


def call(cp: SqliteCheckpointer, fn: Callable[[SqliteCheckpointer], object]) -> object:
    """Run one coroutine of ``cp`` on a fresh event loop (as the sync API does)."""

    async def go() -> object:
        return await fn(cp)  # type: ignore[misc]

    return anyio.run(go)


def raised(fn: Callable[[], object]) -> BaseException:
    try:
        fn()
    except BaseException as e:
        return e
    raise AssertionError("nothing was raised")


def filled(path: Path) -> None:
    """A store at ``path`` with one step of thread T1 (lease released), closed."""
    cp = SqliteCheckpointer(path)

    async def go() -> None:
        owner = new_owner()
        await cp.acquire_lease(T1, owner, 60.0, graph_name="g")
        await cp.commit(T1, owner, c.step_batch(None, {"counter": 1}))
        await cp.release_lease(T1, owner)
        await cp.close()

    anyio.run(go)


# -- paths that cannot be used ------------------------------------------------------------------


def test_a_missing_directory_is_named_and_not_created(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "store.db"
    cp = SqliteCheckpointer(path)  # the constructor reports nothing; the first call does
    err = raised(lambda: call(cp, lambda s: s.get_thread(T1)))
    assert isinstance(err, StorePathError), repr(err)
    assert str(tmp_path / "missing") in str(err) and "does not exist" in str(err)
    assert "create it first" in str(err)
    assert err.path == str(path)
    assert not (tmp_path / "missing").exists()
    assert isinstance(raised(lambda: call(cp, lambda s: s.setup())), StorePathError)
    call(cp, lambda s: s.close())


def test_a_directory_given_as_the_path(tmp_path: Path) -> None:
    cp = SqliteCheckpointer(tmp_path)
    err = raised(lambda: call(cp, lambda s: s.list_threads()))
    assert isinstance(err, StorePathError), repr(err)
    assert repr(str(tmp_path)) in str(err) and "is a directory" in str(err)
    assert "graphflow.db" in str(err)  # what to give instead
    call(cp, lambda s: s.close())


def test_a_file_given_as_the_directory(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    cp = SqliteCheckpointer(tmp_path / "plain" / "store.db")
    err = raised(lambda: call(cp, lambda s: s.setup()))
    assert isinstance(err, StorePathError), repr(err)
    assert repr(str(tmp_path / "plain")) in str(err) and "not a directory" in str(err)
    call(cp, lambda s: s.close())


@pytest.mark.parametrize(
    "content",
    [b"hello, this is text\n", b"x" * 4096, b'{"json": true}\n' * 300, b""],
    ids=["text", "text of a page size", "json", "empty"],
)
def test_a_file_that_is_not_a_store(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    cp = SqliteCheckpointer(path)
    if not content:  # an empty file is a new, empty store
        assert call(cp, lambda s: s.get_thread(T1)) is None
        call(cp, lambda s: s.close())
        return
    err = raised(lambda: call(cp, lambda s: s.get_thread(T1)))
    assert type(err) is StorePathError, repr(err)
    assert "not a graphflow database (wrong path?)" in str(err)
    assert repr(str(path)) in str(err) and "damaged" not in str(err)
    call(cp, lambda s: s.close())
    assert path.read_bytes() == content  # nothing was written to it


def test_an_sqlite_file_of_another_application(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ann')")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    cp = SqliteCheckpointer(path)
    err = raised(lambda: call(cp, lambda s: s.list_threads()))
    assert type(err) is StorePathError, repr(err)
    assert "not a graphflow database (wrong path?)" in str(err) and "users" in str(err)
    call(cp, lambda s: s.close())
    assert path.read_bytes() == before  # no table of ours was added to it


def test_our_file_with_a_destroyed_header_is_still_damaged(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    filled(path)
    data = bytearray(path.read_bytes())
    data[:100] = os.urandom(100)  # the header: SQLite no longer recognizes the file
    path.write_bytes(bytes(data))
    cp = SqliteCheckpointer(path)
    err = raised(lambda: call(cp, lambda s: s.get_thread(T1)))
    assert isinstance(err, CorruptCheckpointError), repr(err)
    assert "damaged" in str(err) and err.thread_id == T1
    call(cp, lambda s: s.close())


# -- read-only files and directories ------------------------------------------------------------


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory any user may enter (tmp_path's parents are private to this user)."""
    d = Path(tempfile.mkdtemp(prefix="gf-ro-"))
    d.chmod(0o777)
    try:
        yield d
    finally:
        for root, dirs, files in os.walk(d, topdown=False):
            for name in dirs:
                (Path(root) / name).chmod(0o755)
            for name in files:
                (Path(root) / name).unlink()
            for name in dirs:
                (Path(root) / name).rmdir()
        d.rmdir()


def unprivileged(fn: Callable[[], None]) -> None:
    """Run ``fn`` as a user that file permissions apply to: here when this process is not
    root, else in a forked child that became ``nobody`` (everything it needs is imported)."""
    if os.geteuid() != 0:
        fn()
        return
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report the outcome through the pipe, never return to pytest
        os.close(r)
        code = 0
        try:
            os.setgid(65534)
            os.setuid(65534)
            fn()
        except BaseException as e:
            os.write(w, "".join(traceback.format_exception(e)).encode())
            code = 1
        finally:
            os.close(w)
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        report = f.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, report


def check_read_only(path: Path, why: str) -> None:
    """Reads of the store at ``path`` work; a write raises ReadOnlyStoreError naming it."""
    cp = SqliteCheckpointer(path)
    rec = call(cp, lambda s: s.get_thread(T1))
    assert rec is not None and rec.head is not None, rec  # type: ignore[attr-defined]
    assert call(cp, lambda s: s.get_checkpoint(T1)) is not None
    for write in (
        lambda s: s.acquire_lease(T1, new_owner(), 60.0),
        lambda s: s.put_answers([c.AnswerRecord(c.PauseId("p"), T1, "x")]),
    ):
        err = raised(lambda write=write: call(cp, write))
        assert isinstance(err, ReadOnlyStoreError), repr(err)
        assert repr(str(path)) in str(err) and "read-only" in str(err) and why in str(err)
        assert "nothing was written" in str(err)
    assert call(cp, lambda s: s.list_threads()) != []  # still usable for reads
    call(cp, lambda s: s.close())


def test_a_read_only_file_is_opened_read_only(shared_dir: Path) -> None:
    path = shared_dir / "store.db"
    filled(path)
    path.chmod(0o444)
    before = path.read_bytes()
    unprivileged(lambda: check_read_only(path, "file"))
    assert path.read_bytes() == before


def test_a_store_in_a_read_only_directory_is_opened_read_only(shared_dir: Path) -> None:
    d = shared_dir / "ro"
    d.mkdir()
    path = d / "store.db"
    filled(path)
    path.chmod(0o666)
    d.chmod(0o555)
    unprivileged(lambda: check_read_only(path, "directory"))
    assert sorted(os.listdir(d)) == ["store.db"]  # no WAL or index file was left


def test_a_read_only_store_of_an_older_version_is_read_with_its_old_record(
    shared_dir: Path,
) -> None:
    """A file migrated by a version that kept a second record (``_graphflow_meta``), now
    read-only: it is read as it is (its record is folded in only on write access)."""
    path = shared_dir / "store.db"
    filled(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE _graphflow_meta (key TEXT PRIMARY KEY, value)")
    version = migrations.SCHEMA_VERSION  # (the old record agrees with the ledger)
    conn.execute("INSERT INTO _graphflow_meta VALUES ('schema_version', ?)", (version,))
    conn.close()
    path.chmod(0o444)
    before = path.read_bytes()
    unprivileged(lambda: check_read_only(path, "file"))
    assert path.read_bytes() == before
    path.chmod(0o644)
    filled_again = SqliteCheckpointer(path)  # write access: the old record is folded in
    call(filled_again, lambda s: s.setup())
    call(filled_again, lambda s: s.close())
    conn = sqlite3.connect(path)
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "_graphflow_meta" not in tables and "_graphflow_migrations" in tables


def test_a_read_only_store_that_needs_migrations_says_so(shared_dir: Path) -> None:
    path = shared_dir / "store.db"
    shutil.copyfile(Path(__file__).parents[1] / "fixtures" / "golden" / "v1_paused.sqlite", path)
    path.chmod(0o444)

    def check() -> None:
        cp = SqliteCheckpointer(path)
        err = raised(lambda: call(cp, lambda s: s.setup()))
        assert isinstance(err, ReadOnlyStoreError), repr(err)
        assert "must be upgraded" in str(err) and "write access" in str(err)
        call(cp, lambda s: s.close())

    unprivileged(check)


def test_a_new_store_in_a_read_only_directory(shared_dir: Path) -> None:
    d = shared_dir / "ro"
    d.mkdir()
    d.chmod(0o555)

    def check() -> None:
        cp = SqliteCheckpointer(d / "store.db")
        err = raised(lambda: call(cp, lambda s: s.acquire_lease(T1, "me", 60.0)))
        assert isinstance(err, StorePathError), repr(err)
        assert repr(str(d)) in str(err) and "not writable" in str(err)
        call(cp, lambda s: s.close())

    unprivileged(check)
    assert os.listdir(d) == []


def test_path_errors_are_checkpoint_errors() -> None:
    assert issubclass(StorePathError, CheckpointError)
    assert issubclass(ReadOnlyStoreError, StorePathError)
    assert issubclass(StoreLockedError, CheckpointError)
    assert not issubclass(StorePathError, CorruptCheckpointError)


# -- another client holding the write lock ------------------------------------------------------


@pytest.mark.parametrize("what", ["commit", "lease", "answers", "first open"])
def test_another_writer_holding_the_lock(tmp_path: Path, what: str) -> None:
    """A second connection holds ``BEGIN IMMEDIATE`` (as a backup or the sqlite3 shell may):
    after busy_timeout the call raises StoreLockedError, which says so, names the file and
    says that nothing was written and the call can be retried; the retry works."""
    path = tmp_path / "store.db"
    filled(path)
    cp = SqliteCheckpointer(path, busy_timeout=0.05)
    owner = new_owner()
    if what == "first open":  # a migration would need the lock; here: a fresh file
        path = tmp_path / "new.db"
        cp = SqliteCheckpointer(path, busy_timeout=0.05)
        call(cp, lambda s: s.close())
        path.unlink()
        sqlite3.connect(path).close()  # an empty file, made by "another client"
    else:
        call(cp, lambda s: s.acquire_lease(T1, owner, 60.0))
    head = None if what == "first open" else call(cp, lambda s: s.get_thread(T1))
    step = c.step_batch(head.head if head is not None else None, {"counter": 2}, step=1)  # type: ignore[attr-defined]
    writes: dict[str, Callable[[SqliteCheckpointer], object]] = {
        "commit": lambda s: s.commit(T1, owner, step),
        "lease": lambda s: s.renew_lease(T1, owner, 60.0),
        "answers": lambda s: s.put_answers([c.AnswerRecord(c.PauseId("p"), T1, "x")]),
        "first open": lambda s: s.setup(),
    }
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        err = raised(lambda: call(cp, writes[what]))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert type(err) is StoreLockedError, repr(err)
    message = str(err)
    assert repr(str(path)) in message and err.path == str(path)
    assert "locked by another writer" in message and "nothing was written" in message
    assert "retried" in message
    assert isinstance(err.__cause__, sqlite3.OperationalError)
    call(cp, writes[what])  # the same call, once the lock is free
    if what == "commit":
        assert call(cp, lambda s: s.get_thread(T1)).head == step.checkpoint.id  # type: ignore[attr-defined, union-attr]
    call(cp, lambda s: s.close())


def test_locked_reads_are_not_writes(tmp_path: Path) -> None:
    """Under WAL a reader never waits for a writer: reads go on while another holds the lock."""
    path = tmp_path / "store.db"
    filled(path)
    cp = SqliteCheckpointer(path, busy_timeout=0.05)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        assert call(cp, lambda s: s.get_thread(ThreadId("thread-1"))) is not None
        assert call(cp, lambda s: s.list_threads()) != []
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    call(cp, lambda s: s.close())


if sys.platform == "win32":  # pragma: no cover - permissions and fork are POSIX here
    pytestmark = pytest.mark.skip("POSIX permissions")
