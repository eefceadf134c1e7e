"""Answering threads: ``approve``, ``deny``, ``answer`` (recorded through ``submit``; nothing
runs: the next run of the thread applies them) and ``cancel``.

``approve`` and ``deny`` show the pending call they answer before recording. Their decision
is recorded even when it answers nothing (for the audit trail, as ``submit`` does); the
command then says why and exits 4 when no pending call has that id, 1 otherwise (a
fingerprint that differs from the call's, say).
"""

from __future__ import annotations

from shlex import quote
from typing import Any

import click

from graphflow.cli.common import (
    CliError,
    NotFound,
    Usage,
    by_option,
    db_option,
    existing_database,
    graph_option,
    json_option,
    parse_json,
    print_json,
    printable,
    reason_option,
    suggest,
    thread_argument,
)


def _graph(ctx: click.Context, db: str | None, graph_ref: str | None) -> Any:
    from graphflow.cli import load

    path = existing_database(ctx, db)
    return load.store_graph(path, graph_ref)


def _pending_call(pauses: list[Any], key: str) -> Any | None:
    """The pending tool confirmation that ``key`` (a function call id, or a pause id)
    answers, if exactly one does."""
    tool = [p for p in pauses if getattr(p, "request", None) is not None]
    by_pause = [p for p in tool if p.id == key]
    if by_pause:
        return by_pause[0]
    by_call = [p for p in tool if p.request.function_call_id == key]
    return by_call[0] if len(by_call) == 1 else None


def _decide(
    ctx: click.Context,
    verdict: str,
    thread: str,
    call_id: str,
    *,
    by: str | None,
    reason: str | None,
    fingerprint: str | None,
    as_json: bool,
) -> None:
    from graphflow.cli.encode import encode, request_fields
    from graphflow.decisions import Decision

    graph = _graph(ctx, ctx.params.get("db"), ctx.params.get("graph_ref"))
    pauses = graph.pending_pauses(thread)
    if not pauses:  # (submit would refuse it: there is nothing to record a decision on)
        raise NotFound(
            f"thread {thread!r} has no pending pause, so no pending call {call_id!r}; "
            f"`{suggest('graphflow threads')}` shows its status"
        )
    pending = _pending_call(pauses, call_id)
    if pending is not None and not as_json:
        req = pending.request
        from graphflow.cli.render import compact

        args = compact(request_fields(req)["args"])
        click.echo(f"{verdict} {req.tool_name} {args} (call {req.function_call_id}, "
                   f"pause {pending.id}, fingerprint {req.fingerprint})")  # fmt: skip
    decision = (
        Decision.approve(fingerprint=fingerprint, by=by, reason=reason)
        if verdict == "approve"
        else Decision.deny(reason=reason, by=by)
    )
    ignored = graph.submit(thread, decisions={call_id: decision}, by=by, reason=reason)
    if ignored:
        answer = suggest(f"graphflow answer {quote(thread)} {quote(call_id)} VALUE_JSON")
        note = (ignored[0].note or "it answered no pending call").replace(
            "answer it with resume={...}",  # (the Python call: the command is answer)
            f"answer it with `{answer}`",
        )
        message = f"thread {thread!r}: the {verdict} of {call_id!r} was recorded but not applied"
        if ignored[0].pause_id is None:
            raise NotFound(f"{message}: {note}")
        raise CliError(f"{message}: {note}")
    if as_json:
        records = graph.list_decisions(thread)
        mine = [d for d in records if pending is not None and d.pause_id == pending.id]
        mine = mine or [d for d in records if d.call_id == call_id]
        request = request_fields(pending.request) if pending is not None else None
        print_json({"request": request, "decision": encode(mine[-1]) if mine else None})
        return
    click.echo(
        f"recorded: {verdict} by {by or 'an anonymous caller'}; nothing ran. The next run of "
        f"the thread applies it: {suggest(f'graphflow resume {quote(thread)} --graph MODULE:ATTR')}"
    )


