"""Running graphs: ``run``, ``resume``, ``draw`` and ``demo``.

``run`` and ``resume`` run the ``--graph`` on ``--db`` (its own checkpointer is replaced by
a ``SqliteCheckpointer`` on that file). Without ``--json`` they print each step as it
happens (``--debug``: every event) and end with the status and any pauses; with ``--json``
they print one document at the end: the ``RunResult``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

import click

from graphflow.cli.common import (
    INTERRUPTED,
    Usage,
    checked,
    database,
    db_option,
    existing_database,
    graph_option,
    json_option,
    parse_json,
    print_json,
    suggest,
    thread_argument,
)


@contextlib.contextmanager
def _ctrl_c_twice(thread: str) -> Iterator[None]:
    """While a run streams: the first Ctrl-C stops it after the step under way (a node
    running then is let finish, and its step committed), saying so; a second one stops the
    process at once, as ``kill`` would (the thread is left ``running``, its owner gone: the
    next run of it, or a worker, takes it over and runs that step again)."""
    # Not ours to handle: off the main thread, SIGINT ignored, or handled outside Python
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, None):
        yield
        return
    presses = 0

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            click.echo(
                "graphflow: stopping after the step under way (a node running now finishes "
                "first); Ctrl-C again to stop at once",
                err=True,
            )
            raise KeyboardInterrupt
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            again = suggest(f"graphflow resume {shlex.quote(thread)} --graph MODULE:ATTR")
            click.echo(
                f"graphflow: error: interrupted at once: thread {thread!r} is left running, "
                f"its step not committed; `{again}` runs it again",
                err=True,
            )
            sys.stderr.flush()
        os._exit(INTERRUPTED)

    before = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _execute(
    graph: Any, value: Any, thread: str, principal: str | None, debug: bool, as_json: bool
) -> None:
    """Run ``graph`` on ``thread`` and print what happens."""
    from graphflow.cli import render
    from graphflow.cli.encode import encode

    mode = "debug" if debug and not as_json else "updates"
    last = None
    with _ctrl_c_twice(thread):  # (with --json too: a Ctrl-C lets the step under way end)
        for event in graph.stream(value, thread_id=thread, principal=principal, mode=mode):
            line = None if as_json else render.event(event)
            if line is not None:
                click.echo(line)
            last = event
    if as_json:
        print_json(encode(_result(graph, thread, last)))
        return
    if last is None or last.type == "done":
        state = render.compact(last.data if last is not None else None, render.WIDTH)
        click.echo(f"thread {thread}: done; state {state}")
        return
    pauses = list(last.data)
    plural = "answer" if len(pauses) == 1 else f"{len(pauses)} answers"
    click.echo(f"thread {thread}: paused, waiting for {plural}")
    for p in pauses:
        for line in render.pause(p):
            click.echo(f"  {line}")


def _result(graph: Any, thread: str, last: Any) -> Any:
    """The ``RunResult`` of a run that streamed to its end (``last``: its last event), as
    ``invoke`` returns it: read back from the thread it left."""
    from graphflow.types import RunResult

    snap = graph.get_state(thread)
    if last is None or last.type == "done":
        return RunResult("done", snap.values, [], thread, snap.checkpoint_id)
    pauses = graph.pending_pauses(thread)
    return RunResult("paused", snap.values, pauses, thread, snap.checkpoint_id)


_principal = click.option("--principal", metavar="ID", help="who the run acts for")
_debug = click.option(
    "--debug", is_flag=True, help="print every event (tasks, checkpoints), not only updates"
)


@click.command("run")
@graph_option(required=True)
@click.option(
    "--thread",
    metavar="ID",
    required=True,
    help="the thread to run or continue",
    callback=checked("--thread", "thread_id"),
)
@click.option(
    "--input",
    "input_json",
    metavar="JSON",
    required=True,
    help="the input, a JSON object (null: continue the thread from its last checkpoint)",
)
@_principal
@_debug
@json_option
@db_option
@click.pass_context
def run_command(
    ctx: click.Context,
    graph_ref: str,
    thread: str,
    input_json: str,
    principal: str | None,
    debug: bool,
    as_json: bool,
    db: str | None,
) -> None:
    """Run or continue a thread, printing each step.

    Ends with the status and any pauses (with --json: the RunResult)."""
    value = parse_json(input_json, "--input")
    if value is not None and not isinstance(value, dict):
        raise Usage(f"--input must be a JSON object or null, not {type(value).__name__}")
    from graphflow.cli import load

    compiled = load.graph(graph_ref)  # before the database file is made
    path = database(ctx, db)
    _execute(load.on_store(compiled, path), value, thread, principal, debug, as_json)


@click.command("resume")
@thread_argument()
@graph_option(required=True)
@_principal
@_debug
@json_option
@db_option
@click.pass_context
def resume_command(
    ctx: click.Context,
    thread: str,
    graph_ref: str,
    principal: str | None,
    debug: bool,
    as_json: bool,
    db: str | None,
) -> None:
    """Resume a thread now.

    Applies its recorded answers and runs until it ends or pauses again."""
    from graphflow.cli import load

    path = existing_database(ctx, db)
    _execute(load.on_store(load.graph(graph_ref), path), None, thread, principal, debug, as_json)


@click.command("draw")
@graph_option(required=True)
@json_option
@db_option
def draw_command(graph_ref: str, as_json: bool, db: str | None) -> None:
    """Print the graph as a Mermaid flowchart.

    --db is accepted and not used."""
    from graphflow.cli import load

    with contextlib.redirect_stdout(sys.stderr):  # (what the module prints is no diagram)
        graph = load.graph(graph_ref)
    text = graph.draw_mermaid()
    if as_json:
        print_json({"name": graph.name, "mermaid": text})
        return
    click.echo(text.rstrip("\n"))


def _ask() -> str:
    return str(
        click.prompt(
            "Approve the refund? (approve/deny)",
            type=click.Choice(["approve", "deny"]),
            default="approve",
            show_choices=False,  # (the question names them)
        )
    )


@click.command("demo")
@click.option("--interactive", is_flag=True, help="ask for the answer on the terminal")
@click.option(
    "--answer",
    type=click.Choice(["approve", "deny"]),
    default=None,
    help="the human's answer (default: approve)",
)
@db_option
@click.pass_context
def demo_command(ctx: click.Context, interactive: bool, answer: str | None, db: str | None) -> None:
    """Run the approval demo on SQLite.

    A refund pauses for finance, is approved by another process, resumed by a worker
    process, then audited and verified."""
    if interactive and answer is not None:
        raise Usage("--interactive asks for the answer: give it or --answer, not both")
    from graphflow import demo

    path = database(ctx, db)
    code = demo.main(path, _ask if interactive else answer or "approve")
    if code:
        ctx.exit(code)


COMMANDS = (run_command, resume_command, draw_command, demo_command)
