"""ema.stats.placement: cut-off ranks and the exact placement tests of a query's low tail."""

import dataclasses

import numpy as np
import pytest
from scipy import stats

from ema.errors import InputError
from ema.stats import (
    StratifiedCutoffs,
    TailTestResult,
    cutoff_ranks,
    expected_cutoff_levels,
    placement_pvalues,
    reference_tail_test,
    stratified_cutoffs,
)

ALPHA = 0.1
#: Slack over alpha for Monte Carlo rates (about three standard errors at the sizes used).
MC_SLACK = 0.03


def test_cutoff_ranks_expected_level_and_clipping():
    np.testing.assert_array_equal(cutoff_ranks(999, np.array([0.01, 0.05, 0.5])), [10, 50, 500])
    # A tiny reference cannot go below its smallest score or above its largest.
    np.testing.assert_array_equal(cutoff_ranks(5, np.array([0.01, 0.99])), [1, 5])
    np.testing.assert_array_equal(cutoff_ranks(np.array([[9], [99]]), np.array([0.1, 0.5])), [[1, 5], [10, 50]])


def test_cutoff_ranks_rejects_empty_reference():
    with pytest.raises(InputError, match="expected reference sizes >= 1"):
        cutoff_ranks(0, np.array([0.1]))


def test_stratified_cutoffs_are_each_strata_order_statistics():
    rng = np.random.default_rng(12)
    scores, strata, levels = rng.normal(size=300), rng.integers(0, 3, 300), np.array([0.05, 0.5])
    cut = stratified_cutoffs(scores, strata, levels, n_strata=3)
    assert isinstance(cut, StratifiedCutoffs)
    for s in range(3):
        own = np.sort(scores[strata == s])
        np.testing.assert_array_equal(cut.ranks[s], cutoff_ranks(own.size, levels))
        np.testing.assert_array_equal(cut.cutoffs[s], own[cut.ranks[s] - 1])
    np.testing.assert_array_equal(cut.reference_sizes, np.bincount(strata))
    assert cut.has_reference.all()


def test_stratified_cutoffs_empty_stratum_falls_back_to_whole_reference():
    scores, strata = np.arange(10.0), np.repeat([0, 2], 5)
    cut = stratified_cutoffs(scores, strata, np.array([0.5]), n_strata=3)
    np.testing.assert_array_equal(cut.has_reference, [True, False, True])
    np.testing.assert_array_equal(cut.reference_sizes, [5, 10, 5])
    np.testing.assert_array_equal(cut.cutoffs[:, 0], [2.0, 5.0, 7.0])  # ranks 3, round(5.5) = 6, 3


def test_stratified_cutoffs_one_stratum_is_global():
    scores = np.random.default_rng(13).normal(size=99)
    cut = stratified_cutoffs(scores, np.zeros(99, dtype=np.int64), np.array([0.1, 0.5]), n_strata=1)
    np.testing.assert_array_equal(cut.cutoffs[0], np.sort(scores)[[9, 49]])


def test_expected_cutoff_levels_weighs_each_strata_level():
    ranks, sizes = np.array([[10, 50], [1, 5]]), np.array([99, 9])
    np.testing.assert_allclose(expected_cutoff_levels(ranks, sizes, np.array([1.0, 0.0])), [0.1, 0.5])
    np.testing.assert_allclose(expected_cutoff_levels(ranks, sizes, np.array([0.25, 0.75])), [0.1, 0.5])


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
        ({"level": 1.5}, r"expected level in \(0, 1\), got 1.5"),
        ({"level": 0.1, "alternative": "two-sided"}, "expected alternative in"),
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
