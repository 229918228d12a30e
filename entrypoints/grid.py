"""MLproject entry point ``grid``: ``ema grid paper`` (the paper's grids) with the arguments MLproject passes."""

import sys

from ema_cli.cli import run

if __name__ == "__main__":
    run(["grid", "paper", *sys.argv[1:]])
