"""``SqliteCheckpointer``: durable checkpoints in one SQLite file.

Semantics are exactly ``MemoryCheckpointer``'s (``checkpoints.testing`` checks both); this
package adds durability and multi-process safety. Its modules, each owning one concern:

- ``store``: the ``Checkpointer`` methods, each one function run on the connection;
- ``connection``: opening the file (``paths`` names a path that cannot serve), calling it
  off the event loop one call at a time, SQLite errors as typed ones (damage included);
- ``durability``: the whole fsync story (sync levels, relaxed commits, room in the WAL, the
  WAL file itself in ``wal``), switchable off with ``SqliteCheckpointer(tuned_sync=False)``;
- ``txn``: transactions (every write is ``BEGIN IMMEDIATE``; reads of several statements
  share one deferred transaction);
- ``reads`` and ``reads_records``: every SELECT; ``commit``: the commit of a batch;
  ``writes``: leases, answers, decisions, dispatches;
- ``rows``: each table's codec, with the checksums of its rows (``rows.checks``);
- ``migrations``: the schema, one module per migration, and the ledger of applied ones.

Decisions behind it:

- **Values are serialized before the transaction begins** (``checkpoints.encoding``): a
  ``SerializationError`` writes nothing and the write lock is held only for SQL.
- **Every record is checked when read.** Rows carry checksums of their columns and
  collections are anchored by counts (migration ``0002_checksums`` says which); the codecs
  then check types, ranges and shapes. A changed, erased, swapped or moved value raises
  ``CorruptCheckpointError``: it never becomes the state. A step's commit computes its
  checksums from values it has (no SQL callback), and a write never gives a damaged row a
  new checksum.
- **No statement outlives a call**: multi-row reads ``fetchall()`` before decoding, so an
  error while decoding never leaves a statement open holding an old snapshot.
"""

from checkpoints.sqlite.store import SqliteCheckpointer

__all__ = ["SqliteCheckpointer"]
