"""MLproject entry point ``grid``: ``ema grid`` with the arguments MLproject passes."""

import sys

from ema_cli.cli import run

if __name__ == "__main__":
    run(["grid", *sys.argv[1:]])
