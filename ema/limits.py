"""What one command may spend: the largest model it may train, and the wall time it may take.

A command that trains (``ema audit``, ``calibrate``, ``train``, ``unlearn``, ``grid``) runs
inside :func:`command_limits`, which the CLI enters from ``--max-params`` and ``--timeout``.
Everything below reads the limits of the command it runs in through :func:`current_limits`,
as scikit-learn's ``config_context`` passes its settings: the recipe size check
(:mod:`ema.training.sizes`) at every training entry, and the deadline at the places where
time goes (each torch step, a scikit-learn ``fit``, an HTTP scoring, a wait for another
process's cache entry). Outside any command (a library call, the evaluator plugin) the
defaults hold: :data:`DEFAULT_MAX_PARAMS` and no deadline.

The deadline is enforced in two ways. Our own loops call :func:`check_deadline` between
steps. Code we do not control (a scikit-learn ``fit``) runs under :func:`interruptible`,
where a ``SIGALRM`` timer raises :class:`TimeLimitExceeded` in the main thread when the
deadline passes. Only these sections are interrupted, never a write to the tracking store,
so an expired command ends its runs FAILED and has registered nothing half-way.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from ema.errors import TimeLimitExceeded
from ema.validation import check_finite, check_positive_int

#: Default of ``--max-params``. Training in float32 holds about 16 bytes per parameter (the
#: weight, its gradient and Adam's two moments), so 500 million parameters take about 8 GB:
#: a third of a 24 GB machine, leaving the rest to the data, the audited model and the process.
DEFAULT_MAX_PARAMS = 500_000_000
#: Bytes one parameter may cost while training; ``--max-params`` times this bounds a recipe's memory estimate.
BYTES_PER_PARAM = 16


@dataclass(frozen=True)
class Limits:
    """The limits of one command.

    Attributes
    ----------
    max_params : int
        The most parameters a model trained by the command may have; ``max_params *
        BYTES_PER_PARAM`` bounds the estimated memory of its training.
    timeout : float or None
        Seconds of wall time the command may take; None: no limit.
    deadline : float
        ``time.monotonic()`` at which the command expires (``inf`` without a timeout).
    """

    max_params: int = DEFAULT_MAX_PARAMS
    timeout: float | None = None
    deadline: float = math.inf

    @property
    def max_bytes(self) -> int:
        return self.max_params * BYTES_PER_PARAM

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()


_LIMITS: ContextVar[Limits] = ContextVar("ema_limits", default=Limits())


def current_limits() -> Limits:
    """The limits of the command running now (the defaults outside any)."""
    return _LIMITS.get()


@contextmanager
def command_limits(
    *, max_params: int = DEFAULT_MAX_PARAMS, timeout: float | None = None, started: float | None = None
) -> Iterator[Limits]:
    """Run the body under these limits; the deadline runs from ``started`` (``time.monotonic()``; default now).

    Raises
    ------
    InputError
        If ``max_params`` is not a positive integer or ``timeout`` not a positive finite number.
    """
    check_positive_int("max_params", max_params)
    if timeout is not None:
        check_finite("timeout", timeout, minimum=0.0, open_minimum=True)
    start = time.monotonic() if started is None else started
    deadline = start + timeout if timeout is not None else math.inf
    token = _LIMITS.set(Limits(max_params=max_params, timeout=timeout, deadline=deadline))
    try:
        yield _LIMITS.get()
    finally:
        _LIMITS.reset(token)


def seconds_left(default: float) -> float:
    """Seconds left before the command's deadline; ``default`` when it has none (a library call)."""
    limits = current_limits()
    return default if math.isinf(limits.deadline) else max(limits.seconds_left(), 0.0)


def adopt_limits(limits: Limits) -> None:
    """Hold ``limits`` for the rest of this process: a worker process takes on its parent command's."""
    _LIMITS.set(limits)


def expired(what: str) -> TimeLimitExceeded:
    """The one-line error of a command stopped by its ``--timeout`` in step ``what`` ("train calibration")."""
    limits = current_limits()
    return TimeLimitExceeded(
        f"expected the command to finish within --timeout {limits.timeout:g} s, but it ran past it in step "
        f"{what!r}; the run is marked FAILED: raise --timeout SECONDS"
    )


def check_deadline(what: str) -> None:
    """Raise :class:`TimeLimitExceeded` if the command's deadline has passed (cheap: call it between steps)."""
    if time.monotonic() >= current_limits().deadline:
        raise expired(what)


@contextmanager
def interruptible(what: str) -> Iterator[None]:
    """Run code we do not control (a scikit-learn ``fit``) so that the deadline interrupts it.

    In the main thread a ``SIGALRM`` timer, set to the time left, raises
    :class:`TimeLimitExceeded` inside the body (Python signal handlers run between
    bytecodes, so a long C call is stopped when it returns to Python: a forest between two
    trees, an MLP between two batches). Elsewhere, or without a deadline, the body runs
    as is and the deadline is checked when it ends. The previous handler and timer are restored.
    """
    check_deadline(what)
    left = current_limits().seconds_left()
    if math.isinf(left) or threading.current_thread() is not threading.main_thread():
        yield
        check_deadline(what)
        return

    def on_alarm(signum, frame):
        raise expired(what)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
