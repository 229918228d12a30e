"""MLproject entry point ``train``: ``ema train`` with the arguments MLproject passes."""

import sys

from ema_cli.cli import run

if __name__ == "__main__":
    run(["train", *sys.argv[1:]])
