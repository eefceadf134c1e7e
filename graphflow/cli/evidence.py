"""The evidence log from the shell: ``audit``, ``verify``, ``freeze`` and ``unfreeze``.

- ``audit THREAD`` prints the thread's trail (``graph.audit``): one entry per evidence event,
  with its checkpoint and pause ids. Its log (``--evidence``, else the one beside ``--db``)
  must exist: exit 4 otherwise, and none is made.
- ``verify`` recomputes the hash chain of an evidence file (by default the one beside
  ``--db``: ``X.db`` -> ``X.evidence.db``) and exits 3 when anything does not hold, printing
  each problem's seq, kind and detail. A file that does not exist is exit 4 and is not made.
- ``freeze`` and ``unfreeze`` stop and restart a thread (incident response), recorded as
  evidence, as ``cancel`` does, without the graph's code; ``freeze`` also stops a run that
  is executing the thread now (``graph.freeze``).
"""

from __future__ import annotations

import os
from typing import Any

import click

from graphflow.cli.common import (
    VERIFY_FAILED,
    CliError,
    NotFound,
    Usage,
    by_option,
    database,
    db_option,
    existing_database,
    graph_option,
    json_option,
    not_a_directory,
    print_json,
    printable,
    reason_option,
    thread_argument,
)

_HEX = frozenset("0123456789abcdef")

_evidence_option = click.option(
    "--evidence",
    "evidence_path",
    metavar="PATH",
    help="the evidence log file (default: the one beside --db, X.db -> X.evidence.db)",
)


def evidence_file(ctx: click.Context, db: str | None, given: str | None) -> str:
    """The evidence log's path: ``given``, else the file beside the command's database."""
    if given == "":
        raise Usage("--evidence '' names no file: pass the evidence log's path (or leave it "
                    "out: the log beside the --db database)")  # fmt: skip
    if given:
        return given
    path = not_a_directory(database(ctx, db))
    root, ext = os.path.splitext(path)
    return root + ".evidence.db" if ext == ".db" else path + ".evidence.db"


def existing_evidence(path: str) -> str:
    """``path``, which must be an evidence file that exists (exit 4 otherwise; none is made)."""
    if path == ":memory:":
        raise Usage("--evidence ':memory:' names no file: give the path of an evidence log")
    if os.path.isdir(path):
        raise CliError(f"evidence log {path!r} is a directory: pass --evidence with the file")
    if not os.path.isfile(path):
        raise NotFound(
            f"evidence log {path!r} does not exist (nothing was created); pass --evidence "
            "with the log's file, or --db with the database it sits beside"
        )
    if os.path.getsize(path) == 0:  # (SQLite would take it for a new one, and write it)
        raise CliError(f"evidence log {path!r} is an empty file, not an evidence log")
    return path


def parse_head(text: str) -> Any:
    """``--expect-head COUNT:HASH`` as an ``EvidenceHead``; a usage error otherwise."""
    count, sep, digest = text.partition(":")
    if not sep or not count.isdigit() or len(digest) != 64 or not _HEX.issuperset(digest):
        raise Usage(
            f"--expect-head {text!r} must be COUNT:HASH, a seq and 64 lowercase hex digits "
            "(as `graphflow verify` prints the head)"
        )
    from graphflow.evidence import GENESIS, EvidenceHead

    if int(count) == 0 and digest != GENESIS:
        raise Usage(f"--expect-head {text!r}: the empty log's head is 0:{GENESIS} (64 zeros)")
    return EvidenceHead(int(count), digest)


def _verified(log: Any, path: str) -> None:
    """Raise (exit 3) if the log ``audit`` just read does not verify."""
    report = log.verify()
    if not report.ok:
        first = report.problems[0]
        raise CliError(
            f"evidence log {path!r} does not verify ({len(report.problems)} problem(s), the "
            f"first at seq {first.seq}: {first.kind}): the trail above may have been "
            "altered; `graphflow verify` lists every problem",
            VERIFY_FAILED,
        )


@click.command("audit")
@thread_argument()
@_evidence_option
@graph_option(required=False)
@json_option
@db_option
@click.pass_context
def audit_command(
    ctx: click.Context,
    thread: str,
    evidence_path: str | None,
    graph_ref: str | None,
    as_json: bool,
    db: str | None,
) -> None:
    """Show a thread's evidence trail.

    Every proposal, policy decision, pause, decision, dispatch and result, in order, each
    with its checkpoint and pause ids; a decision that did not apply says why. Events the
    thread kept while the log was not writable are written first."""
    from graphflow.cli import load

    path = existing_database(ctx, db)
    graph = load.store_graph(path, graph_ref)
    assert graph.checkpointer is not None
    # Opened now: a file that is no graphflow database is said so before a missing log.
    load.call(graph.checkpointer.get_thread, thread)
    log_path = existing_evidence(evidence_file(ctx, db, evidence_path))
    from graphflow.compiled import CompiledGraph
    from graphflow.evidence import EvidenceLog

    log = EvidenceLog(log_path)
    ctx.call_on_close(log.close)
    trail = CompiledGraph(graph.spec, graph.checkpointer, evidence=log).audit(thread)
    # The trail is read from the log as it is: one that does not verify is said so after
    # it (exit 3), so that an altered trail is never shown as if it held.
    if as_json:
        from graphflow.cli.encode import encode

        print_json(encode(trail))
    elif not trail:
        click.echo(f"thread {thread} has no evidence events")
    else:
        _print_trail(trail)
    _verified(log, log_path)


