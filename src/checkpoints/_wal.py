"""The WAL file of a ``SqliteCheckpointer``: whether it is empty, and keeping room in it.

SQLite deletes the WAL when the last connection to a database closes, so a process that
opens a closed store starts a new, empty WAL, and each of its commits appends to that file
until SQLite restarts the WAL from its beginning after a checkpoint (1,000 pages later). On
Linux filesystems an fsync of an append must also commit the file's new size to the
filesystem journal; an fsync of an overwrite within the file flushes data only, about half
the cost (measured on ext4: ~100 us against ~200 us a commit). A short-lived process (a
worker resuming one approval, a run from the command line) only ever appends.

``make_room`` keeps room in the WAL the way PostgreSQL readies its WAL segments: under the
write lock it writes zeros past the WAL's end, ``ROOM_BYTES`` at a time, so that the commits
that follow overwrite blocks an earlier fsync made durable; one fsync in about ten then
pays for the file's growth instead of every one. (SQLite's own way, keeping the WAL between
connections with ``SQLITE_FCNTL_PERSIST_WAL``, is a file control that Python's sqlite3
module does not expose. ``posix_fallocate`` would not do: ext4 marks such blocks unwritten,
and the first write to each again changes metadata.)

Why writing into SQLite's WAL is safe here:

- It is done only inside a write transaction (``BEGIN IMMEDIATE``: this connection holds
  the WAL write lock), so no other connection writes, restarts or truncates the WAL
  meanwhile; and the database cannot be closed for the last time (which deletes the WAL)
  while this connection is open.
- Zeros go only past the file's end (or into an empty file): past every frame, where no
  reader or checkpointer looks. This transaction's own frames are written at its commit,
  over the zeros.
- Zeros are not a WAL: a file of zeros has no WAL magic in its header, so recovery (after
  a crash at any point) treats it as empty; past SQLite's frames, recovery stops at the
  first zero frame (its salts and checksum do not match), as it does at the stale tail of
  any reused WAL. SQLite writes a new WAL's header at offset 0, and never truncates the file
  while it is open (no ``journal_size_limit`` is set).
- SQLite keeps no POSIX lock on the WAL file itself (its locks are on the database file and
  the ``-shm`` index), so opening and closing another descriptor on it releases none.

Any failure to make room is ignored: it is an optimization, never a condition for a commit.
"""

from __future__ import annotations

import os

ROOM_BYTES = 128 * 1024
"""The room kept ahead of the WAL's end: about ten step commits of a small graph."""

_ZEROS = bytes(2 * ROOM_BYTES)


def is_empty(wal_path: str) -> bool:
    """Whether the WAL file exists and is empty (one that cannot be looked at may hold
    frames: it counts as not empty)."""
    try:
        return os.stat(wal_path).st_size == 0
    except OSError:  # it exists once the connection has read: one not seen may hold frames
        return False


def _wanted(size: int) -> int:
    """Where zeros should end for a WAL of ``size`` bytes (``size``: nothing to do)."""
    if size == 0:
        return ROOM_BYTES
    if size % ROOM_BYTES == 0:  # our zeros still end the file: SQLite has not passed them
        return size
    return (size // ROOM_BYTES + 2) * ROOM_BYTES  # one to two chunks past the end


def make_room(wal_path: str) -> int:
    """Write zeros past the end of the WAL (into it, if empty) when SQLite's frames have
    reached the end of the room; the caller holds the WAL write lock (see the module's
    docstring). The bytes written: 0 when no room was needed or none could be made."""
    if os.name != "posix":  # elsewhere SQLite may hold the file open exclusively
        return 0
    try:
        size = os.stat(wal_path).st_size
        if _wanted(size) == size:
            return 0
        fd = os.open(wal_path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return 0
    try:
        size = os.fstat(fd).st_size  # of the file opened
        end = _wanted(size)
        return os.pwrite(fd, memoryview(_ZEROS)[: end - size], size) if end > size else 0
    except OSError:  # a full disk, say: the WAL simply grows as usual
        return 0
    finally:
        os.close(fd)
