"""A stand-in for the clock the command's deadline reads (:mod:`ema.limits`), moved only by what a test says took time.

Tests of ``--timeout`` then say where scoring stops without waiting out real seconds or asserting a wall-clock bound.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from ema import limits


class Clock:
    """Seconds since the command started, moved by :meth:`advance` (from any thread: a server's handler too)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


def command_clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """A clock at 0 that the command's deadline reads from now on (``command_limits(..., started=0.0)``)."""
    clock = Clock()
    monkeypatch.setattr(limits, "time", SimpleNamespace(monotonic=clock))
    return clock
