"""Reading threads: ``threads``, ``show``, ``history`` and ``pauses``.

None of them writes: the database must exist (exit 4 otherwise, and no file is made) and
an unknown thread is exit 4. ``threads`` reads the store's thread index directly, without
the engine, so that listing stays fast.
"""

from __future__ import annotations

from typing import Any

import click

from graphflow.cli.common import (
    NotFound,
    db_option,
    existing_database,
    graph_option,
    json_option,
    print_json,
    suggest,
    thread_argument,
)

THREAD_STATUSES = ("running", "paused", "done", "failed", "cancelled", "frozen")
"""The statuses of ``checkpoints.models.ThreadStatus`` (a test keeps them equal), spelled
out so that ``graphflow --help`` imports no store code."""


def _no_thread(thread: str, db: str) -> NotFound:
    return NotFound(
        f"no thread {thread!r} in database {db!r}; `{suggest('graphflow threads')}` lists them"
    )


def _cursor(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--after``: a cursor of the thread-id order (text a thread id can be)."""
    if value is not None:
        from checkpoints.base import check_listing

        bad = check_listing(None, None, value)
        if bad is not None:
            raise click.BadParameter(str(bad), ctx, param)
    return value


@click.command("threads")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(THREAD_STATUSES),
    help="only threads of this status (repeatable)",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    metavar="N",
    help="a page of at most N threads, in thread-id order; ends with the next page's cursor",
)
@click.option(
    "--after",
    metavar="CURSOR",
    callback=_cursor,
    help="the threads after CURSOR in thread-id order (the cursor a page printed: its last id)",
)
@json_option
@db_option
@click.pass_context
def threads_command(
    ctx: click.Context,
    statuses: tuple[str, ...],
    limit: int | None,
    after: str | None,
    as_json: bool,
    db: str | None,
) -> None:
    """List threads, most recently updated first.

    Shows each thread's status, pending pauses and last update. With --limit or --after,
    a page in thread-id order instead (an order that stays put while threads change, so
    that paging shows each thread once), then the cursor of the next page to pass as
    --after (--json: {"threads": [...], "next_cursor": CURSOR or null})."""
    from graphflow.cli import load

    path = existing_database(ctx, db)
    store = load.store(path)
    paged = limit is not None or after is not None
    next_cursor: str | None = None
    if paged:
        import functools

        # One more than a page: whether there is a next one. Of several statuses, the pages
        # of each, merged in thread-id order.
        page = functools.partial(
            store.list_threads, limit=None if limit is None else limit + 1, after=after
        )
        found = [t for s in dict.fromkeys(statuses or (None,)) for t in load.call(page, s)]
        found.sort(key=lambda t: t.thread_id)
        if limit is not None and len(found) > limit:
            found = found[:limit]
            next_cursor = found[-1].thread_id
    elif not statuses:
        found = load.call(store.list_threads, None)
    else:
        found = [t for s in dict.fromkeys(statuses) for t in load.call(store.list_threads, s)]
        found.sort(key=lambda t: t.updated_ts, reverse=True)
    if as_json:
        from graphflow.cli.encode import encode

        listed = encode(found)
        print_json({"threads": listed, "next_cursor": next_cursor} if paged else listed)
        return
    if not found:
        where = f" with status {', '.join(statuses)}" if statuses else ""
        click.echo(f"no threads{where}" + (f" after {after!r}" if after is not None else ""))
        return
    from graphflow.cli.render import table, when

    rows = [(t.thread_id, t.status, str(t.pending_pauses), when(t.updated_at)) for t in found]
    for line in table(("THREAD", "STATUS", "PENDING PAUSES", "UPDATED"), rows):
        click.echo(line)
    if next_cursor is not None:
        import shlex

        click.echo(f"next page: --after {shlex.quote(next_cursor)}")


def _graph(ctx: click.Context, db: str | None, graph_ref: str | None) -> tuple[Any, str]:
    from graphflow.cli import load

    path = existing_database(ctx, db)
    return load.store_graph(path, graph_ref), path


@click.command("show")
@thread_argument()
@click.option("--subgraphs", is_flag=True, help="also show the state of subgraph tasks")
@graph_option(required=False)
@json_option
@db_option
@click.pass_context
def show_command(
    ctx: click.Context,
    thread: str,
    subgraphs: bool,
    graph_ref: str | None,
    as_json: bool,
    db: str | None,
) -> None:
    """Show a thread's state.

    Its values, next nodes, tasks (with status and pauses) and pauses."""
    graph, path = _graph(ctx, db, graph_ref)
    snap = graph.get_state(thread, subgraphs=subgraphs)
    if snap is None:
        raise _no_thread(thread, path)
    if as_json:
        from graphflow.cli.encode import encode

        print_json(encode(snap))
        return
    from graphflow.cli.render import snapshot

    click.echo(f"thread {thread}")
    for line in snapshot(snap):
        click.echo(line)


@click.command("history")
@thread_argument()
@click.option("--limit", type=click.IntRange(min=1), help="only the newest N snapshots")
@graph_option(required=False)
@json_option
@db_option
@click.pass_context
def history_command(
    ctx: click.Context,
    thread: str,
    limit: int | None,
    graph_ref: str | None,
    as_json: bool,
    db: str | None,
) -> None:
    """Show a thread's snapshots, newest first."""
    graph, path = _graph(ctx, db, graph_ref)
    snaps = graph.get_state_history(thread, limit=limit)
    if not snaps:
        raise _no_thread(thread, path)
    if as_json:
        from graphflow.cli.encode import encode

        print_json(encode(snaps))
        return
    from graphflow.cli.render import compact, table, when

    rows = [
        (
            str(s.step),
            s.checkpoint_id,
            str(s.metadata.get("source", "?")),
            ", ".join(s.next) or "-",
            str(len(s.pauses)),
            when(s.created_at),
            compact(s.values, 60),
        )
        for s in snaps
    ]
    headers = ("STEP", "CHECKPOINT", "SOURCE", "NEXT", "PAUSES", "CREATED", "VALUES")
    for line in table(headers, rows):
        click.echo(line)


@click.command("pauses")
@thread_argument(required=False)
@graph_option(required=False)
@json_option
@db_option
@click.pass_context
def pauses_command(
    ctx: click.Context, thread: str | None, graph_ref: str | None, as_json: bool, db: str | None
) -> None:
    """List pending pauses with their full payload.

    Those of THREAD, or of every paused thread; a tool confirmation shows every field of
    its request."""
    graph, _ = _graph(ctx, db, graph_ref)
    if thread is not None:
        found = list(graph.pending_pauses(thread))
    else:
        found = [p for t in graph.list_threads(status="paused") for p in graph.pending_pauses(
            t.thread_id)]  # fmt: skip
    if as_json:
        from graphflow.cli.encode import pause

        print_json([pause(p) for p in found])
        return
    if not found:
        click.echo(f"thread {thread} has no pending pause" if thread else "no pending pauses")
        return
    from graphflow.cli.render import pause as render_pause

    for i, p in enumerate(found):
        if i:
            click.echo("")
        for line in render_pause(p):
            click.echo(line)


COMMANDS = (threads_command, show_command, history_command, pauses_command)
