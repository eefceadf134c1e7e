"""How ``SqliteCheckpointer`` opens its path, and what it says when the path cannot serve.

SQLite reports every unusable path as "unable to open database file" and every foreign
file as "file is not a database". These functions look at the path first, so that the
error names it and says what to do: a missing directory, a directory given as the file, a
directory where no file can be created, or a file that is not a graphflow store (wrong
path) as opposed to a store of ours that is damaged (restore a backup).

A store whose file or directory is not writable is opened read-only: reads work, and a
write raises ``ReadOnlyStoreError``. (A WAL database needs its ``-wal`` and ``-shm`` files
beside it; where they cannot be created and no WAL is left over, the file is opened
``immutable``: nothing else can be writing it either.)
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from checkpoints.errors import ReadOnlyStoreError, StorePathError

_MAGIC = b"SQLite format 3\x00"


def _special(path: str) -> bool:
    """SQLite names that are no file path (in-memory databases, URIs): left to SQLite."""
    return path == "" or path == ":memory:" or path.startswith("file:")


def locate(path: str) -> str | None:
    """Check ``path`` before SQLite opens it; return why it must be opened read-only
    (``"file"`` or ``"directory"``: which is not writable) or None.

    Raises:
        StorePathError: the path cannot hold a store; the message says what to do.
    """
    if _special(path):
        return None
    if os.path.isdir(path):
        suggestion = os.path.join(path, "graphflow.db")
        raise StorePathError(
            f"checkpoint store path {path!r} is a directory, not a database file: give a "
            f"file path such as {suggestion!r}",
            path=path,
        )
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        given = os.path.dirname(path)
        existing = Path(directory)
        while not os.path.lexists(existing):
            existing = existing.parent
        if not existing.is_dir():
            raise StorePathError(
                f"cannot open checkpoint store {path!r}: {str(existing)!r} is not a directory",
                path=path,
            )
        raise StorePathError(
            f"cannot open checkpoint store {path!r}: directory {given!r} does not exist: "
            "create it first (the store creates its file, never its directory)",
            path=path,
        )
    writable_dir = os.access(directory, os.W_OK | os.X_OK)
    if not os.path.exists(path):
        if not writable_dir:
            raise StorePathError(
                f"cannot create checkpoint store {path!r}: directory {directory!r} is not "
                "writable (give a path in a writable directory)",
                path=path,
            )
        return None
    if not os.access(path, os.R_OK):
        raise StorePathError(f"cannot read checkpoint store {path!r}: permission denied", path=path)
    if not os.access(path, os.W_OK):
        return "file"
    return None if writable_dir else "directory"


def read_only_uris(path: str) -> list[str]:
    """The URIs to try, in order, to open ``path`` read-only (see the module docstring)."""
    uri = "file:" + quote(os.path.abspath(path))
    uris = [uri + "?mode=ro"]
    if not os.path.exists(path + "-wal"):
        uris.append(uri + "?mode=ro&immutable=1")
    return uris


def open_read_only(
    path: str,
    connect: Callable[[str], sqlite3.Connection],
    check: Callable[[sqlite3.Connection], object],
) -> sqlite3.Connection:
    """``path`` opened read-only by ``connect(uri)``, trying ``read_only_uris`` in order:
    the first whose ``check(conn)`` (a first read) does not fail for want of a ``-shm``
    beside the file. Anything ``check`` raises otherwise closes the connection and passes.
    """
    uris = read_only_uris(path)
    for i, target in enumerate(uris):
        conn = connect(target)
        try:
            check(conn)
            return conn
        except sqlite3.OperationalError as e:
            conn.close()
            # No -shm index could be made beside it: try the next way (immutable).
            cannot = (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY)
            if i + 1 == len(uris) or e.sqlite_errorcode & 0xFF not in cannot:
                raise
        except BaseException:
            conn.close()
            raise
    raise AssertionError("unreachable")  # pragma: no cover


def read_only_error(path: str, why: str) -> ReadOnlyStoreError:
    """The error for a write to a store opened read-only because of ``why`` (see locate)."""
    what = "the file is" if why == "file" else "its directory is"
    return ReadOnlyStoreError(
        f"checkpoint store {path!r} is read-only ({what} not writable): nothing was written; "
        "make it writable to run threads or record answers (reads work as they are)",
        path=path,
    )


def is_foreign(path: str) -> bool:
    """Whether a file SQLite calls "not a database" was never an SQLite file at all.

    SQLite files begin with a fixed header and are whole pages (multiples of 512 bytes, with
    NUL bytes in the first). A file without the header that is not whole pages, or has no NUL
    in its first 4 KiB (text), is something else given by mistake; one of whole pages of
    binary data is taken for a store of ours whose header was destroyed (damage).
    """
    if _special(path):
        return False
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    if head.startswith(_MAGIC):
        return False
    return size < 512 or size % 512 != 0 or b"\x00" not in head


def not_a_store(path: str, detail: str) -> StorePathError:
    """The error for a file that is not a graphflow database."""
    return StorePathError(
        f"{path!r} is not a graphflow database (wrong path?): {detail}; give the path of a "
        "graphflow store, or of a file that does not exist yet",
        path=path,
    )


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is SQLite's "database is locked" (another connection's write lock)."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY


def is_read_only(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is SQLite's "attempt to write a readonly database"."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_READONLY
