"""Rows of ``SqliteCheckpointer``'s tables: their checksums, and decoding them with checks.

Every row carries ``crc``, ``serde.checksum`` of its columns in table order (migration
``0002_checksums`` says which), computed here as a row is written (or in SQL, by
``gf_crc``, for updates of columns the writer has not read). A row is decoded only after
its checksum matched: a changed, erased or swapped column (keys included) is damage. The
decoders then check what the checksum cannot vouch for (rows of files migrated from schema
1, which got checksums of what they held, and writers that compute them): each column's
type and range, each blob's shape. Any failure is a ``CorruptCheckpointError`` naming the
thread and checkpoint; a record is never returned partly decoded.
"""

from __future__ import annotations

import math
import sqlite3
import zlib
from typing import Any

from checkpoints import errors, serde
from checkpoints.errors import CorruptCheckpointError

crc = serde.checksum
INT64 = 1 << 63


def install(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the SQL functions ``gf_crc(col, ...)`` (``serde.checksum`` of its args)
    and ``gf_channel_crc`` (``channel_crc``)."""
    conn.create_function("gf_crc", -1, _gf_crc, deterministic=True)
    conn.create_function("gf_channel_crc", 7, _gf_channel_crc, deterministic=True)


def _gf_crc(*values: object) -> int:
    return crc(values)


def _gf_channel_crc(*values: Any) -> int | None:
    try:
        return channel_crc(*values)
    except (TypeError, AttributeError, OverflowError):
        return None


def damaged(
    thread_id: str, checkpoint_id: str | None, what: str, detail: str
) -> CorruptCheckpointError:
    """The error for a stored record that is not what was written (``what``: a record, or
    records, as ``pauses``)."""
    at = f" checkpoint {checkpoint_id!r}" if checkpoint_id is not None else ""
    return errors.damaged(
        f"thread {thread_id!r}{at}: damage in the stored {what} ({detail})",
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
    )


def check_crc(
    stored: object, values: tuple[Any, ...], thread_id: str, checkpoint_id: str | None, what: str
) -> None:
    """Raise ``damaged`` unless ``stored`` is the checksum of ``values`` (a row's columns in
    table order); a column of a type no row holds is damage too."""
    try:
        ok = type(stored) is int and stored == crc(values)
    except TypeError:
        ok = False
    if not ok:
        raise damaged(thread_id, checkpoint_id, what, "checksum mismatch")


def bad_shape(thread_id: str, checkpoint_id: str | None, what: str, detail: object) -> Exception:
    """The error for a record that passed its checksum but holds values of the wrong kind."""
    return damaged(thread_id, checkpoint_id, what, f"invalid shape: {detail}")


def is_str(v: object) -> bool:
    return type(v) is str


def is_opt_str(v: object) -> bool:
    return v is None or type(v) is str


def is_time(v: object) -> bool:
    return type(v) is float and math.isfinite(v)


def is_opt_time(v: object) -> bool:
    return v is None or (type(v) is float and math.isfinite(v))


def is_count(v: object) -> bool:
    return type(v) is int and 0 <= v < INT64


def is_int64(v: object) -> bool:
    return type(v) is int and -INT64 <= v < INT64


def time_value(v: float | None) -> float | None:
    """A time as its REAL column stores it (an int given is stored, and read, as a float)."""
    return v if v is None or type(v) is float else float(v)


def count(thread_id: str, what: str, value: object, found: int) -> None:
    """Check a stored count against the rows found (a row moved by a damaged key, or a
    damaged count, shows here)."""
    if value != found or type(value) is not int:
        raise damaged(
            thread_id, None, what, f"{found} rows found where the count says {value!r:.40}"
        )


def channel_seed(thread_id: str, ns: str, channel: str, kind: str, base: int) -> int:
    """The checksum of a channel row's keys but its version: the same for every row of an
    append chain, so that reading one costs two ``zlib.crc32`` calls a row."""
    return crc((thread_id, ns, channel, kind, base))


def channel_crc(
    thread_id: str, ns: str, channel: str, version: int, kind: str, base: int, value: bytes
) -> int:
    """The checksum of a channel row: its keys and its value, wherever that is stored
    (``gf_channel_crc`` in SQL)."""
    seed = channel_seed(thread_id, ns, channel, kind, base)
    return zlib.crc32(value, zlib.crc32(version.to_bytes(8, "big", signed=True), seed))
