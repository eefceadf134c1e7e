"""Migration 0007: a list channel's closed chain may be folded into its chunk.

From this version a chunk commit deletes the appends of the chain it closed (their items are
in the chunk, with how many each added) and leaves a ``closed`` row in the chain pointing at
the chunk (``checkpoints.chunks``). Nothing in an existing file changes: its chains stay as
they were and read as before. The migration marks the file as one that older versions, which
would take a folded chain's missing appends for damage, refuse to open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # sqlite_utils (and numpy, which it imports) load only to migrate
    from sqlite_utils import Database

NAME = "0007_folded_chains"


def migrate(db: Database) -> None:
    """Nothing to change (see the module docstring)."""
