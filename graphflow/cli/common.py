"""What every command shares: exit codes, the one-line error, and the common options.

This module imports click only: ``graphflow --help`` loads it and the command modules, and
nothing of the engine or the store.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import click

OK, ERROR, USAGE, VERIFY_FAILED, NOT_FOUND = 0, 1, 2, 3, 4
"""The exit codes: 0 ok, 1 error, 2 usage, 3 verification failed, 4 not found."""
INTERRUPTED = 130
"""The exit code after a Ctrl-C (128 + SIGINT, as shells report it)."""

DEFAULT_DB = "graphflow.db"

F = TypeVar("F", bound=Callable[..., Any])


class CliError(Exception):
    """A failure the command line reports as one line on stderr with exit ``code``."""

    def __init__(self, message: str, code: int = ERROR):
        super().__init__(message)
        self.code = code


class NotFound(CliError):
    """An unknown thread, pause or call, or a database file that does not exist (exit 4)."""

    def __init__(self, message: str):
        super().__init__(message, NOT_FOUND)


class Usage(CliError):
    """Bad command line input that click does not see, such as ``--input`` that is not
    JSON (exit 2)."""

    def __init__(self, message: str):
        super().__init__(message, USAGE)


def one_line(text: str) -> str:
    """``text`` on one line (newlines and runs of spaces become one space)."""
    return " ".join(text.split())


def printable(text: str) -> str:
    """``text`` with its control characters escaped (``\\x1b``, ``\\n``, bidi overrides):
    text from a node, a model or an approver never drives the terminal it is printed on."""
    from graphflow.arguments import CONTROL

    return CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def fail(error: BaseException | str, code: int = ERROR) -> int:
    """Print one line for ``error`` on stderr (escaped: it may quote a node's error);
    return ``code`` (the exit code of an error)."""
    text = printable(one_line(str(error))) or type(error).__name__
    print(f"graphflow: error: {text}", file=sys.stderr)
    return code


# -- ids and numbers, checked as they are parsed (exit 2 naming the option) ------------------
def checked(name: str, check: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback that checks a value with ``graphflow.arguments.<check>``; a bad one
    is a usage error naming ``name`` (imported at the first value: ``--help`` needs none)."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        from graphflow import arguments
        from graphflow.errors import InvalidArgumentError

        try:
            getattr(arguments, check)(value=value, name=name)
        except InvalidArgumentError as e:
            raise Usage(str(e)) from None
        return value

    return callback


def thread_argument(*, required: bool = True) -> Callable[[F], F]:
    """The ``THREAD`` argument: a thread id (``graphflow.arguments.thread_id``)."""
    return click.argument("thread", required=required, callback=checked("THREAD", "thread_id"))


def by_option(help: str) -> Callable[[F], F]:
    """``--by ID``: who acts, a printable, non-blank id (``graphflow.arguments.identity``)."""
    return click.option("--by", metavar="ID", help=help, callback=checked("--by", "identity"))


def reason_option(help: str, *, required: bool = False) -> Callable[[F], F]:
    """``--reason TEXT``: stored text (``graphflow.arguments.text``: UTF-8, a lone
    surrogate from a terminal that is not UTF-8 is a usage error, as for THREAD and --by)."""
    return click.option("--reason", metavar="TEXT", required=required, help=help,
                        callback=checked("--reason", "text"))  # fmt: skip


class Seconds(click.ParamType[float]):
    """A positive, finite number of seconds (``nan`` and ``inf`` are refused)."""

    name = "seconds"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not (0 < seconds < float("inf")):  # (False for nan)
            self.fail(f"{value!r} is not a positive, finite number of seconds", param, ctx)
        return seconds


# -- --db ----------------------------------------------------------------------------------
def db_option(fn: F) -> F:
    """``--db PATH``, taken by every command (and by ``graphflow`` itself, before the
    command name); see ``database``."""
    return click.option(
        "--db",
        "db",
        metavar="PATH",
        default=None,
        help=f"SQLite database file (default: $GRAPHFLOW_DB, else ./{DEFAULT_DB})",
    )(fn)


def database(ctx: click.Context, given: str | None) -> str:
    """The database path of a command: its own ``--db``, else the one given before the
    command name, else ``$GRAPHFLOW_DB``, else ``graphflow.db`` in the current directory."""
    root = ctx.find_root().params.get("db")
    if given == "" or root == "":
        raise Usage(
            "--db '' names no file: pass the database's path (without --db: $GRAPHFLOW_DB, "
            f"else {DEFAULT_DB})"
        )
    path = given or (str(root) if root else None) or os.environ.get("GRAPHFLOW_DB") or DEFAULT_DB
    ctx.meta["graphflow.db"] = path
    return sqlite_path(path)


def suggest(command: str) -> str:
    """``command``, a ``graphflow ...`` line shown to the user to run next, as the running
    command was given: with its ``--db`` unless that is the one a bare command uses, and its
    ``--graph`` in place of ``MODULE:ATTR``. Thread ids and the like in ``command`` are the
    caller's to quote (``shlex.quote``)."""
    ctx = click.get_current_context(silent=True)
    meta: dict[str, Any] = ctx.meta if ctx is not None else {}
    ref = meta.get("graphflow.graph_ref")
    if ref:
        command = command.replace("--graph MODULE:ATTR", f"--graph {shlex.quote(ref)}")
    db = meta.get("graphflow.db")
    bare = os.environ.get("GRAPHFLOW_DB") or DEFAULT_DB
    if db and os.path.abspath(db) != os.path.abspath(bare):
        command += f" --db {shlex.quote(db)}"
    return command


def sqlite_path(path: str) -> str:
    """``path``, which must be a SQLite file's: a PostgreSQL DSN is refused (exit 1), by
    every command alike."""
    if path.startswith(("postgresql://", "postgres://")):
        raise CliError(
            f"--db {path!r}: PostgreSQL stores are not available in this version; "
            "give a SQLite file path"
        )
    return path


def not_a_directory(path: str) -> str:
    """``path``, which must not be a directory (exit 1 naming it)."""
    if os.path.isdir(path):
        raise CliError(f"database {path!r} is a directory: pass --db with the database file")
    return path


def existing_database(ctx: click.Context, given: str | None) -> str:
    """``database``, which must be a file that exists: commands that read or answer
    threads never create one (exit 4 naming it)."""
    path = database(ctx, given)
    if not os.path.exists(path):
        raise NotFound(
            f"database {path!r} does not exist (nothing was created); pass --db with the "
            "file your graph runs on, or set GRAPHFLOW_DB"
        )
    not_a_directory(path)
    if os.path.getsize(path) == 0:  # (SQLite would take it for a new one, and write it)
        raise CliError(
            f"{path!r} is an empty file, not a graphflow database (wrong path?): nothing "
            "was written; pass --db with the file your graph runs on"
        )
    return path


# -- --json and output ---------------------------------------------------------------------
_json_out: list[Any] = []
"""The stdout of the running ``--json`` command, while everything else printed goes to
stderr (the last one, for a command run in a command, as the tests do)."""


def json_option(fn: F) -> F:
    """``--json``: print one JSON document on stdout instead of text. Only that document:
    while the command runs, whatever else writes to stdout (a print in the user's graph
    module or in a node) goes to stderr."""

    @functools.wraps(fn)
    def command(*args: Any, as_json: bool, **kwargs: Any) -> Any:
        if not as_json:
            return fn(*args, as_json=False, **kwargs)
        with _stdout_for_json() as out:
            _json_out.append(out)
            try:
                with contextlib.redirect_stdout(sys.stderr):
                    return fn(*args, as_json=True, **kwargs)
            finally:
                _json_out.pop()

    return click.option(
        "--json", "as_json", is_flag=True, help="print one JSON document (a stable contract)"
    )(cast(F, command))


@contextlib.contextmanager
def _stdout_for_json() -> Iterator[Any]:
    """The stream the JSON document goes to. In a process whose stdout is a file
    descriptor, that descriptor is pointed at stderr from then on, so that what writes to
    it below Python (``os.write(1, ...)``, a subprocess a node starts, a C extension, an
    ``atexit`` function) cannot mix with the document, which goes to a duplicate of the
    real stdout."""
    out = sys.stdout
    try:
        fd, err_fd = out.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # (click's test runner: no descriptors)
        yield out
        return
    out.flush()
    saved = os.dup(fd)
    os.dup2(err_fd, fd)
    document = open(saved, "w", encoding=out.encoding, errors=out.errors)  # noqa: SIM115
    try:
        yield document
    finally:
        # The descriptor is left on stderr: what runs at exit (an ``atexit`` function of
        # the graph's module, a child process still running) cannot follow the document.
        document.close()


def print_json(document: Any) -> None:
    """Print ``document`` (already made of JSON types: see ``graphflow.cli.encode``) on the
    command's stdout."""
    import json  # (here: ``graphflow --help`` does not import it)

    text = json.dumps(document, ensure_ascii=False, allow_nan=False)
    click.echo(text, file=_json_out[-1] if _json_out else None)


def graph_option(required: bool) -> Callable[[F], F]:
    """``--graph module:attribute``: the ``CompiledGraph`` to run (see ``load.graph``)."""
    help = "the CompiledGraph, as MODULE:ATTRIBUTE (MODULE is imported from the current directory)"
    if not required:
        help = "the graph (MODULE:ATTRIBUTE), to read the state with its schema and types"
    return click.option("--graph", "graph_ref", metavar="MODULE:ATTR", required=required,
                        help=help)  # fmt: skip


def parse_json(text: str, option: str) -> Any:
    """``text`` parsed as JSON (RFC 8259: no ``NaN`` or ``Infinity``, no number too large
    for a float); a usage error (exit 2) naming ``option`` otherwise."""
    import json
    import math

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    def finite(number: str) -> float:
        value = float(number)
        if not math.isfinite(value):
            raise ValueError(f"{number} is too large for a number")
        return value

    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Usage(
            f"{option} is not valid text (it holds a lone surrogate, as a terminal that is "
            "not UTF-8 sends); use UTF-8 text"
        ) from None
    try:
        return json.loads(text, parse_constant=no_constant, parse_float=finite)
    except ValueError as e:
        raise Usage(f"{option} is not JSON: {e}") from None


def json_object(text: str, option: str) -> dict[str, Any]:
    """``parse_json`` of a JSON object."""
    value = parse_json(text, option)
    if not isinstance(value, dict):
        raise Usage(f"{option} must be a JSON object, not {type(value).__name__}")
    return value
