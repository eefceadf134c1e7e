"""``WalSync``: the fsyncs of an evidence log's appends (``EvidenceStore.writing``).

An append is durable when it returns (``synchronous=FULL``). Two of SQLite's syncs are
avoided, the way ``checkpoints.sqlite.durability`` avoids them for the checkpoint store:

- **A new WAL's first append** (every process that appends to a log no other process has
  open: an approval from the command line, a resume in a new process) would sync the new
  WAL's header, then its frames and the directory: three syncs. The WAL file is empty, so it
  holds no earlier frames that a power loss could replay, and the header's own sync guards
  nothing: that append runs at ``OFF`` and is then made durable with one ``fdatasync`` of
  the WAL and one of its directory, before it returns. The emptiness is checked again under
  the write lock (another process may have written in between; then the append runs at
  ``FULL`` as any other).
- **Room in the WAL** (``checkpoints.sqlite.wal``): under the write lock, every later
  append keeps zeros ahead of the WAL's end, so the appends after it overwrite the file
  rather than grow it (their fsync then skips a filesystem-journal commit). A new WAL's
  first append keeps none: one append per process (W4, an approval from the command line)
  would only pay for writing them.

A log made with ``durability="process"`` syncs nothing, and an in-memory log has no WAL.
"""

from __future__ import annotations

import contextlib
import os
import weakref

import checkpoints.sqlite.wal as wal


class WalSync:
    """The descriptor on one evidence log's WAL, while its connection is open."""

    def __init__(self, path: str, *, fsync: bool) -> None:
        self._path = path
        self._wal_path = ""  # (where SQLite keeps it, symlinks resolved: found on opening)
        self._fsync = fsync
        self.fd: int | None = None
        self._finalizer: weakref.finalize[[int], WalSync] | None = None

    def opened(self, writable: bool) -> None:
        """The connection is open (SQLite made its WAL as it first read)."""
        self.closed()
        if writable and self._fsync:
            self._wal_path = os.path.realpath(self._path) + "-wal"
            self.fd = fd = wal.open_fd(self._wal_path)
            if fd is not None:  # (closed with the store that is freed without close())
                self._finalizer = weakref.finalize(self, _close, fd)

    def closed(self) -> None:
        """The connection is closed (or belongs to the parent of a forked process)."""
        finalizer, self._finalizer, self.fd = self._finalizer, None, None
        if finalizer is not None:
            finalizer()

    def is_new(self) -> bool:
        """Whether the WAL is known to be empty (a new WAL: see the module docstring)."""
        return wal.size(self.fd) == 0

    def make_room(self) -> None:
        """Keep room ahead of the WAL's end (under the write lock)."""
        wal.make_room(self.fd)

    def sync(self) -> None:
        """Make a new WAL's first append durable: its data, then its directory entry.

        Raises:
            OSError: the file system could not sync (the append may not be durable).
        """
        assert self.fd is not None
        os.fdatasync(self.fd)
        directory = os.open(os.path.dirname(self._wal_path), os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
