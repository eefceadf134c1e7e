"""The ``graphflow`` command group: its global options, and how any failure becomes one line.

Every failure ends here as one line on stderr, never a traceback (``graphflow: error:
...``), with the exit code of its kind: 1 error, 2 usage, 4 not found (``common``). Usage
errors that click finds are printed on one line as well, instead of click's usage block.
"""

from __future__ import annotations

import errno
import re
import shlex
import sys
from collections.abc import Sequence
from typing import Any

import click

from graphflow.cli import answers, evidence, policy, running, threads, worker
from graphflow.cli.common import (
    ERROR,
    INTERRUPTED,
    NOT_FOUND,
    OK,
    USAGE,
    CliError,
    db_option,
    fail,
    one_line,
    suggest,
)


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    import graphflow

    click.echo(f"graphflow {graphflow.__version__}")
    ctx.exit(OK)


def _failure(ctx: click.Context, error: Exception) -> CliError:
    """The ``CliError`` of an error raised by graphflow, the store or a bug (any other
    exception: still one line, with its type)."""
    from checkpoints.errors import RESTORE, CheckpointError, CorruptCheckpointError
    from graphflow.errors import GraphflowError, ThreadNotFoundError, UnknownPauseError

    if isinstance(error, ThreadNotFoundError):
        db = ctx.meta.get("graphflow.db")
        return CliError(
            f"no thread {error.thread_id!r} in database {db!r}; `{suggest('graphflow threads')}`"
            " lists them",
            NOT_FOUND,
        )
    if isinstance(error, UnknownPauseError):
        return CliError(str(error), NOT_FOUND)
    hint = _command_hint(error)
    if hint is not None:
        return CliError(hint)
    if (
        isinstance(error, CorruptCheckpointError)
        and ctx.meta.get("graphflow.store_view")
        and RESTORE not in str(error)  # (damage: the graph's code would not read it either)
    ):
        return CliError(
            f"{error}; this was read without the graph's code: if the state holds types of "
            "the graph's own, pass --graph MODULE:ATTR"
        )
    if isinstance(error, GraphflowError | CheckpointError):
        return CliError(str(error))
    return CliError(f"{type(error).__name__}: {error}")


def _command_hint(error: Exception) -> str | None:
    """The message of an error whose own says what to call in Python, saying which command
    to run instead (None: its own message serves)."""
    from graphflow.errors import NodeError, ThreadFrozenError, ThreadPausedError
    from graphflow.evidence import EvidenceError

    if isinstance(error, EvidenceError) and "run verify" in str(error):
        return re.sub(r"run verify(\(\))?", "run `graphflow verify`", str(error))
    if isinstance(error, ThreadFrozenError):
        why = f" ({error.reason})" if error.reason else ""
        return (
            f"thread {error.thread_id!r} is frozen{why}: nothing runs and no decision applies "
            f"until `{suggest(f'graphflow unfreeze {shlex.quote(error.thread_id)} --reason TEXT')}`"
        )
    if isinstance(error, ThreadPausedError):
        t, q = error.thread_id, shlex.quote(error.thread_id)
        return (
            f"thread {t!r} is paused at {list(error.pause_ids)}: "
            f"`{suggest(f'graphflow pauses {q}')}` shows them; answer them (`graphflow "
            "approve`, `deny`, `answer`) and run "
            f"`{suggest(f'graphflow resume {q} --graph MODULE:ATTR')}`, or "
            f"`{suggest(f'graphflow cancel {q} --reason TEXT')}`"
        )
    if isinstance(error, NodeError) and error.thread_id:
        t = error.thread_id
        again = suggest(f"graphflow resume {shlex.quote(t)} --graph MODULE:ATTR")
        return (
            f"node {error.node!r} raised {type(error.error).__name__}: {error.error} in "
            f"thread {t!r}; fix the cause and run `{again}` to retry it alone"
        )
    return None


