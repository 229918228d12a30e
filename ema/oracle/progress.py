"""What an oracle shows on stderr while it scores a set (``--progress``, the default): nothing for a set scored
within :data:`SHOW_AFTER` seconds; on a terminal, a bar counting samples, as training's bars count epochs; elsewhere
(a log file, CI), a line after :data:`SHOW_AFTER` seconds and every :data:`LINE_EVERY` after, and one when the set is
done, never a redrawn bar."""

from __future__ import annotations

import os
import sys
import time
from types import TracebackType

from tqdm.auto import tqdm

#: Seconds a set is scored before its progress shows: a set scored sooner (a probe, a small reference) shows nothing.
SHOW_AFTER = 1.0
#: Seconds between two progress lines where stderr is not a terminal.
LINE_EVERY = 30.0


class ScoringProgress:
    """Progress of scoring ``total`` samples, said as ``what`` ("score model 'models:/m/1' on query.csv").

    A context manager: :meth:`advance` after each batch; on leaving, the bar is cleared (as training's are),
    and in a log a last line says how long the set took, if it took :data:`SHOW_AFTER` or more (in one batch,
    that is its only line). Shows nothing unless ``enabled``.
    """

    def __init__(self, what: str, total: int, *, enabled: bool) -> None:
        self.what, self.total, self.enabled = what, total, enabled
        self.done, self.started, self.last_line = 0, time.monotonic(), None
        on_terminal = enabled and getattr(sys.stderr, "isatty", lambda: False)() and terminal_columns() > 0
        self.bar = (
            tqdm(total=total, desc=what, unit="sample", leave=False, delay=SHOW_AFTER, file=sys.stderr)
            if on_terminal
            else None
        )

    def __enter__(self) -> ScoringProgress:
        return self

    def advance(self, samples: int) -> None:
        """Count ``samples`` more as scored."""
        self.done += samples
        if self.bar is not None:
            self.bar.update(samples)
            return
        now = time.monotonic()
        due = now - self.started >= SHOW_AFTER if self.last_line is None else now - self.last_line >= LINE_EVERY
        if self.enabled and due and self.done < self.total:
            self.last_line = now
            tqdm.write(
                f"{self.what}: {self.done:,} of {self.total:,} samples after {now - self.started:.0f} s",
                file=sys.stderr,
            )

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        seconds = time.monotonic() - self.started
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and kind is None and (self.last_line is not None or seconds >= SHOW_AFTER):
            tqdm.write(f"{self.what}: {self.total:,} samples in {seconds:.1f} s", file=sys.stderr)


def terminal_columns() -> int:
    """The width of the terminal stderr writes to; 0 where it has none (a pseudo-terminal that was given no size,
    as ``script -qc`` run outside a terminal makes: tqdm draws an empty bar there, so lines are written instead)."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0
