"""The shared value checks of ``ema.validation``, and the boundaries that now call them instead of their own copies.

Every check refuses a bool, NaN, an infinity and a string with one line naming the parameter,
what was expected and what arrived; the former copies (EMA's ``check_alpha``, the statistics'
``check_unit_interval``, the auditors' and the HTTP oracle's own range checks) behave the same.
"""

import math
import re

import numpy as np
import pytest

from ema.auditors import CalibratedAuditor, EMAAuditor
from ema.auditors.reference import ReferenceAuditor
from ema.errors import InputError
from ema.stats import reference_tail_test, required_query_size
from ema.stats.member_tails import member_tail_test
from ema.stats.mixture import retained_fraction
from ema.validation import check_finite, check_momentum, check_open_unit, check_positive_int

NAN, INF = float("nan"), float("inf")
#: Values that no numeric check accepts, whatever its range.
NOT_NUMBERS = [True, False, NAN, INF, -INF, "0.5", None, np.array([0.5])]


def _refused(name, value):
    """The shared check's message for ``name=value``, as a regex matching the whole message."""
    return "^" + re.escape(f"expected {name} in (0, 1), got {value!r}") + "$"


# ---------------------------------------------------------------- the shared checks
@pytest.mark.parametrize("value", [*NOT_NUMBERS, 0, 1, 0.0, 1.0, -0.5, 1.5])
def test_check_open_unit_refuses_what_is_not_strictly_inside(value):
    with pytest.raises(InputError, match=_refused("alpha", value)):
        check_open_unit("alpha", value)


@pytest.mark.parametrize("value", [0.5, 1e-9, np.float64(0.25), np.float32(0.75)])
def test_check_open_unit_returns_a_float(value):
    checked = check_open_unit("alpha", value)
    assert type(checked) is float and checked == float(value)


@pytest.mark.parametrize("value", [True, False, NAN, INF, -INF, "1", None])
def test_check_finite_refuses_bool_nan_inf_and_strings(value):
    with pytest.raises(InputError, match=r"^expected timeout to be a finite number, got "):
        check_finite("timeout", value)


@pytest.mark.parametrize(("value", "accepted"), [(0, False), (0.5, True), (1, True)])
def test_check_finite_open_minimum(value, accepted):
    if accepted:
        assert check_finite("lr", value, minimum=0.0, open_minimum=True) == value
    else:
        with pytest.raises(InputError, match=r"^expected lr to be a finite number > 0, got 0$"):
            check_finite("lr", value, minimum=0.0, open_minimum=True)


@pytest.mark.parametrize("value", [*NOT_NUMBERS, 0, -1, 1.5])
def test_check_positive_int_refuses(value):
    with pytest.raises(InputError, match=r"^expected n to be a positive integer, got "):
        check_positive_int("n", value)


@pytest.mark.parametrize("value", [1, 3, np.int64(3), 3.0])
def test_check_positive_int_returns_an_int(value):
    checked = check_positive_int("n", value)
    assert type(checked) is int and checked == value


@pytest.mark.parametrize("value", [True, NAN, INF, "0.5", 1, 1.5, -0.1])
def test_check_momentum_refuses(value):
    with pytest.raises(InputError, match=r"^expected momentum "):
        check_momentum("momentum", value)


@pytest.mark.parametrize("value", [0, 0.0, 0.5])
def test_check_momentum_accepts_zero_to_one_open(value):
    assert check_momentum("momentum", value) == value


# ---------------------------------------------------------------- the former copies, now the shared check
BAD_LEVELS = [True, NAN, INF, "0.1", 0, 1]
CALIBRATION = (np.full((4, 2), 0.5), np.array([0, 1, 0, 1]), np.full((4, 2), 0.5), np.array([0, 1, 0, 1]))


@pytest.mark.parametrize("value", BAD_LEVELS)
def test_ema_auditor_alpha_is_checked_by_the_shared_check(value):
    with pytest.raises(InputError, match=_refused("alpha", value)):
        EMAAuditor(alpha=value).calibrate(*CALIBRATION)


@pytest.mark.parametrize("name", ["alpha", "confidence_level"])
@pytest.mark.parametrize("value", BAD_LEVELS)
def test_calibrated_auditor_levels_are_checked_by_the_shared_check(name, value):
    with pytest.raises(InputError, match=_refused(name, value)):
        CalibratedAuditor(**{name: value}).calibrate(*CALIBRATION, *CALIBRATION[:2])


@pytest.mark.parametrize("name", ["alpha", "margin", "confidence_level", "power", "shift_alpha"])
@pytest.mark.parametrize("value", [True, NAN])
def test_reference_auditor_levels_are_checked_by_the_shared_check(name, value):
    with pytest.raises(InputError, match=_refused(name, value)):
        ReferenceAuditor(**{name: value}).calibrate(*CALIBRATION)


@pytest.mark.parametrize("value", BAD_LEVELS)
def test_statistics_levels_are_checked_by_the_shared_check(value):
    counts = (np.array([30, 70]), np.array([100, 900]), np.array([500, 500]))
    calls = {
        "confidence_level": lambda: retained_fraction(*counts, confidence_level=value),
        "level": lambda: reference_tail_test(np.arange(5.0), np.arange(50.0), level=value),
        "alpha": lambda: required_query_size(np.array([0.5]), np.array([0.1]), 100, alpha=value),
        "power": lambda: required_query_size(np.array([0.5]), np.array([0.1]), 100, power=value),
        "null_share": lambda: member_tail_test(5, 100, value),
    }
    for name, call in calls.items():
        with pytest.raises(InputError, match=_refused(name, value)):
            call()


def test_tail_interval_confidence_level_is_checked_by_the_shared_check():
    result = member_tail_test(5, 100, 0.1)
    with pytest.raises(InputError, match=_refused("confidence_level", math.nan)):
        result.confidence_interval(math.nan)
