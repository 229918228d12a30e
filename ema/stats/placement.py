"""Placement (rank) tests of a query's low tail against reference order statistics.

Scores are membership signals, higher = more member-like. A "tail" is the set of scores at
or below a low cut-off. Members of a model leave that tail (they score higher), so a query
set that is still memorized puts FEWER samples in the tail than the target's non-members.
The cut-offs are order statistics of reference scores the target never saw, so the count in
the tail has an exact beta-binomial (placement) law under H0 "removed".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ema.errors import InputError
from ema.stats._beta_binomial import betabinom_pmf, tail_probability
from ema.stats._results import TAIL_ALTERNATIVES, TailTestResult
from ema.stats._validation import check_paired_strata, check_score_vector
from ema.validation import check_choice, check_open_unit


def cutoff_ranks(n_reference: int | np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Rank j of the reference order statistic used as the ``level`` cut-off.

    j = round(level * (n + 1)) clipped to 1..n, so that the expected share of the reference
    distribution at or below the j-th smallest of n reference scores, j / (n + 1), is as close
    to ``level`` as the sample allows.

    Parameters
    ----------
    n_reference : int or ndarray of int
        Reference sample sizes (broadcast against ``levels``).
    levels : ndarray
        Quantile levels in (0, 1).

    Returns
    -------
    ndarray of int64

    Examples
    --------
    >>> cutoff_ranks(999, np.array([0.01, 0.5])).tolist()
    [10, 500]
    """
    n_reference = np.asarray(n_reference)
    levels = np.asarray(levels, dtype=np.float64)
    if np.any(n_reference < 1):
        raise InputError(f"expected reference sizes >= 1, got {n_reference.tolist()}")
    return np.clip(np.rint(levels * (n_reference + 1)), 1, n_reference).astype(np.int64)


@dataclass(frozen=True)
class StratifiedCutoffs:
    """Cut-offs at reference order statistics, one row of levels per stratum.

    Attributes
    ----------
    ranks : ndarray of int, shape (n_strata, n_levels)
        Rank of each cut-off among the reference scores behind it (:func:`cutoff_ranks`).
    reference_sizes : ndarray of int, shape (n_strata,)
        Reference scores behind each stratum's cut-offs: the stratum's own, or the whole
        reference's for a stratum that has none.
    cutoffs : ndarray of shape (n_strata, n_levels)
        The ``ranks``-th smallest of those reference scores.
    has_reference : ndarray of bool, shape (n_strata,)
        False for the strata without reference scores, whose cut-offs are the whole reference's.
    """

    ranks: np.ndarray
    reference_sizes: np.ndarray
    cutoffs: np.ndarray
    has_reference: np.ndarray


def stratified_cutoffs(
    reference_scores: np.ndarray, reference_strata: np.ndarray, levels: np.ndarray, *, n_strata: int
) -> StratifiedCutoffs:
    """Each stratum's cut-offs at the quantile ``levels`` of its own reference scores.

    For validated input: finite scores of shape (n_reference,), int64 strata in 0..n_strata - 1
    of the same shape, levels in (0, 1). One stratum (all zeros) gives the global cut-offs.

    Examples
    --------
    >>> scores, strata = np.arange(1.0, 10.0), np.array([0, 0, 0, 0, 1, 1, 1, 1, 1])
    >>> cut = stratified_cutoffs(scores, strata, np.array([0.5]), n_strata=3)  # stratum 2 has no scores
    >>> cut.ranks[:, 0].tolist(), cut.cutoffs[:, 0].tolist(), cut.has_reference.tolist()
    ([2, 3, 5], [2.0, 7.0, 5.0], [True, True, False])
    """
    n_reference = reference_scores.size
    stratum_sizes = np.bincount(reference_strata, minlength=n_strata)
    has_reference = stratum_sizes > 0
    reference_sizes = np.where(has_reference, stratum_sizes, n_reference)
    levels = np.asarray(levels, dtype=np.float64)
    ranks = cutoff_ranks(reference_sizes[:, None], levels[None, :])
    # Order statistics per stratum: sort by (stratum, score) and index each stratum's block.
    ordered = reference_scores[np.lexsort((reference_scores, reference_strata))]
    starts = np.concatenate([[0], np.cumsum(stratum_sizes)[:-1]])
    cutoffs = ordered[np.minimum(starts[:, None] + ranks - 1, n_reference - 1)]
    if not has_reference.all():
        whole = np.sort(reference_scores)[cutoff_ranks(n_reference, levels) - 1]
        cutoffs = np.where(has_reference[:, None], cutoffs, whole[None, :])
    return StratifiedCutoffs(ranks=ranks, reference_sizes=reference_sizes, cutoffs=cutoffs, has_reference=has_reference)


