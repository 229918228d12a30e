"""ema.stats.retained: the retained fraction with its interval, and the target-only lower bound."""

import numpy as np
import pytest

from ema.errors import InputError
from ema.stats import member_tail_curve, retained_fraction_interval, retained_lower_bound


def _separated_curve(rng, n=2000):
    return member_tail_curve(rng.uniform(0.3, 1.3, n), rng.uniform(0.0, 1.0, n))


def test_retained_fraction_interval_estimate_formula():
    rng = np.random.default_rng(6)
    curve = _separated_curve(rng)
    ranks, size = np.array([100, 250, 500]), 999
    counts, n = np.array([40, 100, 300]), 1000
    result = retained_fraction_interval(
        counts, n, reference_ranks=ranks, reference_sizes=size, member_curve=curve, random_state=0
    )
    levels = ranks / (size + 1)
    expected = np.sum(levels - counts / n) / np.sum(levels - curve.rates(levels).rate)
    assert result.estimate == pytest.approx(np.clip(expected, 0, 1))
    assert 0.0 <= result.low <= result.estimate <= result.high <= 1.0
    assert result.confidence_interval() == (result.low, result.high)
    again = retained_fraction_interval(
        counts, n, reference_ranks=ranks, reference_sizes=size, member_curve=curve, random_state=0
    )
    assert again == result


def test_retained_fraction_interval_unseparated_members_give_full_interval():
    rng = np.random.default_rng(7)
    same = rng.uniform(size=1000)
    curve = member_tail_curve(same, same)  # members exactly like non-members
    result = retained_fraction_interval(
        np.array([50, 250]),
        500,
        reference_ranks=np.array([100, 500]),
        reference_sizes=999,
        member_curve=curve,
        random_state=0,
    )
    assert np.isnan(result.estimate)
    assert (result.low, result.high) == (0.0, 1.0)


def test_retained_fraction_interval_small_query_is_wide():
    curve = _separated_curve(np.random.default_rng(8))
    result = retained_fraction_interval(
        np.array([0, 1]),
        4,
        reference_ranks=np.array([100, 500]),
        reference_sizes=999,
        member_curve=curve,
        random_state=0,
    )
    assert result.high - result.low > 0.7


def test_retained_fraction_interval_covers_truth_by_simulation():
    rng = np.random.default_rng(9)
    ranks, size, n, truth = np.array([50, 100, 250, 500]), 999, 400, 0.5
    covered = []
    for seed in range(150):
        members, nonmembers = rng.uniform(0.3, 1.3, 500), rng.uniform(0.0, 1.0, 500)
        curve = member_tail_curve(members, nonmembers)
        reference = np.sort(rng.uniform(size=size))
        query = np.where(rng.uniform(size=n) < truth, rng.uniform(0.3, 1.3, n), rng.uniform(0.0, 1.0, n))
        counts = (query[:, None] <= reference[ranks - 1]).sum(axis=0)
        result = retained_fraction_interval(
            counts, n, reference_ranks=ranks, reference_sizes=size, member_curve=curve, n_draws=1000, random_state=seed
        )
        covered.append(result.low <= truth <= result.high)
    assert np.mean(covered) >= 0.85


def test_retained_fraction_interval_rejects_bad_counts():
    curve = _separated_curve(np.random.default_rng(10))
    with pytest.raises(InputError, match=r"nondecreasing integers in 0\.\.10"):
        retained_fraction_interval(
            np.array([5, 3]), 10, reference_ranks=np.array([1, 2]), reference_sizes=9, member_curve=curve
        )
    with pytest.raises(InputError, match=r"`reference_ranks` of shape \(1, 2\)"):
        retained_fraction_interval(
            np.array([1, 3]), 10, reference_ranks=np.array([1, 20]), reference_sizes=9, member_curve=curve
        )
    with pytest.raises(InputError, match="expected `stratum_weights` for the 2 strata"):
        retained_fraction_interval(
            np.array([1, 3]),
            10,
            reference_ranks=np.ones((2, 2), dtype=int),
            reference_sizes=np.array([9, 9]),
            member_curve=curve,
        )


def test_retained_lower_bound_hand_computed():
    result = retained_lower_bound(np.array([3.0, 4.0, 5.0, 6.0]), np.array([1.0, 2.0, 3.0, 4.0]), confidence_level=0.9)
    assert result.statistic == pytest.approx(0.5)  # at c = 2: F_ref = 1/2, F_query = 0
    margin = 2 * np.sqrt(np.log(2 / 0.1) / 8)
    assert result.low == pytest.approx(max(0.0, 0.5 - margin))
    assert (result.n, result.n_reference) == (4, 4)


def test_retained_lower_bound_holds_by_simulation():
    rng = np.random.default_rng(11)
    truth, n, n_reference = 0.6, 500, 1000
    bounds = []
    for _ in range(200):
        query = np.where(rng.uniform(size=n) < truth, rng.uniform(0.5, 1.5, n), rng.uniform(size=n))
        bounds.append(retained_lower_bound(query, rng.uniform(size=n_reference), confidence_level=0.9).low)
    bounds = np.array(bounds)
    assert np.mean(bounds <= truth) >= 0.9
    assert bounds.mean() > 0.1  # and it is informative when members are well separated