def _print_trail(trail: list[Any]) -> None:
    """The trail as a table, an entry a row."""
    from graphflow.cli.render import table, when

    def cell(value: str | None) -> str:
        return value if value else "-"

    rows = [
        (
            str(e.seq),
            when(e.at),
            e.stage,
            cell(e.call_id),
            cell(e.tool),
            cell(e.actor),
            cell(e.decision),
            "yes" if e.applied else "NO",
            cell(e.checkpoint_id),
            cell(e.pause_id),
            cell(e.detail),
        )
        for e in trail
    ]
    headers = ("SEQ", "AT", "STAGE", "CALL", "TOOL", "ACTOR", "DECISION", "APPLIED",
               "CHECKPOINT", "PAUSE", "DETAIL")  # fmt: skip
    for line in table(headers, rows):
        click.echo(line)


@click.command("verify")
@_evidence_option
@click.option(
    "--expect-head",
    "expect_head",
    metavar="COUNT:HASH",
    help="a head kept elsewhere (as verify prints it); a log cut short after it fails",
)
@json_option
@db_option
@click.pass_context
def verify_command(
    ctx: click.Context,
    evidence_path: str | None,
    expect_head: str | None,
    as_json: bool,
    db: str | None,
) -> None:
    """Verify an evidence log's hash chain (exit 3 on any problem).

    Reports every modified, deleted, inserted, reordered or forked event, and (against
    --expect-head) a truncated log, each with its seq."""
    expected = parse_head(expect_head) if expect_head is not None else None
    path = existing_evidence(evidence_file(ctx, db, evidence_path))
    from graphflow.evidence import EvidenceLog

    with EvidenceLog(path, validate=False) as log:
        report = log.verify(expected_head=expected)
    head = f"{report.head.count}:{report.head.hash}"
    if as_json:
        print_json({
            "path": path,
            "ok": report.ok,
            "count": report.count,
            "head": {"count": report.head.count, "hash": report.head.hash},
            "problems": [{"seq": p.seq, "kind": p.kind, "detail": p.detail}
                         for p in report.problems],
        })  # fmt: skip
    elif report.ok:
        click.echo(f"ok: {report.count} events in {path}, head {head}")
    else:
        for p in report.problems:
            click.echo(f"seq {p.seq}  {p.kind}  {p.detail}")
    if not report.ok:
        n = len(report.problems)
        raise CliError(
            f"evidence log {path!r} does not verify: {n} problem{'s' if n != 1 else ''} "
            f"(first: seq {report.problems[0].seq} {report.problems[0].kind})",
            VERIFY_FAILED,
        )


def _thread_operation(
    ctx: click.Context, verb: str, thread: str, reason: str, by: str | None, as_json: bool
) -> None:
    """``freeze`` or ``unfreeze`` of ``thread`` on the command's store."""
    if not reason.strip():
        raise Usage("--reason must not be empty: the audit trail records why")
    from graphflow.cli import load

    path = existing_database(ctx, ctx.params.get("db"))
    graph = load.store_graph(path, ctx.params.get("graph_ref"))
    getattr(graph, verb)(thread, by=by, reason=reason)
    if as_json:
        assert graph.checkpointer is not None
        th = load.call(graph.checkpointer.get_thread, thread)  # (its status as it is now)
        status = th.status if th is not None else None
        print_json({"thread_id": thread, "status": status, "reason": reason, "by": by})
        return
    click.echo(f"{'froze' if verb == 'freeze' else 'unfroze'} thread {thread}: {printable(reason)}")


def _operation(verb: str, summary: str) -> click.Command:
    @click.command(verb, help=summary)
    @thread_argument()
    @reason_option("why (recorded)", required=True)
    @by_option("who acts (a principal id)")
    @graph_option(required=False)
    @json_option
    @db_option
    @click.pass_context
    def command(
        ctx: click.Context,
        thread: str,
        reason: str,
        by: str | None,
        graph_ref: str | None,
        as_json: bool,
        db: str | None,
    ) -> None:
        _thread_operation(ctx, verb, thread, reason, by, as_json)

    return command


freeze_command = _operation(
    "freeze",
    "Freeze a thread: no run starts and no decision applies until unfreeze.\n\n"
    "A thread a run is executing now (a runaway agent) is frozen at once: that run "
    "dispatches no tool call from then on and stops at its next write. For incident "
    "response; the reason and who froze it are recorded as evidence.",
)
unfreeze_command = _operation(
    "unfreeze",
    "Unfreeze a frozen thread: it is as it was before it froze.\n\n"
    "The reason and who unfroze it are recorded as evidence.",
)

COMMANDS = (audit_command, verify_command, freeze_command, unfreeze_command)
