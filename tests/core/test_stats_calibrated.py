"""The calibrated statistics in ema.stats: tail tests, member curve, corrections, intervals, power."""

import dataclasses

import numpy as np
import pytest
from scipy import stats

from ema.errors import InputError
from ema.stats import (
    MemberTailCurve,
    TailTestResult,
    adjust_pvalues,
    cutoff_ranks,
    member_tail_curve,
    member_tail_test,
    placement_pvalues,
    reference_tail_test,
    required_query_size,
    retained_fraction_interval,
    retained_lower_bound,
)

ALPHA = 0.1
#: Slack over alpha for Monte Carlo rates (about three standard errors at the sizes used).
MC_SLACK = 0.03


# ---------------------------------------------------------------- cut-off ranks and placement test
def test_cutoff_ranks_expected_level_and_clipping():
    np.testing.assert_array_equal(cutoff_ranks(999, np.array([0.01, 0.05, 0.5])), [10, 50, 500])
    # A tiny reference cannot go below its smallest score or above its largest.
    np.testing.assert_array_equal(cutoff_ranks(5, np.array([0.01, 0.99])), [1, 5])
    np.testing.assert_array_equal(cutoff_ranks(np.array([[9], [99]]), np.array([0.1, 0.5])), [[1, 5], [10, 50]])


def test_cutoff_ranks_rejects_empty_reference():
    with pytest.raises(InputError, match="expected reference sizes >= 1"):
        cutoff_ranks(0, np.array([0.1]))


def test_reference_tail_test_matches_hand_computed_beta_binomial():
    reference = np.arange(1.0, 20.0)  # 19 scores; level 0.25 -> rank round(0.25 * 20) = 5 -> cut-off 5.0
    query = np.array([1.0, 10.0, 11.0, 12.0])  # one sample at or below 5.0
    result = reference_tail_test(query, reference, level=0.25)
    assert isinstance(result, TailTestResult)
    assert (result.statistic, result.n, result.alternative) == (1, 4, "less")
    assert result.pvalue == pytest.approx(stats.betabinom.cdf(1, 4, 5, 15))
    assert result.null_share == pytest.approx(5 / 20)
    greater = reference_tail_test(query, reference, level=0.25, alternative="greater")
    assert greater.pvalue == pytest.approx(stats.betabinom.sf(0, 4, 5, 15))


def test_reference_tail_test_result_is_frozen_with_one_sided_interval():
    result = reference_tail_test(np.array([1.0, 10.0, 11.0, 12.0]), np.arange(1.0, 20.0), level=0.25)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.pvalue = 0.0
    low, high = result.confidence_interval(0.9)
    expected = stats.binomtest(1, 4, alternative="less").proportion_ci(0.9)
    assert (low, high) == pytest.approx((expected.low, expected.high))
    assert low == 0.0


def test_placement_pvalues_valid_under_null_by_simulation():
    # Query and reference from one distribution: P(p <= a) <= a (exact test, discrete p-values).
    rng = np.random.default_rng(1)
    n_draws, n_query, n_reference = 4000, 50, 200
    ranks = cutoff_ranks(n_reference, np.array([0.05, 0.25]))
    reference = np.sort(rng.normal(size=(n_draws, n_reference)), axis=1)
    query = rng.normal(size=(n_draws, n_query))
    for rank in ranks:
        counts = (query <= reference[:, rank - 1 : rank]).sum(axis=1)
        pvalues = placement_pvalues(counts, np.array([n_query]), np.full((n_draws, 1), rank), np.array([n_reference]))
        for a in (0.05, ALPHA):
            assert np.mean(pvalues <= a) <= a + 0.015
        # Exactness: the mean count is n_query * rank / (n_reference + 1).
        assert counts.mean() == pytest.approx(n_query * rank / (n_reference + 1), rel=0.05)


def test_placement_pvalues_powerful_against_members():
    rng = np.random.default_rng(2)
    reference = np.sort(rng.uniform(size=500))
    members = rng.uniform(0.05, 1.0, size=(200, 300))  # no member in the lowest 5%
    rank = cutoff_ranks(500, np.array([0.05]))[0]
    counts = (members <= reference[rank - 1]).sum(axis=1)
    pvalues = placement_pvalues(counts, np.array([300]), np.full((200, 1), rank), np.array([500]))
    assert np.mean(pvalues <= ALPHA) > 0.95


def test_reference_tail_test_conservative_with_ties():
    # Scores on a coarse grid tie often; "at or below" keeps the lower-tail test valid.
    rng = np.random.default_rng(3)
    rejections = [
        reference_tail_test(
            rng.integers(0, 5, 40).astype(float), rng.integers(0, 5, 100).astype(float), level=0.25
        ).pvalue
        <= ALPHA
        for _ in range(400)
    ]
    assert np.mean(rejections) <= ALPHA + MC_SLACK


