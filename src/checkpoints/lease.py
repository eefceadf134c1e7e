"""Lease owner identities and the "known dead" test used for immediate takeover."""

from __future__ import annotations

import os
import socket
import uuid

_HOST = socket.gethostname()


def new_owner() -> str:
    """A unique lease owner id for one run: ``host:pid:random``."""
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def owner_is_dead(owner: str | None) -> bool:
    """True when ``owner`` ran on this host in a process that no longer exists.

    An owner on another host, or one whose id cannot be parsed, is never known dead: its
    lease must expire instead.
    """
    if not owner:
        return True
    parts = owner.split(":")
    if len(parts) != 3 or parts[0] != _HOST:
        return False
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return False
    # The state field follows the parenthesised command name.
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def lease_free(owner: str | None, expires_at: float | None, me: str, now: float) -> bool:
    """Whether ``me`` may take a lease currently held by ``owner`` until ``expires_at``."""
    if owner is None or owner == me:
        return True
    if expires_at is not None and expires_at <= now:
        return True
    return owner_is_dead(owner)