def _check_alternative(alternative: str) -> str:
    return check_choice("alternative", alternative, TAIL_ALTERNATIVES)


def placement_pvalues(
    counts: np.ndarray,
    stratum_sizes: np.ndarray,
    ranks: np.ndarray,
    n_reference: np.ndarray,
    *,
    alternative: str = "less",
) -> np.ndarray:
    """Exact p-values of tail counts against cut-offs at reference order statistics.

    For validated counts (the public test is :func:`reference_tail_test`). Each of T tests
    counts, in every stratum s, the query samples at or below the ``ranks[t, s]``-th smallest of
    the stratum's ``n_reference[s]`` reference scores.

    Parameters
    ----------
    counts : ndarray of int, shape (n_tests,)
        Query samples in the tail, summed over strata.
    stratum_sizes : ndarray of int, shape (n_strata,)
        Query samples per stratum.
    ranks : ndarray of int, shape (n_tests, n_strata)
    n_reference : ndarray of int, shape (n_strata,)
    alternative : {"less", "greater"}

    Returns
    -------
    ndarray of shape (n_tests,)

    Notes
    -----
    If the query and reference scores of a stratum are independent draws from one continuous
    distribution, the reference distribution's mass below its j-th of n order statistics is
    Beta(j, n + 1 - j), so the query count in the tail is BetaBinomial(n_q, j, n + 1 - j): the
    placement (rank) distribution, exact whatever the distribution is. Strata are independent,
    so the total count's law is the convolution of the strata's laws.
    """
    counts = np.asarray(counts, dtype=np.int64)
    stratum_sizes = np.asarray(stratum_sizes, dtype=np.int64)
    ranks = np.asarray(ranks, dtype=np.int64).reshape(counts.size, stratum_sizes.size)
    n_reference = np.asarray(n_reference, dtype=np.int64)
    used = np.flatnonzero(stratum_sizes > 0)
    if used.size == 1:
        s = used[0]
        # Tests often share a cut-off rank (several signals at one level): one law per rank.
        unique_ranks, which = np.unique(ranks[:, s], return_inverse=True)
        pmf = betabinom_pmf(int(stratum_sizes[s]), unique_ranks, n_reference[s] + 1 - unique_ranks)
        return tail_probability(pmf[which], counts, alternative)
    pvalues = np.empty(counts.size)
    for t in range(counts.size):  # a handful of tests, each a convolution over a handful of strata
        pmf = np.ones(1)
        for s in used:
            stratum_pmf = betabinom_pmf(int(stratum_sizes[s]), ranks[t, s], n_reference[s] + 1 - ranks[t, s])
            pmf = np.convolve(pmf, stratum_pmf)
        pvalues[t] = tail_probability(pmf[None, :], counts[t : t + 1], alternative)[0]
    return pvalues


