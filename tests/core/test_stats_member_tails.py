"""ema.stats.member_tails: the member tail curve and the tests of H0 "retained" against it."""

import numpy as np
import pytest
from scipy import stats

from ema.errors import InputError
from ema.stats import MemberTailCurve, member_tail_curve, member_tail_test


def test_member_tail_test_zero_variance_is_binomial_test():
    result = member_tail_test(12, 100, 0.05)
    expected = stats.binomtest(12, 100, 0.05, alternative="greater").pvalue
    assert result.pvalue == pytest.approx(expected)
    assert result.alternative == "greater"


def test_member_tail_test_uncertain_share_is_more_conservative():
    known = member_tail_test(12, 100, 0.05).pvalue
    uncertain = member_tail_test(12, 100, 0.05, 0.02**2).pvalue
    assert uncertain > known
    # The beta-binomial law with the share's mean and variance.
    concentration = 0.05 * 0.95 / 0.02**2 - 1
    assert uncertain == pytest.approx(stats.betabinom.sf(11, 100, 0.05 * concentration, 0.95 * concentration))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((101, 100, 0.05), r"`count` to be an integer in 0..100"),
        ((5, 0, 0.05), "positive integer"),
        ((5, 100, 0.0), r"expected null_share in \(0, 1\), got 0.0"),
        ((5, 100, 0.05, 0.1), r"`null_variance` in \[0, null_share"),
    ],
)
def test_member_tail_test_rejects_bad_arguments(args, message):
    with pytest.raises(InputError, match=message):
        member_tail_test(*args)


def test_member_tail_curve_hand_computed():
    curve = member_tail_curve(np.array([2.5, 5.0, 6.0, 7.0]), np.array([4.0, 1.0, 3.0, 2.0]))
    assert isinstance(curve, MemberTailCurve)
    # Members at or below the r-th smallest non-member (1, 2, 3, 4): 0, 0, 1, 1.
    np.testing.assert_array_equal(curve.cumulative[0], [0, 0, 0, 1, 1])
    # level 0.6 -> rank 0.6 * 5 = 3 -> 1 of 4 members; level 0.5 -> rank 2.5, halfway from 0 to 1.
    np.testing.assert_allclose(curve.raw_rate(np.array([0.6, 0.5])), [0.25, 0.125])
    rates = curve.rates(np.array([0.6]))
    assert rates.rate[0] == pytest.approx((1 + 0.5) / 5)  # Jeffreys pseudo-counts
    assert rates.slope[0] >= rates.rate[0] / 0.6
    assert rates.variance[0] > rates.rate[0] * (1 - rates.rate[0]) / 4


def test_member_tail_curve_invariant_to_increasing_rescaling():
    # The transfer works on quantile levels: a target that is uniformly more confident has the same curve.
    rng = np.random.default_rng(5)
    members, nonmembers = rng.beta(8, 1, 300), rng.beta(4, 1, 300)
    levels = np.array([0.01, 0.1, 0.5])
    original = member_tail_curve(members, nonmembers).raw_rate(levels)
    rescaled = member_tail_curve(np.exp(3 * members) - 2, np.exp(3 * nonmembers) - 2).raw_rate(levels)
    np.testing.assert_allclose(original, rescaled)


def test_member_tail_curve_strata_without_nonmembers_warn():
    with pytest.warns(UserWarning, match=r"strata \[1\] have members but no non-members"):
        curve = member_tail_curve(
            np.array([1.0, 2.0, 3.0]),
            np.array([0.5, 1.5]),
            member_strata=np.array([0, 0, 1]),
            nonmember_strata=np.array([0, 0]),
        )
    assert curve.n_members == 2


def test_member_tail_curve_rejects_strata_on_one_side():
    with pytest.raises(InputError, match="`member_strata` and `nonmember_strata` both or neither"):
        member_tail_curve(np.array([1.0, 2.0]), np.array([0.5, 1.5]), member_strata=np.array([0, 1]))


def test_member_tail_curve_rates_reject_bad_levels():
    curve = member_tail_curve(np.array([1.0, 2.0]), np.array([0.5, 1.5]))
    with pytest.raises(InputError, match=r"levels in \(0, 1\)"):
        curve.rates(np.array([0.0, 0.5]))
