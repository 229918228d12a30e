"""Command limits: the deadline, and the interruption of code we do not control."""

from __future__ import annotations

import time

import pytest

from ema.limits import (
    DEFAULT_MAX_PARAMS,
    TimeLimitExceeded,
    check_deadline,
    command_limits,
    current_limits,
    interruptible,
    seconds_left,
)


def test_limits_hold_inside_the_command_only():
    with command_limits(max_params=10, timeout=60) as limits:
        assert current_limits() is limits and limits.max_params == 10 and 0 < seconds_left(5.0) <= 60
    assert current_limits().max_params == DEFAULT_MAX_PARAMS and seconds_left(5.0) == 5.0


def test_check_deadline_raises_once_the_timeout_has_passed():
    with command_limits(timeout=0.01):
        time.sleep(0.05)
        with pytest.raises(TimeLimitExceeded, match=r"within --timeout 0\.01 s, .* in step 'step'"):
            check_deadline("step")


def test_interruptible_stops_a_loop_it_does_not_control():
    with command_limits(timeout=0.2), pytest.raises(TimeLimitExceeded, match="in step 'spin'"):
        with interruptible("spin"):
            while True:
                sum(range(1000))
    check_deadline("after")  # the command has ended: no deadline, no timer left behind