def reference_tail_test(
    query_scores: np.ndarray,
    reference_scores: np.ndarray,
    *,
    level: float,
    query_strata: np.ndarray | None = None,
    reference_strata: np.ndarray | None = None,
    alternative: str = "less",
) -> TailTestResult:
    """Exact test that the query's share at or below a low reference quantile differs from the reference's.

    The cut-off is the ``cutoff_ranks(n, level)``-th smallest reference score (per stratum when
    strata are given). No reference sample is spent on choosing it: the test is exact by the
    placement (rank) argument in :func:`placement_pvalues`.

    Parameters
    ----------
    query_scores : ndarray of shape (n_query,)
        Membership scores of the query set on the target (higher = more member-like).
    reference_scores : ndarray of shape (n_reference,)
        The same score on reference data the target never saw.
    level : float
        Quantile level of the cut-off in (0, 1), e.g. 0.05.
    query_strata, reference_strata : ndarray of int, optional
        Strata (class labels) for per-stratum cut-offs; both or neither.
    alternative : {"less", "greater"}
        * ``"less"``: the query puts fewer samples in the tail than the reference, i.e. it is
          more member-like (the test of H0 "removed").
        * ``"greater"``: the query puts more samples in the tail.

    Returns
    -------
    TailTestResult
        ``null_share`` is the expected reference level of the cut-offs.

    Raises
    ------
    InputError
        On empty or non-finite scores, a level outside (0, 1), strata given on one side only,
        or a query stratum that the reference lacks.

    Notes
    -----
    H0: query and reference scores are independent draws from the same distribution (within
    each stratum): the query set behaves like data the model never saw. Ties count as "at or
    below" for ``"less"`` and as "strictly below" for ``"greater"``, which keeps the test
    conservative when scores tie.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> res = reference_tail_test(rng.uniform(0.2, 1, 500), rng.uniform(0, 1, 1000), level=0.1)
    >>> res.pvalue < 1e-6
    True
    """
    check_open_unit("level", level)
    _check_alternative(alternative)
    query_scores = check_score_vector("query_scores", query_scores)
    reference_scores = check_score_vector("reference_scores", reference_scores)
    query_strata, reference_strata, n_strata = check_paired_strata(
        ("query_strata", "reference_strata"),
        (query_strata, reference_strata),
        (query_scores.size, reference_scores.size),
    )
    stratum_sizes = np.bincount(query_strata, minlength=n_strata)
    cut = stratified_cutoffs(reference_scores, reference_strata, np.array([level]), n_strata=n_strata)
    missing = np.flatnonzero((stratum_sizes > 0) & ~cut.has_reference)
    if missing.size:
        raise InputError(f"expected reference scores for every query stratum, got none for strata {missing.tolist()}")
    query_cutoffs = cut.cutoffs[query_strata, 0]
    in_tail = query_scores <= query_cutoffs if alternative == "less" else query_scores < query_cutoffs
    count = int(in_tail.sum())
    pvalue = placement_pvalues(
        np.array([count]), stratum_sizes, cut.ranks.T, cut.reference_sizes, alternative=alternative
    )[0]
    weights = stratum_sizes / query_scores.size
    null_share = float(np.sum(weights * cut.ranks[:, 0] / (cut.reference_sizes + 1.0)))
    return TailTestResult(
        statistic=count, pvalue=float(pvalue), alternative=alternative, n=query_scores.size, null_share=null_share
    )


def expected_cutoff_levels(ranks: np.ndarray, reference_sizes: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Expected reference level of each cut-off for a query spread over strata with shares ``weights``.

    The j-th smallest of n reference scores sits at level j / (n + 1) on average; a query meets
    each cut-off at the mean of its strata's levels, weighted by its share in each. For validated
    input: ``ranks`` (n_strata, n_levels), ``reference_sizes`` and ``weights`` (n_strata,).

    Examples
    --------
    >>> expected_cutoff_levels(np.array([[10, 50], [1, 5]]), np.array([99, 9]), np.array([0.5, 0.5])).tolist()
    [0.1, 0.5]
    """
    return weights @ (ranks / (reference_sizes[:, None] + 1.0))


def order_statistic_level_variance(ranks: np.ndarray, n_reference: np.ndarray) -> np.ndarray:
    """Variance of Beta(j, n + 1 - j): the spread of the true level of a j-th order statistic."""
    ranks = np.asarray(ranks, dtype=np.float64)
    n_reference = np.asarray(n_reference, dtype=np.float64)
    mean = ranks / (n_reference + 1.0)
    return mean * (1.0 - mean) / (n_reference + 2.0)
