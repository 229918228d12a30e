"""MLproject entry point ``grid``: ``ema grid`` with the arguments MLproject passes."""

import sys

from ema_cli.cli import main

if __name__ == "__main__":
    main(["grid", *sys.argv[1:]], prog_name="ema")