@click.command("approve")
@thread_argument()
@click.argument("call_id")
@by_option("who approves (a principal id)")
@reason_option("why")
@click.option(
    "--fingerprint",
    metavar="F",
    help="the fingerprint of the arguments you reviewed: the approval is ignored if it "
    "differs from the call's",
)
@graph_option(required=False)
@json_option
@db_option
@click.pass_context
def approve_command(
    ctx: click.Context,
    thread: str,
    call_id: str,
    by: str | None,
    reason: str | None,
    fingerprint: str | None,
    graph_ref: str | None,
    as_json: bool,
    db: str | None,
) -> None:
    """Approve a pending tool call (recorded; nothing runs).

    CALL_ID is the call's function call id (or its pause id). The thread's next run
    (`graphflow resume`) runs the call."""
    _decide(ctx, "approve", thread, call_id, by=by, reason=reason, fingerprint=fingerprint,
            as_json=as_json)  # fmt: skip


@click.command("deny")
@thread_argument()
@click.argument("call_id")
@reason_option("why (the model is told)", required=True)
@by_option("who denies (a principal id)")
@graph_option(required=False)
@json_option
@db_option
@click.pass_context
def deny_command(
    ctx: click.Context,
    thread: str,
    call_id: str,
    reason: str,
    by: str | None,
    graph_ref: str | None,
    as_json: bool,
    db: str | None,
) -> None:
    """Deny a pending tool call (recorded; nothing runs).

    The call will not run; the model is told why when the thread next runs."""
    if not reason.strip():
        raise Usage("--reason must not be empty: the model and the audit trail are told why")
    _decide(ctx, "deny", thread, call_id, by=by, reason=reason, fingerprint=None,
            as_json=as_json)  # fmt: skip


@click.command("answer")
@thread_argument()
@click.argument("pause_id")
@click.argument("value_json", metavar="VALUE_JSON")
@by_option("who answers (a principal id)")
@reason_option("why")
@graph_option(required=False)
@json_option
@db_option
@click.pass_context
def answer_command(
    ctx: click.Context,
    thread: str,
    pause_id: str,
    value_json: str,
    by: str | None,
    reason: str | None,
    graph_ref: str | None,
    as_json: bool,
    db: str | None,
) -> None:
    """Answer a pending interrupt (recorded; nothing runs).

    VALUE_JSON is what interrupt() returns to the node when the thread next runs."""
    value = parse_json(value_json, "VALUE_JSON")
    graph = _graph(ctx, db, graph_ref)
    pending = {p.id: p for p in graph.pending_pauses(thread)}
    target = pending.get(pause_id)
    if target is None:
        raise NotFound(
            f"thread {thread!r} has no pending pause {pause_id!r}; pending: {sorted(pending)}"
        )
    if getattr(target, "request", None) is not None:
        call = target.request.function_call_id
        raise Usage(
            f"pause {pause_id!r} is the tool confirmation of call {call!r}: answer it with "
            f"{suggest(f'graphflow approve {quote(thread)} {quote(call)}')} (or deny)"
        )
    graph.submit(thread, resume={pause_id: value}, by=by, reason=reason)
    if as_json:
        from graphflow.cli.encode import encode, pause

        # The pause as stored now: answered, by whom and when (the next run applies it)
        now = {p.id: p for p in graph.pending_pauses(thread)}.get(pause_id, target)
        print_json({"pause": pause(now), "answer": encode(value), "by": by, "reason": reason})
        return
    from graphflow.cli.render import compact

    click.echo(
        f"recorded the answer {compact(value, 120)} to pause {pause_id} (node {target.node}, "
        f"asked {compact(target.value, 120)}); nothing ran. The next run of the thread applies "
        f"it: {suggest(f'graphflow resume {quote(thread)} --graph MODULE:ATTR')}"
    )


@click.command("cancel")
@thread_argument()
@reason_option("why (recorded)", required=True)
@by_option("who cancels (a principal id)")
@graph_option(required=False)
@json_option
@db_option
@click.pass_context
def cancel_command(
    ctx: click.Context,
    thread: str,
    reason: str,
    by: str | None,
    graph_ref: str | None,
    as_json: bool,
    db: str | None,
) -> None:
    """End a thread: it runs nothing more.

    The reason and who cancelled are recorded."""
    if not reason.strip():
        raise Usage("--reason must not be empty: the audit trail records why")
    graph = _graph(ctx, db, graph_ref)
    graph.cancel(thread, reason=reason, by=by)
    if as_json:
        print_json({"thread_id": thread, "status": "cancelled", "reason": reason, "by": by})
        return
    click.echo(f"cancelled thread {thread}: {printable(reason)}")


COMMANDS = (approve_command, deny_command, answer_command, cancel_command)
