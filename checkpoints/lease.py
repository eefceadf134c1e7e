"""Lease owner identities and the "known dead" test used for immediate takeover."""

from __future__ import annotations

import itertools
import os
import socket

_HOST = socket.gethostname()
_runs = itertools.count()
_prefix = [os.urandom(4).hex()]


def new_owner() -> str:
    """A unique lease owner id for one run: ``host:pid:random``.

    The random part is random per process, then counts runs (cheaper than fresh randomness
    for every run, as unique); a forked child draws its own.
    """
    return f"{_HOST}:{os.getpid()}:{_prefix[0]}{next(_runs):x}"


def _reseed_in_child() -> None:
    _prefix[0] = os.urandom(4).hex()


os.register_at_fork(after_in_child=_reseed_in_child)


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
