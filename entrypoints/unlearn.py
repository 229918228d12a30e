"""MLproject entry point ``unlearn``: ``ema unlearn`` with the arguments MLproject passes."""

import sys

from ema_cli.cli import main

if __name__ == "__main__":
    main(["unlearn", *sys.argv[1:]], prog_name="ema")
