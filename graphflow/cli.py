"""The ``graphflow`` command line: run and inspect durable graph workflows.

Errors are one line on stderr, never a traceback: exit 1 for an error, 2 for usage.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from collections.abc import Sequence

from checkpoints.errors import CheckpointError
from graphflow.auth.cli_check import add_policy_parser, run_policy_check
from graphflow.errors import GraphflowError


def _default_db() -> str:
    return os.environ.get("GRAPHFLOW_DB") or "graphflow.db"


def _version() -> str:
    import graphflow

    return str(graphflow.__version__)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``graphflow`` console script."""
    parser = argparse.ArgumentParser(prog="graphflow", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"graphflow {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the approval demo on SQLite")
    demo.add_argument("--db", default=_default_db(), help="SQLite file (default: %(default)s)")
    demo.add_argument("--answer", default="approve", choices=["approve", "deny"])
    add_policy_parser(sub)
    args = parser.parse_args(argv)
    try:
        if args.command == "policy":
            return run_policy_check(args)
        if args.command == "demo":
            from graphflow.demo import main as demo_main

            return demo_main(args.db, args.answer)
    except (GraphflowError, CheckpointError) as e:
        return fail(e)
    except (sqlite3.Error, OSError) as e:  # a store that cannot be opened, named by its path
        return fail(f"cannot use database {getattr(args, 'db', None)!r}: {e}")
    return 2  # pragma: no cover - argparse rejects unknown commands


def fail(error: BaseException | str) -> int:
    """Print one line for ``error`` on stderr; return the exit code of an error (1)."""
    text = " ".join(str(error).split()) or type(error).__name__
    print(f"graphflow: error: {text}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
