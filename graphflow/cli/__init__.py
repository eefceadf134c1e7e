"""The ``graphflow`` command line (click): run, inspect and answer durable graph workflows.

Commands: ``demo``, ``run``, ``resume``, ``draw`` (``running``); ``threads``, ``show``,
``history``, ``pauses`` (``threads``); ``approve``, ``deny``, ``answer``, ``cancel``
(``answers``); ``policy check`` (``policy``). The contract (options, JSON shapes, exit
codes: 0 ok, 1 error, 2 usage, 3 verification failed, 4 not found) is in the README's
"Command line"; the JSON encoder is ``encode``. Each command imports what it needs when it
runs, so ``graphflow --help`` loads click and this package only.
"""

from graphflow.cli.app import app, main
from graphflow.cli.common import fail

__all__ = ["app", "fail", "main"]
