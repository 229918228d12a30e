"""Warnings an audit's record must carry, though they arise deep below it: logged where they arise, gathered here.

The oracle learns that a table's columns go by position, that declared logits look like
probabilities, or that a model was logged for another environment; the table reader leaves
text columns out; a scikit-learn clone loses the target's settings; a cache entry is foreign.
Each is logged where it is found, with ``extra=FOR_THE_RECORD``, and the audit in progress (in
this thread's context) lists it in its ``ema.warnings`` tag and report, where ``--strict`` sees
it too. Operational notes (a lease renewed late, a transport switched) are logged without it.

Where no logging is configured, this module's handler shows each warning on stderr as it
arises (Python's last resort); a command that lists an audit's warnings at its end leaves out
those :func:`shown_run_warnings` saw on the screen already, so that each is printed once.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: Pass as ``extra=`` to a logging call whose warning belongs in the record of the audit in progress.
FOR_THE_RECORD = {"ema_for_the_record": True}

_gathered: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("ema_run_warnings", default=None)
_shown: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("ema_shown_warnings", default=None)


class _ToTheRecord(logging.Handler):
    """Hands each warning marked :data:`FOR_THE_RECORD` to the list being gathered, once.

    Where no other handler would show a record (no logging configured), it shows it as Python's
    last resort would have, had this handler not been there. Either way, a record that reaches
    the screen is noted for :func:`shown_run_warnings`.
    """

    def emit(self, record: logging.LogRecord) -> None:
        gathered = _gathered.get()
        if gathered is not None and getattr(record, "ema_for_the_record", False):
            message = record.getMessage()
            if message not in gathered:
                gathered.append(message)
        others = _other_handlers(record)
        if not others and logging.lastResort is not None:
            if record.levelno >= logging.lastResort.level:
                logging.lastResort.handle(record)
                _note_shown(record)
        elif any(_on_console(handler, record) for handler in others):
            _note_shown(record)


def _other_handlers(record: logging.LogRecord) -> list[logging.Handler]:
    """The handlers other than this module's that take ``record`` on its way up the logger tree."""
    found = []
    logger: logging.Logger | None = logging.getLogger(record.name)
    while logger is not None:
        found += [handler for handler in logger.handlers if handler is not _HANDLER]
        logger = logger.parent if logger.propagate else None
    return found


def _on_console(handler: logging.Handler, record: logging.LogRecord) -> bool:
    """Whether ``handler`` shows ``record`` on stderr or stdout (``logging.basicConfig``'s handler, which importing
    ``mlflow.pytorch`` installs); a file or another destination is no screen."""
    stream = getattr(handler, "stream", None)
    return (
        isinstance(handler, logging.StreamHandler)
        and stream in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
        and record.levelno >= handler.level
    )


def _note_shown(record: logging.LogRecord) -> None:
    """Note that ``record`` is on the screen, for :func:`shown_run_warnings`."""
    shown = _shown.get()
    if shown is not None:
        shown.add(record.getMessage())


_HANDLER = _ToTheRecord(logging.WARNING)


@contextmanager
def gather_run_warnings() -> Iterator[list[str]]:
    """The warnings marked :data:`FOR_THE_RECORD` logged inside the block, in order, each once.

    The ``ema`` loggers pass warnings on meanwhile even where another library has raised the
    root level (importing ``mlflow.pytorch`` sets it to ERROR), so none is lost to the record.
    """
    logger = logging.getLogger("ema")
    gathered: list[str] = []
    token, level, outermost = _gathered.set(gathered), logger.level, _HANDLER not in logger.handlers
    if logger.getEffectiveLevel() > logging.WARNING:
        logger.setLevel(logging.WARNING)
    if outermost:
        logger.addHandler(_HANDLER)
    try:
        yield gathered
    finally:
        _gathered.reset(token)
        logger.setLevel(level)
        if outermost:
            logger.removeHandler(_HANDLER)


@contextmanager
def shown_run_warnings() -> Iterator[set[str]]:
    """The messages of the warnings this module's handler showed on stderr inside the block.

    A command that prints an audit's warnings after its result (``ema audit``) leaves these out:
    they were on the screen already, as they arose. Which warnings the audit records (its
    ``ema.warnings`` tag, its report, ``--strict``) does not change.
    """
    shown: set[str] = set()
    token = _shown.set(shown)
    try:
        yield shown
    finally:
        _shown.reset(token)
