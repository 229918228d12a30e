"""MLproject entry point ``calibrate``: ``ema calibrate`` with the arguments MLproject passes."""

import sys

from ema_cli.cli import run

if __name__ == "__main__":
    run(["calibrate", *sys.argv[1:]])
