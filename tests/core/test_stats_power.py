"""ema.stats.power: the query size needed to reject H0 "removed" with a given power."""

import numpy as np
import pytest
from scipy import stats

from ema.errors import InputError
from ema.stats import cutoff_ranks, required_query_size

ALPHA = 0.1


def test_required_query_size_reaches_power_and_is_smallest():
    rates, levels, n_reference = np.array([[0.001, 0.01, 0.2]]), np.array([0.01, 0.05, 0.5]), 2000
    result = required_query_size(rates, levels, n_reference, alpha=ALPHA, power=0.9)
    n = result.n_required
    assert result.power >= 0.9
    # The exact power of the best test, recomputed with scipy.
    ranks = cutoff_ranks(n_reference, levels)

    def power(size):
        best = 0.0
        for rank, rate in zip(ranks, rates[0], strict=True):
            cdf = stats.betabinom.cdf(np.arange(size + 1), size, rank, n_reference + 1 - rank)
            critical = int(np.sum(cdf <= ALPHA / rates.size)) - 1
            best = max(best, stats.binom.cdf(critical, size, rate) if critical >= 0 else 0.0)
        return best

    assert power(n) == pytest.approx(result.power)
    assert power(n - 1) < 0.9
    assert result.level in levels


def test_required_query_size_grows_as_members_look_like_nonmembers():
    levels = np.array([0.05, 0.25])
    strong = required_query_size(np.array([0.005, 0.1]), levels, 1000).n_required
    weak = required_query_size(np.array([0.03, 0.2]), levels, 1000).n_required
    assert strong < weak


def test_required_query_size_unreachable_is_none():
    result = required_query_size(np.array([0.05, 0.5]), np.array([0.05, 0.5]), 1000, max_n=5000)
    assert result.n_required is None
    assert result.power < 0.9


def test_required_query_size_rejects_bad_shapes():
    with pytest.raises(InputError, match=r"with n_levels = 2, got shape \(1, 3\)"):
        required_query_size(np.array([0.1, 0.2, 0.3]), np.array([0.1, 0.5]), 100)
    with pytest.raises(InputError, match="`n_tests` to be an integer >= 2"):
        required_query_size(np.array([0.1, 0.2]), np.array([0.1, 0.5]), 100, n_tests=1)
