"""What ``verify`` reports: each stored row checked on its own and against the chain.

Each row's hash is recomputed from its prev_hash, the seq written in its bytes and its bytes
(``graphflow.evidence.chain``); its seq, thread and type columns are checked against its
bytes. A row whose hash holds carries the seq it was written as, so the chain is rebuilt by
that seq and by prev_hash links, and each deviation is named once:

- ``modified``: a row's bytes, hash, prev_hash or columns do not match (the seq is the row's);
  or a row's hash is not the ``prev_hash`` its successor recorded (the row was changed and
  its hash recomputed; the seq is the changed row's); or the event at ``expected_head``'s
  seq is not the one the head recorded.
- ``deleted``: seqs are missing before a row that holds (the seq is the first missing one;
  the detail gives the range).
- ``inserted``: a row that is not part of the chain (a second row for a seq, a copy of an
  event, or a row that claims a parent already continued) sits before the chain's last row;
  the rows after a copy still continue the chain.
- ``forked``: a row claims a parent that another row already continues, and sits after the
  chain's last row (two continuations of one event); rows that continue such a branch are
  ``forked`` too.
- ``reordered``: rows that hold sit in a different order than the seqs they were written
  as (the seq is where the row sits; the detail says what it was written as).
- ``truncated``: the log ends before ``expected_head``'s seq (the seq is the first one
  missing).

Rows whose seq column differs from the seq they were written as, with no other problem
to explain it, are reported ``modified``. Recomputing every hash after a change makes a
consistent chain that only ``expected_head`` (kept elsewhere) can expose.

A log that holds is read once (``scan``, the fast path); only one that does not is read
again whole and classified (``classify``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from graphflow.evidence.chain import GENESIS, EvidenceHead, StoredRow, chain_hash, is_hash

ProblemKind = Literal["modified", "deleted", "inserted", "reordered", "truncated", "forked"]
"""What ``verify`` found (see this module's docstring)."""


@dataclass(frozen=True, slots=True)
class VerifyProblem:
    """One thing ``verify`` found wrong: where (``seq``), what (``kind``), and ``detail``."""

    seq: int
    kind: ProblemKind
    detail: str


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The result of ``verify``: ``ok`` when ``problems`` is empty; ``count`` rows checked;
    ``head`` the last row's seq and hash as stored (to keep for the next ``verify``)."""

    ok: bool
    count: int
    problems: tuple[VerifyProblem, ...]
    head: EvidenceHead


def verify_rows(
    rows: Sequence[StoredRow], expected_head: EvidenceHead | None = None
) -> VerifyReport:
    """Check ``rows`` (in seq order) as one chain; see this module's docstring."""
    scanned = scan(rows, expected_head)
    return scanned.report() if scanned.problem is None else classify(rows, expected_head)


@dataclass(slots=True)
class Scan:
    """What ``scan`` saw: the rows read, the last one, and the first problem (if any)."""

    count: int = 0
    last: StoredRow | None = None
    problem: VerifyProblem | None = None
    expected: EvidenceHead | None = None
    at_expected: object = None  # the hash of the row at expected.count

    def problem_list(self) -> list[VerifyProblem]:
        """The problem found, as a list."""
        return [self.problem] if self.problem is not None else []

    def report(self) -> VerifyReport:
        """The report of a scan that found no problem in the rows."""
        problems = _head_problems(self.last, self.at_expected, self.expected)
        return _report(problems, self.count, self.last)


def scan(rows: Iterable[StoredRow], expected_head: EvidenceHead | None = None) -> Scan:
    """The fast path of ``verify``: read ``rows`` (in seq order, once) and stop at the first
    one that is not exactly the next link of the chain 1..n."""
    out = Scan(expected=expected_head)
    watch = expected_head.count if expected_head is not None else -1
    prev = GENESIS
    for n, row in enumerate(rows, 1):
        out.count = n
        why = _row_problem(row, row.seq)
        if why is None and row.seq != n:
            why = f"seq {row.seq} follows seq {n - 1}"
        if why is None and row.prev_hash != prev:
            why = f"its prev_hash is not the hash of seq {n - 1}"
        if why is not None:
            out.problem = VerifyProblem(row.seq, "modified", why)
            return out
        if n == watch:
            out.at_expected = row.hash
        out.last = row
        prev = row.hash  # type: ignore[assignment]  # a hash: _row_problem checked it
    return out


def _report(problems: list[VerifyProblem], count: int, last: StoredRow | None) -> VerifyReport:
    """The report of ``count`` rows ending at ``last``: ok when ``problems`` is empty."""
    return VerifyReport(not problems, count, tuple(problems), _head(last))


def _head(last: StoredRow | None) -> EvidenceHead:
    if last is not None and is_hash(last.hash) and type(last.seq) is int and last.seq >= 0:
        return EvidenceHead(last.seq, last.hash)  # type: ignore[arg-type]
    return EvidenceHead(0, GENESIS)


def _head_problems(
    last: StoredRow | None, at_expected: object, expected: EvidenceHead | None
) -> list[VerifyProblem]:
    """What ``expected`` says is wrong with a log ending at ``last`` (``at_expected``: the
    hash of its row at ``expected.count``)."""
    if expected is None or expected.count == 0:
        return []
    end = last.seq if last is not None else 0
    if end < expected.count:
        return [
            VerifyProblem(
                end + 1,
                "truncated",
                f"the log ends at seq {end}, but the expected head is seq {expected.count} "
                f"({expected.hash})",
            )
        ]
    if at_expected != expected.hash:
        return [
            VerifyProblem(
                expected.count,
                "modified",
                f"the event at seq {expected.count} is not the expected head "
                f"({expected.hash}): it, or an event before it, was changed and the hashes "
                "recomputed",
            )
        ]
    return []


def _row_problem(row: StoredRow, written_as: int | None) -> str | None:
    """Why ``row`` does not hold on its own (None: its hash and columns match its bytes).

    ``written_as`` is the seq it must have been written as; None takes its bytes' word."""
    return _check_row(row, written_as)[1]


def _check_row(row: StoredRow, written_as: int | None) -> tuple[int | None, str | None]:
    """The seq ``row`` was written as when its hash holds (else None), and why it does not
    hold on its own (None: it holds: its hash and its columns match its bytes)."""
    try:
        event = json.loads(row.body)
        graphflow = event["extensions"]["graphflow"]
        seq = graphflow["seq"]
    except (ValueError, TypeError, KeyError):
        return None, "its bytes are not an evidence event"
    if type(seq) is not int or seq < 1:
        return None, "its bytes record no valid seq"
    if written_as is not None and seq != written_as:
        return None, f"its bytes record seq {seq}"
    if not is_hash(row.prev_hash) or not is_hash(row.hash):
        return None, "its prev_hash or hash is not 64 lowercase hex digits"
    if chain_hash(row.prev_hash, seq, row.body) != row.hash:  # type: ignore[arg-type]
        return None, "its hash does not match its bytes and prev_hash"
    if row.thread_id != graphflow.get("thread_id"):
        return seq, f"its thread_id column {row.thread_id!r} differs from the event's"
    if row.event_type != event.get("event_type"):
        return seq, f"its event_type column {row.event_type!r} differs from the event's"
    return seq, None


@dataclass(slots=True, eq=False)
class _Item:
    row: StoredRow
    pos: int  # where the row sits (its seq column)
    key: int  # the seq it was written as (its position when its bytes cannot be trusted)
    sound: bool  # its hash matches its bytes and prev_hash
    why: str | None  # why it does not hold on its own (None: it holds)
    depth: int = 0  # the longest run of rows continuing it


def _items(rows: Sequence[StoredRow]) -> list[_Item]:
    out = []
    for row in rows:
        written_as, why = _check_row(row, None)
        sound = written_as is not None
        out.append(_Item(row, row.seq, written_as or row.seq, sound, why))
    return out


def classify(rows: Sequence[StoredRow], expected_head: EvidenceHead | None = None) -> VerifyReport:
    """The slow path of ``verify``: name every deviation of ``rows`` from one chain."""
    problems = _deviations(rows) or scan(rows).problem_list()
    last = rows[-1] if rows else None
    if expected_head is not None:
        at = next((row.hash for row in rows if row.seq == expected_head.count), None)
        problems.extend(_head_problems(last, at, expected_head))
    return _report(problems, len(rows), last)


def _deviations(rows: Sequence[StoredRow]) -> list[VerifyProblem]:
    items = _items(rows)
    found: dict[tuple[int, ProblemKind], str] = {}

    def report(seq: int, kind: ProblemKind, detail: str) -> None:
        found.setdefault((seq, kind), detail)

    order = sorted(items, key=lambda it: (it.key, it.pos))
    children: dict[object, list[_Item]] = {}
    for it in items:
        children.setdefault(it.row.prev_hash, []).append(it)
    for it in reversed(order):
        it.depth = 1 + max(
            (c.depth for c in children.get(it.row.hash, ()) if c.key > it.key), default=0
        )

    chain: list[_Item] = []
    chain_hashes: dict[object, int] = {GENESIS: 0}  # hash -> the seq it is the hash of
    extras: list[_Item] = []
    off_chain: set[object] = set()
    want_prev: object = GENESIS
    want_seq = 1
    for key, group_iter in itertools.groupby(order, key=lambda it: it.key):
        group = []
        for it in group_iter:
            if it.row.prev_hash in off_chain:  # continues a row that is not in the chain
                extras.append(it)
                off_chain.add(it.row.hash)
            else:
                group.append(it)
        if not group:
            continue
        linked = [it for it in group if it.row.prev_hash == want_prev]
        unknown = [it for it in group if it.row.prev_hash not in chain_hashes and it not in linked]
        chosen: _Item | None
        if key > want_seq and (unknown or linked):
            last = key - 1
            span = f"seq {want_seq}" if last == want_seq else f"seqs {want_seq} to {last}"
            report(want_seq, "deleted", f"{span} missing: the next event is seq {key}")
            chosen = max(unknown or linked, key=_preference)
        elif linked and key == want_seq:
            chosen = max(linked, key=_preference)
        elif unknown and key == want_seq:
            chosen = max(unknown, key=_preference)
            if chosen.sound and chain:
                before = chain[-1]
                report(
                    before.pos,
                    "modified",
                    f"its hash is not the prev_hash that seq {key} recorded: it was changed "
                    "and its hash recomputed",
                )
        else:
            chosen = None
        for it in group:
            if it is not chosen:
                extras.append(it)
                if chosen is None or it.row.hash != chosen.row.hash:  # (not a mere copy)
                    off_chain.add(it.row.hash)
        if chosen is not None:
            if chosen.why is not None:
                report(chosen.pos, "modified", chosen.why)
            chain.append(chosen)
            chain_hashes.setdefault(chosen.row.hash, key)
            want_prev, want_seq = chosen.row.hash, key + 1

    end = max((it.pos for it in chain), default=0)
    branch: dict[object, tuple[ProblemKind, int]] = {}
    for it in sorted(extras, key=lambda it: it.pos):
        origin = branch.get(it.row.prev_hash)
        if origin is not None:
            kind, at = origin
            detail = f"it continues the {kind} row at seq {at}"
        else:
            copy = it.sound and it.row.hash in chain_hashes  # (the same event twice)
            kind = "inserted" if it.pos < end or copy else "forked"
            parent = chain_hashes.get(it.row.prev_hash)
            if not it.sound:
                detail = f"it is not part of the chain ({it.why})"
            elif it.row.hash in chain_hashes:
                detail = f"it is a copy of the event of seq {chain_hashes[it.row.hash]}"
            elif parent is not None:
                detail = (
                    f"it claims seq {parent} as its parent (written as seq {it.key}), which "
                    "another event already continues"
                )
            else:
                detail = f"it is not part of the chain (written as seq {it.key})"
        report(it.pos, kind, detail)
        branch.setdefault(it.row.hash, (kind, origin[1] if origin else it.pos))

    # Reordered: rows of the chain out of their seqs' order (a row off the chain is named
    # above, and is not what the rows around it are compared with).
    on_chain = set(chain)
    sound_by_pos = [it for it in items if it.sound and it in on_chain]
    sound_by_key = sorted(sound_by_pos, key=lambda it: (it.key, it.pos))
    for here, written in zip(sound_by_pos, sound_by_key, strict=True):
        if here is not written:
            report(here.pos, "reordered", f"the event here was written as seq {here.key}")
    if not found:
        for it in chain:
            if it.pos != it.key:
                report(
                    it.pos,
                    "modified",
                    f"its seq column says {it.pos} but the event was written as seq {it.key}",
                )
                break
    return [VerifyProblem(seq, kind, detail) for (seq, kind), detail in sorted(found.items())]


def _preference(it: _Item) -> tuple[bool, int, int]:
    """Among rows for one seq, the chain takes a sound one, then the longest, then the first."""
    return (it.sound, it.depth, -it.pos)
