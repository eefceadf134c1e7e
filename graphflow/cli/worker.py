"""``graphflow worker``: resume the runnable threads of ``--graph`` on ``--db``.

``--once`` resumes what is runnable now and exits; without it the worker polls until
SIGINT or SIGTERM. Either way a signal finishes the current step of each run in flight,
releases its leases and exits 0 (with ``--json``, after printing what it did). ``--json``
prints one JSON list of ``WorkerResult`` objects (``{thread_id, status, error, graph_name,
reason}``), once the worker stops. Without ``--json``, a table (``--once``) or a line per
thread. The database must exist (exit 4 otherwise, and no file is made).
"""

from __future__ import annotations

from typing import Any

import click

from graphflow.cli.common import Seconds, db_option, existing_database, json_option, print_json


def _line(r: Any) -> str:
    why = f" ({r.reason})" if r.reason else ""
    error = f": {r.error}" if r.error else ""
    return f"thread {r.thread_id}{why}: {r.status}{error}"


@click.command("worker")
@click.option(
    "--graph",
    "graph_refs",
    metavar="MODULE:ATTR",
    required=True,
    multiple=True,
    help="a CompiledGraph whose threads to resume, as MODULE:ATTRIBUTE (repeatable)",
)
@click.option("--once", is_flag=True, help="resume what is runnable now, then exit")
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="threads resumed at once",
)
@click.option(
    "--lease-seconds",
    type=Seconds(),
    default=None,
    help="the lease TTL of the threads it runs (default: each graph's)",
)
@click.option(
    "--poll-interval",
    type=Seconds(),
    default=1.0,
    show_default=True,
    help="seconds to wait when nothing is runnable",
)
@json_option
@db_option
@click.pass_context
def worker_command(
    ctx: click.Context,
    graph_refs: tuple[str, ...],
    once: bool,
    concurrency: int,
    lease_seconds: float | None,
    poll_interval: float,
    as_json: bool,
    db: str | None,
) -> None:
    """Resume answered, deferred and abandoned threads.

    With --once, resume what is runnable now and exit; otherwise run until SIGINT/SIGTERM
    (the current step of each run is finished and its lease released; exit 0)."""
    from graphflow.cli import load

    compiled = [load.graph(ref) for ref in graph_refs]  # before the database is looked at
    path = existing_database(ctx, db)
    from graphflow.compiled import CompiledGraph
    from graphflow.worker import Worker, WorkerResult, graph_label

    store = load.store(path)
    graphs = [CompiledGraph(g.spec, store) for g in compiled]  # one store for all

    done: list[WorkerResult] = []

    def progress(r: WorkerResult) -> None:
        if as_json:
            done.append(r)  # (one document, printed when the worker stops)
        else:
            click.echo(_line(r))

    worker = Worker(
        graphs,
        concurrency=concurrency,
        lease_seconds=lease_seconds,
        poll_interval=poll_interval,
        on_result=None if once else progress,
    )
    if not once:
        names = ", ".join(graph_label(g.name) for g in graphs)
        click.echo(
            f"graphflow worker: resuming the threads of {names} on {path!r}, {concurrency} "
            "at a time; Ctrl-C or SIGTERM stops it"
            + (" (then prints what it did, as JSON)" if as_json else ""),
            err=True,
        )
        worker.run_forever()
        if as_json:
            print_json([r.to_dict() for r in done])
        return
    import functools

    import anyio

    results = anyio.run(functools.partial(worker.run_once, handle_signals=True))
    if as_json:
        print_json([r.to_dict() for r in results])
        return
    if not results:
        click.echo("nothing runnable")
        return
    from graphflow.cli.render import table

    rows = [(r.thread_id, r.status, r.reason or "-", r.error or "") for r in results]
    for line in table(("THREAD", "STATUS", "REASON", "ERROR"), rows):
        click.echo(line)


COMMANDS = (worker_command,)
