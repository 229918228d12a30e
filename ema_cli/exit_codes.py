"""The exit code of a failed ``ema`` command: one per kind of error (:mod:`ema.errors`), so that scripts act on it.

A script retries on 4 and 7 (the model serves again, the other writer is done), installs the
extra on 5, and stops on 3: the same input is refused again. The kinds are named here, not
imported, so that ``ema --help`` lists the codes without importing the workbench;
``tests/cli/test_exit_codes.py`` holds each name to its class in :mod:`ema.errors`.
"""

from __future__ import annotations

import signal

#: The module that defines the kinds.
ERRORS_MODULE = "ema.errors"
#: Click's exit code for an option or argument it refused (``click.UsageError``).
USAGE_ERROR = 2
#: The exit code of a command stopped by SIGTERM, which it unwinds through (``ema_cli.cli``): 128 + 15.
TERMINATED = 128 + signal.SIGTERM
#: Kind of error (a class of ema.errors, matched along the raised error's bases) -> exit code and what it means.
EXIT_CODES = {
    "EMAError": (1, "failed as the message explains"),
    "InputError": (3, "an input was refused: fix it; unchanged, it fails again"),
    "ModelAccessError": (4, "the model or tracking server could not be reached, or failed or timed out: try again"),
    "MissingDependencyError": (5, "an optional extra is missing: run the pip command the message gives"),
    "StoreError": (6, "the tracking store cannot be used as it is: corrupt, unsupported URI, artifact gone"),
    "StoreBusyError": (7, "the tracking store stayed busy, or another process held a cache entry: try again"),
    "TimeLimitExceeded": (124, "the command ran past --timeout"),
}


def exit_code(exc: BaseException) -> int:
    """The exit code of ``exc``'s kind: that of its nearest class in :mod:`ema.errors` (itself or a base), else 1.

    ``ClaimTimeout`` (``ema.tracking.single_flight``) exits as its base ``StoreBusyError``: 7.
    """
    for kind in type(exc).__mro__:
        if kind.__module__ == ERRORS_MODULE and kind.__name__ in EXIT_CODES:
            return EXIT_CODES[kind.__name__][0]
    return 1


def epilog() -> str:
    """The exit codes as ``ema --help`` lists them, one per line (``\\b`` keeps click from joining the lines)."""
    codes = [(0, "done", ""), (USAGE_ERROR, "an option or argument was refused", "")]
    codes.append((TERMINATED, "stopped by SIGTERM (kill): its runs end FAILED; run it again", ""))
    codes += [(code, meaning, f" ({name})") for name, (code, meaning) in EXIT_CODES.items()]
    return "\b\nExit codes:\n" + "\n".join(f"  {code:>3}  {meaning}{kind}" for code, meaning, kind in sorted(codes))
