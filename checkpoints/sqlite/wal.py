"""The WAL file of a ``SqliteCheckpointer``: whether it is empty, and keeping room in it.

SQLite deletes the WAL when the last connection to a database closes, so a process that
opens a closed store starts a new, empty WAL, and each of its commits appends to that file
until SQLite restarts the WAL from its beginning after a checkpoint (``AUTOCHECKPOINT_PAGES``
later). On Linux filesystems an fsync of an append must also commit the file's new size to
the filesystem journal; an fsync of an overwrite within the file flushes data only, about half
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


def open_fd(wal_path: str) -> int | None:
    """A descriptor on the WAL file that SQLite opened (never through a symlink, never
    creating one), kept while the connection is open: SQLite deletes the WAL only when the
    last connection closes, so it stays the same file. None where it cannot be had."""
    if os.name != "posix":  # elsewhere SQLite may hold the file open exclusively
        return None
    try:
        return os.open(wal_path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None


def size(fd: int | None) -> int | None:
    """The WAL's size in bytes (None: unknown, and it may hold frames)."""
    if fd is None:
        return None
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    except OSError:
        return None


def make_room(fd: int | None) -> int:
    """Write zeros past the end of the WAL open on ``fd`` (into it, if empty) when SQLite's
    frames have reached the end of the room; the caller holds the WAL write lock (see the
    module's docstring). The bytes written: 0 when no room was needed or none could be
    made."""
    if fd is None:
        return 0
    try:
        now = os.lseek(fd, 0, os.SEEK_END)
        if now and now % ROOM_BYTES == 0:  # our zeros still end the file: room is left
            return 0
        # An empty WAL gets one chunk; one SQLite's frames ran past, one to two beyond them.
        end = (now // ROOM_BYTES + 2) * ROOM_BYTES if now else ROOM_BYTES
        return os.pwrite(fd, memoryview(_ZEROS)[: end - now], now)
    except OSError:  # a full disk, say: the WAL simply grows as usual
        return 0
