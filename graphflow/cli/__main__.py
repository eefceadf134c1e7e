"""``python -m graphflow.cli``: the same as the ``graphflow`` console script."""

import sys

from graphflow.cli import main

if __name__ == "__main__":
    sys.exit(main())
