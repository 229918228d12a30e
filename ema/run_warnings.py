"""Warnings an audit's record must carry, though they arise deep below it: logged where they arise, gathered here.

The oracle learns that a table's columns go by position, that declared logits look like
probabilities, or that a model was logged for another environment; the table reader leaves
text columns out; a scikit-learn clone loses the target's settings; a cache entry is foreign.
Each is logged where it is found, with ``extra=FOR_THE_RECORD``, and the audit in progress (in
this thread's context) lists it in its ``ema.warnings`` tag and report, where ``--strict`` sees
it too. Operational notes (a lease renewed late, a transport switched) are logged without it.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from contextlib import contextmanager

#: Pass as ``extra=`` to a logging call whose warning belongs in the record of the audit in progress.
FOR_THE_RECORD = {"ema_for_the_record": True}

_gathered: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("ema_run_warnings", default=None)


class _ToTheRecord(logging.Handler):
    """Hands each warning marked :data:`FOR_THE_RECORD` to the list being gathered, once.

    Where no other handler would show a record (no logging configured), it shows it as Python's
    last resort would have, had this handler not been there.
    """

    def emit(self, record: logging.LogRecord) -> None:
        gathered = _gathered.get()
        if gathered is not None and getattr(record, "ema_for_the_record", False):
            message = record.getMessage()
            if message not in gathered:
                gathered.append(message)
        if not _shown_elsewhere(record) and logging.lastResort is not None:
            if record.levelno >= logging.lastResort.level:
                logging.lastResort.handle(record)


def _shown_elsewhere(record: logging.LogRecord) -> bool:
    """Whether a handler other than this module's takes ``record`` on its way up the logger tree."""
    logger: logging.Logger | None = logging.getLogger(record.name)
    while logger is not None:
        if any(handler is not _HANDLER for handler in logger.handlers):
            return True
        logger = logger.parent if logger.propagate else None
    return False


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
