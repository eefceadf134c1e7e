"""The ``graphflow`` command line (more commands come with the CLI issue)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def _default_db() -> str:
    return os.environ.get("GRAPHFLOW_DB") or "graphflow.db"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``graphflow`` console script."""
    parser = argparse.ArgumentParser(prog="graphflow", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the approval demo on SQLite")
    demo.add_argument("--db", default=_default_db(), help="SQLite file (default: %(default)s)")
    demo.add_argument("--answer", default="approve", choices=["approve", "deny"])
    args = parser.parse_args(argv)
    if args.command == "demo":
        from graphflow.demo import main as demo_main

        return demo_main(args.db, args.answer)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
