"""MLproject entry point ``main``: ``ema demo`` with the arguments MLproject passes."""

import sys

from ema_cli.cli import run

if __name__ == "__main__":
    run(["demo", *sys.argv[1:]])
