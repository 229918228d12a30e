"""What a long step shows on stderr while it runs (``--progress``, the default): an oracle scoring a set (samples),
a scikit-learn forest growing (trees, :mod:`ema.training.forest_growth`). Nothing for a step done within
:data:`SHOW_AFTER` seconds; on a terminal, a bar counting its units, as torch training's bars count epochs; elsewhere
(a log file, CI), a line after :data:`SHOW_AFTER` seconds and every :data:`LINE_EVERY` after, and one when the step
is done, never a redrawn bar."""

from __future__ import annotations

import os
import sys
import time
from types import TracebackType

from tqdm.auto import tqdm

#: Seconds a step runs before its progress shows: one done sooner (a probe, a small reference) shows nothing.
SHOW_AFTER = 1.0
#: Seconds between two progress lines where stderr is not a terminal.
LINE_EVERY = 30.0


class Progress:
    """Progress of a step of ``total`` units (``unit``: "sample", "tree"), said as ``what`` ("score model
    'models:/m/1' on query.csv", "train ExtraTreesClassifier").

    A context manager: :meth:`advance` after each batch of units; on leaving, the bar is cleared (as training's
    are), and in a log a last line says how long the step took, if it took :data:`SHOW_AFTER` or more (in one
    batch, that is its only line). Shows nothing unless ``enabled``.
    """

    def __init__(self, what: str, total: int, *, unit: str = "sample", enabled: bool) -> None:
        self.what, self.total, self.unit, self.enabled = what, total, unit, enabled
        self.done, self.started, self.last_line = 0, time.monotonic(), None
        on_terminal = enabled and getattr(sys.stderr, "isatty", lambda: False)() and terminal_columns() > 0
        self.bar = (
            tqdm(total=total, desc=what, unit=unit, leave=False, delay=SHOW_AFTER, file=sys.stderr)
            if on_terminal
            else None
        )

    def __enter__(self) -> Progress:
        return self

    def advance(self, units: int) -> None:
        """Count ``units`` more as done."""
        self.done += units
        if self.bar is not None:
            self.bar.update(units)
            return
        now = time.monotonic()
        due = now - self.started >= SHOW_AFTER if self.last_line is None else now - self.last_line >= LINE_EVERY
        if self.enabled and due and self.done < self.total:
            self.last_line = now
            tqdm.write(
                f"{self.what}: {self.done:,} of {self.total:,} {self.unit}s after {now - self.started:.0f} s",
                file=sys.stderr,
            )

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        seconds = time.monotonic() - self.started
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and kind is None and (self.last_line is not None or seconds >= SHOW_AFTER):
            tqdm.write(f"{self.what}: {self.total:,} {self.unit}s in {seconds:.1f} s", file=sys.stderr)


def terminal_columns() -> int:
    """The width of the terminal stderr writes to; 0 where it has none (a pseudo-terminal that was given no size,
    as ``script -qc`` run outside a terminal makes: tqdm draws an empty bar there, so lines are written instead)."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0
