"""MLproject entry point ``unlearn``: ``ema unlearn`` with the arguments MLproject passes."""

import sys

from ema_cli.cli import run

if __name__ == "__main__":
    run(["unlearn", *sys.argv[1:]])
