"""Safe msgpack serialization of checkpoint values (DESIGN.md promises 8 and 10).

Plain data (None, bool, int, float, str, bytes, list, dict) is packed and unpacked by
msgpack's C code without per-item Python work. Other supported values reach the ``default``
hook, which turns them into msgpack extension types (code: type, payload):

- Scalars are one extension whose data is raw bytes. 1: int beyond 64 bits (signed
  big-endian two's complement); 2: UUID (16 bytes); 3: Decimal (``str(value)``, ASCII).
- Structured values are a 2-item array ``[tag, payload]``, where the tag is an extension
  with empty data and the payload a list packed inline by msgpack. 10: tuple, 11: set,
  12: frozenset (payload: the items); 13: datetime ``[year, month, day, hour, minute,
  second, microsecond, fold, tz]``; 14: date ``[year, month, day]``; 15: time ``[hour,
  minute, second, microsecond, fold, tz]``; 16: timedelta ``[days, seconds,
  microseconds]``; 20: Enum ``[name, value]``; 21: pydantic model ``[name, fields,
  extras or nil, sorted fields set]``; 22: dataclass ``[name, fields]``. ``tz`` is nil, a
  ``zoneinfo`` key, or ``[offset in microseconds]`` / ``[offset, name]`` for a
  ``datetime.timezone``.

Inline payloads keep all nesting inside msgpack's own bounded, iterative machinery: no
Python recursion, so deep or hostile data cannot overflow the C stack. Codes are stored
forever: never reuse or renumber them.

What :func:`dumps` accepts, :func:`loads` gives back equal and of the same types, with one
exception: ``bytearray`` and ``memoryview`` come back as ``bytes`` (equal; telling them
apart would cost a Python walk of every value). msgpack packs its own ``ExtType`` and
``Timestamp`` without asking the hook; they would come back as another value (a list
shaped like a tag as a tuple, code 1 as an int) or not at all, so :func:`dumps` refuses
them: an extension header the hook did not make shows in the output (see
``_check_extensions``), at the cost of a byte scan of the output.

Loading never imports, unpickles or evaluates anything: a class is revived only when it was
passed to :func:`register` under the stored name, and a ``zoneinfo`` key only when its file
is in ``zoneinfo.TZPATH`` (``ZoneInfo`` would otherwise import the ``tzdata`` package), so
:func:`dumps` refuses zones found elsewhere and :func:`loads` reports an unknown key as a
:class:`DecodeError`. Registered objects are restored as they
were, without re-running validators or ``__init__`` (they need not be idempotent): models
by ``model_construct`` (fields, extras, fields set; private attributes get their defaults),
dataclasses by setting their fields on a new instance (missing fields get their defaults).
"""

from checkpoints.models import TaskSpec as _TaskSpec
from checkpoints.serde.decode import loads
from checkpoints.serde.encode import checksum, dumps
from checkpoints.serde.registry import DecodeError, is_registered, register, registered_name

# The package's own stored class, registered wherever serde can load: a process that imports
# one store module (the package's ``__init__`` imports nothing) still revives it.
register(_TaskSpec, name="checkpoints.TaskSpec")

__all__ = [
    "DecodeError",
    "checksum",
    "dumps",
    "is_registered",
    "loads",
    "register",
    "registered_name",
]