class _Graphflow(click.Group):
    """The root group; ``main`` returns (or exits with) the exit code of the command."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; turn whatever it raises into a ``CliError`` (click's own
        exceptions and a closed output pipe go on to click)."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, CliError):
            raise
        except click.exceptions.Abort as e:  # a prompt that got no answer, or a Ctrl-C
            if _by_ctrl_c(e):
                raise CliError("interrupted", INTERRUPTED) from None
            raise CliError("aborted: no answer was given") from None
        except KeyboardInterrupt:
            raise CliError("interrupted", INTERRUPTED) from None
        except OSError as e:
            if e.errno == errno.EPIPE:  # the reader of stdout went away: click exits quietly
                raise
            raise CliError(_about_db(ctx, e)) from e
        except Exception as e:
            if _is_sqlite_error(e):
                raise CliError(_about_db(ctx, e)) from e
            raise _failure(ctx, e) from e

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> int:
        """Run the command line; with ``standalone_mode`` (the console script) exit with the
        code, else return it."""
        try:
            result = super().main(
                args, prog_name or self.name, complete_var, standalone_mode=False, **extra
            )
            code = result if isinstance(result, int) and not isinstance(result, bool) else OK
        except CliError as e:
            code = fail(e, e.code)
        except click.exceptions.NoArgsIsHelpError as e:  # no command: the help, as click does
            e.show()
            code = USAGE
        except click.exceptions.UsageError as e:
            code = fail(_usage_line(e), USAGE)
        except click.exceptions.ClickException as e:  # such as a file option that cannot open
            code = fail(e.format_message(), e.exit_code or ERROR)
        except click.exceptions.Abort as e:  # Ctrl-C or end of input while click parsed
            code = fail("interrupted", INTERRUPTED) if _by_ctrl_c(e) else fail("aborted")
        if standalone_mode:
            sys.exit(code)
        return code


def _by_ctrl_c(abort: click.exceptions.Abort) -> bool:
    """Whether click's ``Abort`` stands for a Ctrl-C (click raises it ``from None`` at its
    prompts: the ``KeyboardInterrupt`` is its context, an ``EOFError`` for end of input)."""
    return isinstance(abort.__cause__ or abort.__context__, KeyboardInterrupt)


def _is_sqlite_error(error: Exception) -> bool:
    """Whether ``error`` is an ``sqlite3.Error``, looked up rather than imported: one exists
    only once sqlite3 was imported, and ``graphflow --help`` does not import it."""
    sqlite3 = sys.modules.get("sqlite3")
    return sqlite3 is not None and isinstance(error, sqlite3.Error)


def _about_db(ctx: click.Context, error: BaseException) -> str:
    db = ctx.meta.get("graphflow.db")
    text = f"{type(error).__name__}: {error}" if not str(error) else str(error)
    return f"cannot use database {db!r}: {text}" if db else text


def _usage_line(e: click.exceptions.UsageError) -> str:
    """Click's usage error as one line, naming the command and where its help is."""
    message = one_line(e.format_message()).rstrip(".")
    if e.ctx is None:
        return message
    return f"{message} (see '{e.ctx.command_path} --help')"


@click.group(
    "graphflow",
    cls=_Graphflow,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_version,
    help="Show the version and exit.",
)
@db_option
def app(db: str | None) -> None:
    """Run and inspect durable graph workflows.

    Every command takes --db (before or after the command name); every command that
    prints data takes --json. Exit codes: 0 ok, 1 error, 2 usage, 3 verification failed,
    4 not found.
    """


for _command in (
    *running.COMMANDS,
    *threads.COMMANDS,
    *answers.COMMANDS,
    *evidence.COMMANDS,
    policy.policy,
    *worker.COMMANDS,
):
    app.add_command(_command)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``graphflow`` console script: run ``argv`` (default
    ``sys.argv[1:]``) and return the exit code."""
    return app.main(argv, standalone_mode=False)
