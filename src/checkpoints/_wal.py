"""The WAL file of a ``SqliteCheckpointer``: whether it is empty, and giving a new one room.

SQLite deletes the WAL when the last connection to a database closes, so a process that
resumes a thread of a closed store starts a new, empty WAL, and each of its commits appends
to that file. On Linux filesystems an fsync of an append must also commit the file's new
size to the filesystem journal; an fsync of an overwrite within the file flushes data only,
about half the cost (measured on ext4: ~100 us against ~200 us a commit). A long-lived
process gets overwrites once SQLite restarts the WAL from its beginning after a checkpoint;
a short one (a worker resuming one approval) never does.

``prefill`` gives a new WAL that room the way PostgreSQL readies its WAL segments: it writes
zeros into the empty file, so the first commits overwrite blocks the first fsync made
durable. (SQLite's own way, ``SQLITE_FCNTL_PERSIST_WAL``, is a file control that Python's
sqlite3 module does not expose. ``posix_fallocate`` would not do: ext4 marks such blocks
unwritten, and the first write to each again changes metadata.)

Why writing into SQLite's WAL is safe here:

- It is done only inside a write transaction (``BEGIN IMMEDIATE``: this connection holds
  the WAL write lock), so no other connection writes, restarts or truncates the WAL
  meanwhile; and the database cannot be closed for the last time (which deletes the WAL)
  while this connection is open.
- It is done only to a file of size 0 (checked again on the opened descriptor), which holds
  no frame any reader or checkpointer could use.
- Zeros are not a WAL: their header has no WAL magic, so recovery (after a crash at any
  point) treats the file as empty; once SQLite writes its header and frames over the start,
  recovery stops at the first zero frame (its salts and checksum do not match), as it does
  at the stale tail of any reused WAL. SQLite writes a new WAL's header at offset 0 and
  never truncates the file while it is open (no ``journal_size_limit`` is set).
- SQLite keeps no POSIX lock on the WAL file itself (its locks are on the database file and
  the ``-shm`` index), so opening and closing another descriptor on it releases none.

Any failure to prefill is ignored: it is an optimization, never a condition for a commit.
"""

from __future__ import annotations

import os

PREFILL_BYTES = 128 * 1024
"""Room given to a new WAL: about ten step commits of a small graph (three pages each)."""

_ZEROS = bytes(PREFILL_BYTES)


def is_empty(wal_path: str) -> bool:
    """Whether the WAL file exists and is empty (one that cannot be looked at may hold
    frames: it counts as not empty)."""
    try:
        return os.stat(wal_path).st_size == 0
    except OSError:  # it exists once the connection has read: one not seen may hold frames
        return False


def prefill(wal_path: str) -> bool:
    """Write zeros into an empty WAL file; the caller holds the WAL write lock (see the
    module's docstring). Whether zeros were written."""
    if os.name != "posix":  # elsewhere SQLite may hold the file open exclusively
        return False
    try:
        fd = os.open(wal_path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        if os.fstat(fd).st_size != 0:
            return False
        return os.pwrite(fd, _ZEROS, 0) > 0
    except OSError:  # a full disk, say: the WAL simply grows as usual
        return False
    finally:
        os.close(fd)