def test_reference_tail_test_strata_keep_validity_when_class_mix_differs():
    # Two classes whose scores differ; the query holds mostly the low-scoring class. Per-class
    # cut-offs keep the test valid, a global cut-off does not.
    rng = np.random.default_rng(4)
    stratified, pooled = [], []
    for _ in range(300):
        reference_strata = np.repeat([0, 1], 100)
        reference = rng.normal(size=200) + 3.0 * reference_strata
        query_strata = (rng.uniform(size=60) < 0.1).astype(np.int64)  # 90% class 0
        query = rng.normal(size=60) + 3.0 * query_strata
        stratified.append(
            reference_tail_test(
                query,
                reference,
                level=0.1,
                query_strata=query_strata,
                reference_strata=reference_strata,
                alternative="greater",
            ).pvalue
        )
        pooled.append(reference_tail_test(query, reference, level=0.1, alternative="greater").pvalue)
    assert np.mean(np.array(stratified) <= ALPHA) <= ALPHA + MC_SLACK
    assert np.mean(np.array(pooled) <= ALPHA) > 0.5


def test_reference_tail_test_stratified_pvalue_is_convolution():
    reference = np.array([1.0, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0])
    reference_strata = np.array([0, 0, 0, 0, 1, 1, 1])
    query = np.array([0.5, 3.5, 25.0])
    query_strata = np.array([0, 0, 1])
    # level 0.5: stratum 0 (4 scores) rank round(2.5) = 2 -> cut-off 2.0; stratum 1 (3) rank 2 -> 20.0.
    result = reference_tail_test(
        query, reference, level=0.5, query_strata=query_strata, reference_strata=reference_strata
    )
    assert result.statistic == 1
    law = np.convolve(stats.betabinom.pmf(np.arange(3), 2, 2, 3), stats.betabinom.pmf(np.arange(2), 1, 2, 2))
    assert result.pvalue == pytest.approx(law[:2].sum())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"level": 1.5}, r"expected `level` in \(0, 1\)"),
        ({"level": 0.1, "alternative": "two-sided"}, "expected `alternative` in"),
        ({"level": 0.1, "query_strata": np.zeros(3, dtype=int)}, "both or neither"),
        (
            {"level": 0.1, "query_strata": np.array([0, 1, 1]), "reference_strata": np.zeros(5, dtype=int)},
            r"none for strata \[1\]",
        ),
        (
            {"level": 0.1, "query_strata": np.zeros(2, dtype=int), "reference_strata": np.zeros(5, dtype=int)},
            r"shape \(3,\)",
        ),
    ],
)
def test_reference_tail_test_rejects_bad_arguments(kwargs, message):
    with pytest.raises(InputError, match=message):
        reference_tail_test(np.array([1.0, 2.0, 3.0]), np.arange(5.0), **kwargs)


def test_reference_tail_test_rejects_bad_scores():
    with pytest.raises(InputError, match="finite `query_scores`"):
        reference_tail_test(np.array([1.0, np.nan]), np.arange(5.0), level=0.1)
    with pytest.raises(InputError, match="non-empty 1-D array"):
        reference_tail_test(np.array([1.0]), np.ones((2, 2)), level=0.1)


# ---------------------------------------------------------------- member tail test and curve
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
        ((5, 100, 0.0), r"`null_share` in \(0, 1\)"),
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


def test_member_tail_curve_rates_reject_bad_levels():
    curve = member_tail_curve(np.array([1.0, 2.0]), np.array([0.5, 1.5]))
    with pytest.raises(InputError, match=r"levels in \(0, 1\)"):
        curve.rates(np.array([0.0, 0.5]))


# ---------------------------------------------------------------- corrections
def test_adjust_pvalues_holm_and_bonferroni():
    np.testing.assert_allclose(adjust_pvalues([0.01, 0.04, 0.03], "holm"), [0.03, 0.06, 0.06])
    np.testing.assert_allclose(adjust_pvalues([0.01, 0.04, 0.03], "bonferroni"), [0.03, 0.12, 0.09])
    adjusted = adjust_pvalues(np.array([[0.5, 0.001], [0.9, 0.2]]))
    assert adjusted.shape == (2, 2)
    assert adjusted.min() == pytest.approx(0.004)  # Holm's first step is Bonferroni's
    assert adjusted.max() <= 1.0


def test_adjust_pvalues_rejects_bad_input():
    with pytest.raises(InputError, match="expected `method` in"):
        adjust_pvalues([0.1], "bh")
    with pytest.raises(InputError, match=r"p-values in \[0, 1\]"):
        adjust_pvalues([0.1, 1.2])


# ---------------------------------------------------------------- retained fraction
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
    with pytest.raises(InputError, match="nondecreasing integers in 0..10"):
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


# ---------------------------------------------------------------- power
def test_required_query_size_reaches_power_and_is_smallest():
    rates, levels, n_reference = np.array([[0.001, 0.01, 0.2]]), np.array([0.01, 0.05, 0.5]), 2000
    result = required_query_size(rates, levels, n_reference, alpha=ALPHA, power=0.9)
    n = result.n_required
    assert result.power >= 0.9
    # The exact power of the best test, recomputed with scipy.
    ranks = cutoff_ranks(n_reference, levels)

    def power(size):
        best = 0.0
        for rank, rate in zip(ranks, rates[0]):
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
