"""MLproject entry point ``audit``: ``ema audit`` with the arguments MLproject passes."""

import sys

from ema_cli.cli import run

if __name__ == "__main__":
    run(["audit", *sys.argv[1:]])
