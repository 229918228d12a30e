"""Set-level decisions on membership vectors.

The paper's aggregation compares the membership vector M (1 = flagged as member) with an
all-ones vector of the same length by a two-sample test; the p-value is rho_EMA.

The calibrated tests below (used by ``CalibratedAuditor``) work on continuous scores instead:
exact placement tests of the query's share in the low tail of the target's own non-member
scores (H0 "removed"), beta-binomial tests against the member tail share measured on a
calibration model (H0 "retained"), family-wise corrections, the retained fraction with an
interval, a target-only lower bound on it, and the query size needed for a given power.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
from scipy import special, stats

from ema.errors import InputError

EMA_TESTS = ("t", "ks")


def check_flags(flags: np.ndarray) -> np.ndarray:
    """Validate a non-empty 1-D vector of 0/1 (or bool) flags and return it as float64."""
    flags = np.asarray(flags)
    if flags.ndim != 1 or flags.size == 0:
        raise InputError(f"expected a non-empty 1-D membership vector, got shape {flags.shape}")
    if not np.isin(flags, (0, 1)).all():
        raise InputError("expected membership flags of 0 or 1, got other values")
    return flags.astype(np.float64)


def ema_pvalue(flags: np.ndarray, test: Literal["t", "ks"] = "t") -> float:
    """rho_EMA: p-value of a two-sample test of the membership vector against all ones.

    Parameters
    ----------
    flags : ndarray of shape (n_query,)
        1 where a query sample is flagged as a member.
    test : {"t", "ks"}
        ``"t"``: Student's two-sample t-test with pooled variance (the paper's main
        results); ``"ks"``: the two-sample Kolmogorov-Smirnov test (its ablation).

    Returns
    -------
    float
        The p-value; 1.0 when every sample is flagged (the vectors are equal).

    Notes
    -----
    H0: M and the all-ones vector come from the same distribution, i.e. the query set is
    memorized. A small p-value (<= alpha) says the query set is not memorized. The t-test
    p-value depends on the number of unflagged samples far more than on their share.

    Examples
    --------
    >>> round(ema_pvalue(np.array([1, 1, 1, 1, 0])), 2)
    0.35
    """
    flags = check_flags(flags)
    if test not in EMA_TESTS:
        raise InputError(f"expected test in {EMA_TESTS}, got {test!r}")
    if flags.all():
        return 1.0
    ones = np.ones_like(flags)
    if test == "t":
        with warnings.catch_warnings():
            # scipy warns that the all-ones sample is constant; its variance is exactly 0 and the
            # pooled variance comes from M alone, so the p-value is exact.
            warnings.filterwarnings("ignore", message="Precision loss occurred", category=RuntimeWarning)
            return float(stats.ttest_ind(flags, ones, equal_var=True).pvalue)
    with warnings.catch_warnings():
        # for some counts scipy's exact KS distribution does not converge and it falls back
        # to the asymptotic one, which it says in a warning; the p-value it returns is that one.
        warnings.filterwarnings("ignore", message="ks_2samp: Exact calculation unsuccessful", category=RuntimeWarning)
        return float(stats.ks_2samp(flags, ones).pvalue)


# ======================================================================================
# Calibrated tests (used by ``ema.auditors.calibrated.CalibratedAuditor``).
#
# Scores are membership metrics, higher = more member-like. A "tail" is the set of scores at
# or below a low cut-off. Members of a model leave that tail (they score higher), so a query
# set that is still memorized puts FEWER samples in the tail than the target's non-members.
# ======================================================================================

#: Alternatives of the tail tests, spelled as in scipy.stats.
TAIL_ALTERNATIVES = ("less", "greater")
#: Family-wise corrections for testing several metrics and cut-offs at once.
CORRECTIONS = ("holm", "bonferroni")
#: Pseudo-count added to each side of a share estimated from counts (the Jeffreys prior
#: Beta(1/2, 1/2)): a share estimated from zero observed samples stays above an impossible 0.
JEFFREYS_PSEUDOCOUNT = 0.5
#: Monte Carlo draws for the retained-fraction interval.
DEFAULT_INTERVAL_DRAWS = 4000


class ConfidenceInterval(NamedTuple):
    """A confidence interval ``(low, high)``, as scipy.stats returns them."""

    low: float
    high: float


@dataclass(frozen=True)
class TailTestResult:
    """One-sided test on the number of query samples at or below a cut-off.

    Attributes
    ----------
    statistic : int
        Number of query samples at or below the cut-off.
    pvalue : float
        The one-sided p-value.
    alternative : {"less", "greater"}
        ``"less"``: the query has a smaller tail share than the null; ``"greater"``: larger.
    n : int
        Number of query samples.
    null_share : float
        The tail share expected under the null hypothesis.
    """

    statistic: int
    pvalue: float
    alternative: str
    n: int
    null_share: float

    def confidence_interval(self, confidence_level: float = 0.95) -> ConfidenceInterval:
        """Clopper-Pearson interval for the query's tail share, one-sided like the test.

        ``"less"`` gives ``(0, high)``, ``"greater"`` gives ``(low, 1)``.
        """
        _check_unit_interval("confidence_level", confidence_level)
        ci = stats.binomtest(self.statistic, self.n, alternative=self.alternative).proportion_ci(
            confidence_level=confidence_level, method="exact"
        )
        return ConfidenceInterval(float(ci.low), float(ci.high))


@dataclass(frozen=True)
class MemberTailRates:
    """The member tail curve T evaluated at several non-member levels (arrays of one shape).

    Attributes
    ----------
    level : ndarray
        Non-member quantile levels.
    rate : ndarray
        Share of members at or below the non-members' ``level``-quantile, with the Jeffreys
        pseudo-count (never exactly 0 or 1).
    variance : ndarray
        Sampling variance of ``rate``: member counts plus the calibration non-member quantile.
    slope : ndarray
        Local slope dT/dlevel (secant over [level/2, 2 level], at least T(level)/level).
    n_members : int
        Members the curve was measured on.
    """

    level: np.ndarray
    rate: np.ndarray
    variance: np.ndarray
    slope: np.ndarray
    n_members: int


@dataclass(frozen=True)
class MemberTailCurve:
    """How a model's members sit in its non-members' low tail: T(level).

    T(level) is the share of members scoring at or below the non-members' ``level``-quantile.
    It is invariant to any increasing transformation of the score, which is what lets it be
    measured on a calibration model and transferred to the target (see Notes of
    :func:`member_tail_curve`). Build it with :func:`member_tail_curve`.

    Attributes
    ----------
    n_members : int
        Members that the curve pools (those whose stratum has non-members).
    stratum_nonmembers : ndarray of shape (n_strata,)
        Non-members per stratum.
    stratum_members : ndarray of shape (n_strata,)
        Members per stratum.
    cumulative : tuple of ndarray
        For stratum s, ``cumulative[s][r]`` is the number of its members at or below its r-th
        smallest non-member score (r = 0..n_s, entry 0 is 0).
    """

    n_members: int
    stratum_nonmembers: np.ndarray
    stratum_members: np.ndarray
    cumulative: tuple

    def raw_rate(self, levels: np.ndarray) -> np.ndarray:
        """T(level) without pseudo-counts: rank-interpolated member share, any array shape."""
        levels = np.clip(np.asarray(levels, dtype=np.float64), 0.0, 1.0)
        members_below = np.zeros_like(levels)
        for n_nonmembers, cumulative in zip(self.stratum_nonmembers, self.cumulative):
            # The r-th of n non-member order statistics sits at level r / (n + 1) on average.
            rank = levels * (n_nonmembers + 1)
            members_below += np.interp(rank, np.arange(n_nonmembers + 1), cumulative)
        return members_below / self.n_members

    def rates(self, levels: np.ndarray) -> MemberTailRates:
        """T at ``levels`` with its sampling variance and local slope.

        Parameters
        ----------
        levels : array_like
            Non-member quantile levels in (0, 1).

        Returns
        -------
        MemberTailRates
        """
        levels = np.asarray(levels, dtype=np.float64)
        if np.any((levels <= 0) | (levels >= 1)) or not np.isfinite(levels).all():
            raise InputError(f"expected levels in (0, 1), got {levels.tolist()}")
        raw = self.raw_rate(levels)
        n = self.n_members
        rate = (raw * n + JEFFREYS_PSEUDOCOUNT) / (n + 2 * JEFFREYS_PSEUDOCOUNT)
        low, high = levels / 2.0, np.minimum(1.0, 2.0 * levels)
        secant = (self.raw_rate(high) - self.raw_rate(low)) / (high - low)
        # Members score higher than non-members (monotone likelihood ratio), so T is convex and
        # its slope at a level is at least the secant from the origin.
        slope = np.maximum(secant, rate / levels)
        weights = self.stratum_members / n
        level_variance = levels * (1.0 - levels) * np.sum(weights**2 / (self.stratum_nonmembers + 2.0))
        variance = rate * (1.0 - rate) / n + slope**2 * level_variance
        return MemberTailRates(level=levels, rate=rate, variance=variance, slope=slope, n_members=n)

    def draw(self, levels: np.ndarray, n_draws: int, rng: np.random.Generator) -> np.ndarray:
        """Joint draws of T at increasing ``levels`` reflecting the calibration samples' uncertainty.

        Member counts below the non-member quantiles get the Dirichlet law of their nested bins
        (Jeffreys pseudo-count per bin); the true levels of those quantiles get the exact
        Dirichlet law of order-statistic spacings, and move T along its slope. For validated,
        strictly increasing levels in (0, 1).

        Returns
        -------
        ndarray of shape (n_draws, n_levels)
        """
        levels = np.asarray(levels, dtype=np.float64)
        rates = self.rates(levels)
        member_counts = self.raw_rate(levels) * self.n_members
        draws = _nested_dirichlet(rng, member_counts, self.n_members, n_draws, JEFFREYS_PSEUDOCOUNT)
        weights = self.stratum_members / self.n_members
        true_levels = np.zeros((n_draws, levels.size))
        for weight, n_nonmembers in zip(weights, self.stratum_nonmembers):
            true_levels += weight * _nested_dirichlet(rng, levels * (n_nonmembers + 1), n_nonmembers + 1, n_draws, 0.0)
        # The members were counted below quantiles whose true level is true_levels; T at `levels`
        # is that count moved back along the slope.
        return draws - rates.slope * (true_levels - levels)


@dataclass(frozen=True)
class RetainedFraction:
    """Estimated share of a query set that the model still memorizes.

    Attributes
    ----------
    estimate : float
        pi_hat = sum_c (F_non - F_q) / sum_c (F_non - F_mem) over the cut-offs c, clipped to
        [0, 1]; NaN when members and non-members are not separated.
    low, high : float
        Confidence bounds, clipped to [0, 1].
    confidence_level : float
        Confidence level of ``(low, high)``.
    """

    estimate: float
    low: float
    high: float
    confidence_level: float

    def confidence_interval(self) -> ConfidenceInterval:
        return ConfidenceInterval(self.low, self.high)


@dataclass(frozen=True)
class RetainedLowerBound:
    """Target-only lower confidence bound on the retained fraction.

    Attributes
    ----------
    statistic : float
        D+ = max_c (F_ref(c) - F_q(c)), the one-sided two-sample Kolmogorov-Smirnov distance.
    low : float
        ``statistic`` less the finite-sample margins of both samples, clipped to [0, 1].
    confidence_level : float
    n : int
        Query samples.
    n_reference : int
        Reference samples.
    """

    statistic: float
    low: float
    confidence_level: float
    n: int
    n_reference: int


@dataclass(frozen=True)
class QuerySizeResult:
    """The smallest query size at which a member set is told apart from non-members.

    Attributes
    ----------
    n_required : int or None
        Smallest |D_q| reaching ``target_power`` (None when no size up to ``max_n`` does).
    power : float
        Power achieved at ``n_required`` (at ``max_n`` when None).
    target_power : float
    alpha : float
        Family-wise significance level; each test runs at ``alpha / n_tests``.
    n_tests : int
    level : float
        Reference quantile level of the test that reaches the power.
    metric_index : int
        Row of ``member_rates`` of that test.
    """

    n_required: int | None
    power: float
    target_power: float
    alpha: float
    n_tests: int
    level: float
    metric_index: int


def _check_unit_interval(name: str, value: float) -> float:
    if not (isinstance(value, (int, float, np.floating, np.integer)) and 0.0 < float(value) < 1.0):
        raise InputError(f"expected `{name}` in (0, 1), got {value!r}")
    return float(value)


def _check_alternative(alternative: str) -> str:
    if alternative not in TAIL_ALTERNATIVES:
        raise InputError(f"expected `alternative` in {TAIL_ALTERNATIVES}, got {alternative!r}")
    return alternative


def _check_score_vector(name: str, scores: np.ndarray) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0:
        raise InputError(f"expected `{name}` to be a non-empty 1-D array of scores, got shape {scores.shape}")
    if not np.isfinite(scores).all():
        raise InputError(f"expected finite `{name}`, got {int((~np.isfinite(scores)).sum())} NaN or inf values")
    return scores


def _check_strata(name: str, strata: np.ndarray | None, size: int) -> np.ndarray:
    if strata is None:
        return np.zeros(size, dtype=np.int64)
    strata = np.asarray(strata)
    if strata.shape != (size,) or not np.issubdtype(strata.dtype, np.integer) or (strata.size and strata.min() < 0):
        raise InputError(
            f"expected `{name}` to be non-negative integers of shape ({size},) (e.g. class labels), "
            f"got shape {strata.shape} and dtype {strata.dtype}"
        )
    return strata.astype(np.int64, copy=False)


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


def _betabinom_pmf(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Beta-binomial pmf over 0..n for each (a, b); shape ``a.shape + (n + 1,)``. Validated input."""
    a = np.asarray(a, dtype=np.float64)[..., None]
    b = np.asarray(b, dtype=np.float64)[..., None]
    # pmf(0) = B(a, n + b) / B(a, b), then the ratio pmf(k + 1) / pmf(k) =
    # (n - k)(k + a) / ((k + 1)(n - k - 1 + b)): a cumulative sum of logarithms, much cheaper
    # than a log-beta function per entry.
    k = np.arange(n, dtype=np.float64)
    log_ratio = np.log(n - k) + np.log(k + a) - np.log(k + 1.0) - np.log(n - k - 1.0 + b)
    log_first = special.betaln(a, n + b) - special.betaln(a, b)
    log_pmf = np.concatenate([log_first, log_first + np.cumsum(log_ratio, axis=-1)], axis=-1)
    return np.exp(log_pmf)


def _tail_probability(pmf: np.ndarray, counts: np.ndarray, alternative: str) -> np.ndarray:
    """P(X <= count) ("less") or P(X >= count) ("greater") from pmf rows; summed from the tail side."""
    counts = np.asarray(counts, dtype=np.int64)
    if alternative == "less":
        tail = np.cumsum(pmf, axis=-1)
    else:
        tail = np.cumsum(pmf[..., ::-1], axis=-1)[..., ::-1]
    picked = np.take_along_axis(tail, counts.reshape(counts.shape + (1,)), axis=-1)[..., 0]
    return np.clip(picked, 0.0, 1.0)


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
        # Tests often share a cut-off rank (several metrics at one level): one law per rank.
        unique_ranks, which = np.unique(ranks[:, s], return_inverse=True)
        pmf = _betabinom_pmf(int(stratum_sizes[s]), unique_ranks, n_reference[s] + 1 - unique_ranks)
        return _tail_probability(pmf[which], counts, alternative)
    pvalues = np.empty(counts.size)
    for t in range(counts.size):  # a handful of tests, each a convolution over a handful of strata
        pmf = np.ones(1)
        for s in used:
            stratum_pmf = _betabinom_pmf(int(stratum_sizes[s]), ranks[t, s], n_reference[s] + 1 - ranks[t, s])
            pmf = np.convolve(pmf, stratum_pmf)
        pvalues[t] = _tail_probability(pmf[None, :], counts[t : t + 1], alternative)[0]
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
    _check_unit_interval("level", level)
    _check_alternative(alternative)
    query_scores = _check_score_vector("query_scores", query_scores)
    reference_scores = _check_score_vector("reference_scores", reference_scores)
    if (query_strata is None) != (reference_strata is None):
        raise InputError("expected `query_strata` and `reference_strata` both or neither, got only one")
    query_strata = _check_strata("query_strata", query_strata, query_scores.size)
    reference_strata = _check_strata("reference_strata", reference_strata, reference_scores.size)
    n_strata = int(max(query_strata.max(), reference_strata.max())) + 1
    stratum_sizes = np.bincount(query_strata, minlength=n_strata)
    n_reference = np.bincount(reference_strata, minlength=n_strata)
    missing = np.flatnonzero((stratum_sizes > 0) & (n_reference == 0))
    if missing.size:
        raise InputError(f"expected reference scores for every query stratum, got none for strata {missing.tolist()}")
    safe_n = np.maximum(n_reference, 1)
    ranks = cutoff_ranks(safe_n, np.full(n_strata, level))
    order = np.lexsort((reference_scores, reference_strata))
    starts = np.concatenate([[0], np.cumsum(n_reference)[:-1]])
    cutoffs = reference_scores[order][np.minimum(starts + ranks - 1, reference_scores.size - 1)]
    query_cutoffs = cutoffs[query_strata]
    in_tail = query_scores <= query_cutoffs if alternative == "less" else query_scores < query_cutoffs
    count = int(in_tail.sum())
    pvalue = placement_pvalues(np.array([count]), stratum_sizes, ranks[None, :], safe_n, alternative=alternative)[0]
    weights = stratum_sizes / query_scores.size
    null_share = float(np.sum(weights * ranks / (safe_n + 1.0)))
    return TailTestResult(
        statistic=count, pvalue=float(pvalue), alternative=alternative, n=query_scores.size, null_share=null_share
    )


def order_statistic_level_variance(ranks: np.ndarray, n_reference: np.ndarray) -> np.ndarray:
    """Variance of Beta(j, n + 1 - j): the spread of the true level of a j-th order statistic."""
    ranks = np.asarray(ranks, dtype=np.float64)
    n_reference = np.asarray(n_reference, dtype=np.float64)
    mean = ranks / (n_reference + 1.0)
    return mean * (1.0 - mean) / (n_reference + 2.0)


def member_tail_curve(
    member_scores: np.ndarray,
    nonmember_scores: np.ndarray,
    *,
    member_strata: np.ndarray | None = None,
    nonmember_strata: np.ndarray | None = None,
) -> MemberTailCurve:
    """Measure how members sit in the non-members' low tail on one model (usually a calibration model).

    Parameters
    ----------
    member_scores : ndarray of shape (n_members,)
        A membership score on the model's training samples.
    nonmember_scores : ndarray of shape (n_nonmembers,)
        The same score on samples it did not train on.
    member_strata, nonmember_strata : ndarray of int, optional
        Strata (class labels): levels are then measured against the non-members of the same
        stratum, and T pools the strata. Members of a stratum without non-members are left out
        with a warning.

    Returns
    -------
    MemberTailCurve

    Notes
    -----
    Transfer assumption: the target's members sit in the target's non-member tail as the
    calibration model's members sit in its own, i.e. T_target(level) = T_cal(level). T compares
    quantile levels, not raw scores, so it survives any increasing rescaling of the scores (a
    target more or less confident overall), but not a different generalisation gap: a
    calibration model that overfits more than the target puts its members further from the
    tail, underestimates T_target, and makes the test of H0 "retained" anti-conservative.
    """
    member_scores = _check_score_vector("member_scores", member_scores)
    nonmember_scores = _check_score_vector("nonmember_scores", nonmember_scores)
    if (member_strata is None) != (nonmember_strata is None):
        raise InputError("expected `member_strata` and `nonmember_strata` both or neither, got only one")
    member_strata = _check_strata("member_strata", member_strata, member_scores.size)
    nonmember_strata = _check_strata("nonmember_strata", nonmember_strata, nonmember_scores.size)
    n_strata = int(max(member_strata.max(), nonmember_strata.max())) + 1
    n_members = np.bincount(member_strata, minlength=n_strata)
    n_nonmembers = np.bincount(nonmember_strata, minlength=n_strata)
    dropped = np.flatnonzero((n_members > 0) & (n_nonmembers == 0))
    if dropped.size:
        warnings.warn(
            f"strata {dropped.tolist()} have members but no non-members; their members are left out of the "
            f"member tail curve",
            stacklevel=2,
        )
    used = np.flatnonzero((n_members > 0) & (n_nonmembers > 0))
    if used.size == 0:
        raise InputError("expected members and non-members in at least one common stratum, got none")
    cumulative = []
    for s in used:  # a loop over strata (classes), each step vectorised over samples
        nonmembers = np.sort(nonmember_scores[nonmember_strata == s])
        members = np.sort(member_scores[member_strata == s])
        below = np.searchsorted(members, nonmembers, side="right")
        cumulative.append(np.concatenate([[0], below]).astype(np.float64))
    return MemberTailCurve(
        n_members=int(n_members[used].sum()),
        stratum_nonmembers=n_nonmembers[used].astype(np.int64),
        stratum_members=n_members[used].astype(np.int64),
        cumulative=tuple(cumulative),
    )


def _beta_moments(mean: np.ndarray, variance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Beta(a, b) parameters with the given mean and variance (variance < mean (1 - mean))."""
    mean = np.asarray(mean, dtype=np.float64)
    variance = np.asarray(variance, dtype=np.float64)
    concentration = mean * (1.0 - mean) / variance - 1.0
    return mean * concentration, (1.0 - mean) * concentration


def member_tail_pvalues(counts: np.ndarray, n: int, null_share: np.ndarray, null_variance: np.ndarray) -> np.ndarray:
    """P(X >= count) for X ~ BetaBinomial with the null share's mean and variance; validated input.

    A zero variance gives the binomial tail.
    """
    counts = np.asarray(counts, dtype=np.int64)
    null_share = np.asarray(null_share, dtype=np.float64)
    null_variance = np.asarray(null_variance, dtype=np.float64)
    exact = null_variance <= 0
    pvalues = np.asarray(stats.binom.sf(counts - 1, n, null_share), dtype=np.float64)
    if (~exact).any():
        a, b = _beta_moments(null_share[~exact], null_variance[~exact])
        pmf = _betabinom_pmf(n, a, b)
        pvalues[~exact] = _tail_probability(pmf, counts[~exact], "greater")
    return np.clip(pvalues, 0.0, 1.0)


def member_tail_test(count: int, n: int, null_share: float, null_variance: float = 0.0) -> TailTestResult:
    """Test that a query puts more samples in the tail than members would (H0 "retained").

    Parameters
    ----------
    count : int
        Query samples at or below the cut-off.
    n : int
        Query samples.
    null_share : float
        Estimated share of members at or below the cut-off, in (0, 1).
    null_variance : float
        Sampling variance of ``null_share`` (0 treats it as known: the binomial test).

    Returns
    -------
    TailTestResult
        With ``alternative="greater"``.

    Notes
    -----
    H0: each query sample lands in the tail with the members' probability, which is known
    only up to ``null_variance``. The null share is given the Beta law with that mean and
    variance, and the count the resulting beta-binomial law; the p-value P(X >= count) thus
    accounts for the finite calibration and reference samples the share was estimated from.
    Alternative: the query has more tail mass than members, i.e. it is less memorized.

    Examples
    --------
    >>> res = member_tail_test(12, 100, 0.05)
    >>> bool(np.isclose(res.pvalue, stats.binomtest(12, 100, 0.05, alternative="greater").pvalue))
    True
    """
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise InputError(f"expected `n` to be a positive integer, got {n!r}")
    if not (isinstance(count, (int, np.integer)) and 0 <= count <= n):
        raise InputError(f"expected `count` to be an integer in 0..{n}, got {count!r}")
    _check_unit_interval("null_share", null_share)
    if not (np.isfinite(null_variance) and 0.0 <= null_variance < null_share * (1.0 - null_share)):
        raise InputError(
            f"expected `null_variance` in [0, null_share * (1 - null_share)) = [0, "
            f"{null_share * (1 - null_share):.4g}), "
            f"got {null_variance!r}"
        )
    pvalue = member_tail_pvalues(np.array([count]), int(n), np.array([null_share]), np.array([null_variance]))[0]
    return TailTestResult(
        statistic=int(count), pvalue=float(pvalue), alternative="greater", n=int(n), null_share=float(null_share)
    )


def adjust_pvalues(pvalues: np.ndarray, method: str = "holm") -> np.ndarray:
    """Family-wise error rate adjusted p-values (Holm's step-down or Bonferroni).

    Parameters
    ----------
    pvalues : array_like
        Unadjusted p-values, any shape.
    method : {"holm", "bonferroni"}

    Returns
    -------
    ndarray of the same shape
        Reject the hypotheses whose adjusted p-value is <= alpha; the family-wise error rate
        is then <= alpha under any dependence between the tests.

    Examples
    --------
    >>> adjust_pvalues([0.01, 0.04, 0.03], "holm").round(2).tolist()
    [0.03, 0.06, 0.06]
    """
    if method not in CORRECTIONS:
        raise InputError(f"expected `method` in {CORRECTIONS}, got {method!r}")
    pvalues = np.asarray(pvalues, dtype=np.float64)
    if pvalues.size == 0 or not np.isfinite(pvalues).all() or np.any((pvalues < 0) | (pvalues > 1)):
        raise InputError(f"expected a non-empty array of p-values in [0, 1], got {pvalues.tolist()}")
    flat = pvalues.ravel()
    m = flat.size
    if method == "bonferroni":
        return np.minimum(1.0, flat * m).reshape(pvalues.shape)
    order = np.argsort(flat, kind="stable")
    stepped = np.maximum.accumulate(np.minimum(1.0, flat[order] * (m - np.arange(m))))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    return adjusted.reshape(pvalues.shape)


#: Smallest Dirichlet parameter drawn through normalised gammas; below it gammas can underflow
#: to 0 and Generator.dirichlet's dedicated method is used.
_GAMMA_DIRICHLET_MIN_SHAPE = 0.1


def _nested_dirichlet(
    rng: np.random.Generator, cumulative: np.ndarray, total: float, size: int, prior: float
) -> np.ndarray:
    """Joint draws of nested shares: Dirichlet over the bins between nondecreasing cumulative counts.

    Returns the cumulative shares, shape (size, len(cumulative)). Bins with no weight (after
    ``prior``) stay empty. For validated input.
    """
    cumulative = np.asarray(cumulative, dtype=np.float64)
    bins = np.diff(np.concatenate([[0.0], cumulative, [float(total)]])) + prior
    positive = bins > 0
    shares = np.zeros((size, bins.size))
    if bins[positive].min() >= _GAMMA_DIRICHLET_MIN_SHAPE:
        # Normalised gamma draws: the Dirichlet law, several times faster than Generator.dirichlet.
        gammas = rng.standard_gamma(bins[positive], (size, int(positive.sum())))
        shares[:, positive] = gammas / gammas.sum(axis=1, keepdims=True)
    else:
        shares[:, positive] = rng.dirichlet(bins[positive], size)
    return np.cumsum(shares, axis=1)[:, :-1]


#: Bisection steps when inverting the exact mixture test (interval endpoints to 2**-12).
_BISECTION_STEPS = 12


def _widen_to_exact_interval(
    low: float, high: float, counts: np.ndarray, n: int, levels: np.ndarray, member_rates: np.ndarray, tail: float
) -> tuple[float, float]:
    """Widen ``[low, high]`` (within [0, 1]) to cover the interval from exact tests on the pooled count.

    W = sum of the nested tail counts; each query sample adds g = the number of cut-offs it is
    at or below (0..K), with law (1 - pi) q_non + pi q_mem (bin shares of the non-member levels
    and of the member rates, taken as known). W's exact law is the n-fold convolution,
    computed by FFT. Members leave the tail, so P(W <= w) grows with pi and P(W >= w) shrinks:
    the exact interval is {pi: P(W <= w) > tail and P(W >= w) > tail}. An endpoint is searched
    (bisection) only when it lies outside ``[low, high]``. For validated input.
    """
    n_levels = levels.size
    # Bin k lies between cut-offs k - 1 and k; a sample there is at or below n_levels - k cut-offs.
    q_non = np.diff(np.concatenate([[0.0], levels, [1.0]]))[::-1]
    q_mem = np.clip(np.diff(np.concatenate([[0.0], np.maximum.accumulate(member_rates), [1.0]])), 0.0, None)[::-1]
    q_mem = q_mem / q_mem.sum()
    observed = int(np.sum(counts))
    support = n * n_levels + 1
    size = 1 << int(np.ceil(np.log2(support)))
    # The transform is linear in the law, so each mixture's transform mixes these two.
    spectra = np.fft.rfft(np.stack([q_non, q_mem]), size)

    def tails(pi: float) -> tuple[float, float]:
        """P(W <= w) and P(W >= w) at pi."""
        pmf = np.clip(np.fft.irfft(((1.0 - pi) * spectra[0] + pi * spectra[1]) ** n, size)[:support], 0.0, None)
        return float(pmf[: observed + 1].sum()), float(pmf[observed:].sum())

    if tails(low)[0] > tail:  # low is not rejected: the exact lower end lies in [0, low]
        below, above = 0.0, low
        if tails(0.0)[0] > tail:
            above = 0.0
        for _ in range(_BISECTION_STEPS if above > 0 else 0):
            middle = (below + above) / 2.0
            below, above = (middle, above) if tails(middle)[0] <= tail else (below, middle)
        low = above
    if tails(high)[1] > tail:  # high is not rejected: the exact upper end lies in [high, 1]
        below, above = high, 1.0
        if tails(1.0)[1] > tail:
            below = 1.0
        for _ in range(_BISECTION_STEPS if below < 1 else 0):
            middle = (below + above) / 2.0
            below, above = (below, middle) if tails(middle)[1] <= tail else (middle, above)
        high = below
    return low, high


def retained_fraction_interval(
    counts: np.ndarray,
    n: int,
    *,
    reference_ranks: np.ndarray,
    reference_sizes: np.ndarray,
    member_curve: MemberTailCurve,
    stratum_weights: np.ndarray | None = None,
    confidence_level: float = 0.9,
    n_draws: int = DEFAULT_INTERVAL_DRAWS,
    random_state: int | np.random.Generator | None = None,
) -> RetainedFraction:
    """Estimate the share pi of a query set still memorized, with a confidence interval.

    Parameters
    ----------
    counts : ndarray of int, shape (n_levels,)
        Query samples at or below each cut-off; cut-offs increase, so counts do too.
    n : int
        Query samples.
    reference_ranks : ndarray of int, shape (n_levels,) or (n_strata, n_levels)
        Rank of each cut-off among the target's reference scores (of each stratum).
    reference_sizes : int or ndarray of int, shape (n_strata,)
        Reference samples (per stratum).
    member_curve : MemberTailCurve
        The member tail curve (transferred from a calibration model).
    stratum_weights : ndarray of shape (n_strata,), optional
        Share of the query in each stratum; required with several strata.
    confidence_level : float
        Two-sided confidence level of the interval.
    n_draws : int
        Monte Carlo draws.
    random_state : int, Generator or None
        Seed of the draws.

    Returns
    -------
    RetainedFraction

    Notes
    -----
    A query set that mixes a share pi of members with non-members has, at every cut-off c,
    tail share F_q(c) = pi F_mem(c) + (1 - pi) F_non(c). Pooling the cut-offs with equal
    weights, pi = sum_c (F_non - F_q) / sum_c (F_non - F_mem): a fixed combination, so no
    cut-off is picked after seeing data (picking the one that looks most separated biases the
    estimate). F_non is the expected reference level of each cut-off and F_mem the member
    curve at it. The interval propagates the joint uncertainty of all three by Monte Carlo:
    the query's nested tail counts (Dirichlet posterior, prior weight 1 spread over the bins:
    for one cut-off, the Jeffreys Beta(x + 1/2, n - x + 1/2)), the true
    levels of the reference order statistics (their exact Dirichlet law), the member curve
    (:meth:`MemberTailCurve.draw`), moved with the target's levels along its slope;
    percentiles of the draws. Draws where members and non-members are not separated count as
    pi = -inf for the lower bound and +inf for the upper one. For small query sets, where the
    discreteness of the counts matters more than the calibration's uncertainty, the interval
    is widened to cover the exact one from inverting tests on the pooled count (with the
    shares taken as known); the result is clipped to [0, 1].
    """
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise InputError(f"expected `n` to be a positive integer, got {n!r}")
    counts = np.atleast_1d(np.asarray(counts))
    if (
        counts.ndim != 1
        or not np.issubdtype(counts.dtype, np.integer)
        or np.any(counts < 0)
        or np.any(counts > n)
        or np.any(np.diff(counts) < 0)
    ):
        raise InputError(
            f"expected `counts` to be nondecreasing integers in 0..{n}, one per cut-off, got {counts.tolist()}"
        )
    reference_ranks = np.atleast_2d(np.asarray(reference_ranks, dtype=np.int64))
    reference_sizes = np.atleast_1d(np.asarray(reference_sizes, dtype=np.int64))
    n_strata = reference_sizes.size
    if (
        reference_ranks.shape != (n_strata, counts.size)
        or np.any(reference_ranks < 1)
        or np.any(reference_ranks > reference_sizes[:, None])
    ):
        raise InputError(
            f"expected `reference_ranks` of shape ({n_strata}, {counts.size}) with ranks in 1..reference size, "
            f"got shape {reference_ranks.shape}"
        )
    if stratum_weights is None:
        if n_strata != 1:
            raise InputError(f"expected `stratum_weights` for the {n_strata} strata, got None")
        stratum_weights = np.ones(1)
    stratum_weights = np.asarray(stratum_weights, dtype=np.float64)
    if (
        stratum_weights.shape != (n_strata,)
        or np.any(stratum_weights < 0)
        or not np.isclose(stratum_weights.sum(), 1.0)
    ):
        raise InputError(
            f"expected `stratum_weights` of shape ({n_strata},), non-negative and summing to 1, got "
            f"{stratum_weights.tolist()}"
        )
    _check_unit_interval("confidence_level", confidence_level)
    if not (isinstance(n_draws, (int, np.integer)) and n_draws >= 100):
        raise InputError(f"expected `n_draws` to be an integer >= 100, got {n_draws!r}")
    rng = np.random.default_rng(random_state)

    levels = stratum_weights @ (reference_ranks / (reference_sizes[:, None] + 1.0))
    # Cut-offs at one reference rank (small references) carry the same information: keep one.
    levels, first = np.unique(levels, return_index=True)
    counts, reference_ranks = counts[first], reference_ranks[:, first]
    rates = member_curve.rates(levels)
    separation = float(np.sum(levels - rates.rate))
    estimate = float(np.clip(np.sum(levels - counts / n) / separation, 0.0, 1.0)) if separation > 0 else float("nan")

    # Total prior weight 1 spread over the bins (Perks): for one cut-off, the Jeffreys Beta(x + 1/2, n - x + 1/2).
    query = _nested_dirichlet(rng, counts, n, n_draws, 1.0 / (levels.size + 1))
    nonmember = np.zeros((n_draws, levels.size))
    for weight, ranks, size in zip(stratum_weights, reference_ranks, reference_sizes):
        if weight > 0:
            nonmember += weight * _nested_dirichlet(rng, ranks, size + 1, n_draws, 0.0)
    member = member_curve.draw(levels, n_draws, rng) + rates.slope * (nonmember - levels)
    numerator = np.sum(nonmember - query, axis=1)
    denominator = np.sum(nonmember - member, axis=1)
    separated = denominator > 0
    pi = np.divide(numerator, denominator, out=np.zeros(n_draws), where=separated)
    tail = (1.0 - confidence_level) / 2.0
    # Order statistics, not interpolation (which is undefined between infinite draws); outward.
    low = float(np.clip(np.quantile(np.where(separated, pi, -np.inf), tail, method="lower"), 0.0, 1.0))
    high = float(np.clip(np.quantile(np.where(separated, pi, np.inf), 1.0 - tail, method="higher"), 0.0, 1.0))
    low, high = _widen_to_exact_interval(low, high, counts, n, levels, rates.rate, tail)
    return RetainedFraction(
        estimate=estimate,
        low=low,
        high=high,
        confidence_level=float(confidence_level),
    )


def retained_lower_bound(
    query_scores: np.ndarray,
    reference_scores: np.ndarray,
    *,
    confidence_level: float = 0.9,
) -> RetainedLowerBound:
    """Lower confidence bound on the retained fraction from target-only data.

    Parameters
    ----------
    query_scores : ndarray of shape (n_query,)
        A membership score of the query set on the target.
    reference_scores : ndarray of shape (n_reference,)
        The same score on reference data the target never saw.
    confidence_level : float
        The bound holds with at least this probability.

    Returns
    -------
    RetainedLowerBound

    Notes
    -----
    If a share pi of the query set is memorized and the rest behaves like the reference, then
    F_q = pi F_mem + (1 - pi) F_ref, so at every cut-off c, F_ref(c) - F_q(c) = pi (F_ref(c) -
    F_mem(c)) <= pi. Hence pi >= D+ = sup_c (F_ref(c) - F_q(c)), whatever the members do: no
    calibration model is involved. The empirical D+ overshoots by at most
    sqrt(log(2 / (1 - confidence_level)) / (2 n)) for each sample (the one-sided
    Dvoretzky-Kiefer-Wolfowitz-Massart bound, half the error probability to each sample).
    """
    _check_unit_interval("confidence_level", confidence_level)
    query_scores = np.sort(_check_score_vector("query_scores", query_scores))
    reference_scores = np.sort(_check_score_vector("reference_scores", reference_scores))
    cuts = np.concatenate([query_scores, reference_scores])
    gap = (
        np.searchsorted(reference_scores, cuts, side="right") / reference_scores.size
        - np.searchsorted(query_scores, cuts, side="right") / query_scores.size
    )
    statistic = float(max(0.0, gap.max()))
    log_term = np.log(2.0 / (1.0 - confidence_level))
    margin = np.sqrt(log_term / (2.0 * query_scores.size)) + np.sqrt(log_term / (2.0 * reference_scores.size))
    return RetainedLowerBound(
        statistic=statistic,
        low=float(np.clip(statistic - margin, 0.0, 1.0)),
        confidence_level=float(confidence_level),
        n=int(query_scores.size),
        n_reference=int(reference_scores.size),
    )


def _removal_power(
    n: int, member_rates: np.ndarray, ranks: np.ndarray, n_reference: int, test_alpha: float
) -> np.ndarray:
    """Power of each tail test of H0 removed on n members; member_rates (n_metrics, n_levels)."""
    pmf = _betabinom_pmf(n, ranks, n_reference + 1 - ranks)  # (n_levels, n + 1)
    # The largest count that is still rejected (-1 when even 0 is not).
    critical = (np.cumsum(pmf, axis=-1) <= test_alpha).sum(axis=-1) - 1
    power = stats.binom.cdf(critical[None, :], n, member_rates)
    return np.where(critical[None, :] >= 0, power, 0.0)


def required_query_size(
    member_rates: np.ndarray,
    levels: np.ndarray,
    n_reference: int,
    *,
    alpha: float = 0.1,
    power: float = 0.9,
    n_tests: int | None = None,
    max_n: int = 100_000,
) -> QuerySizeResult:
    """Smallest query size at which a member set is called memorized with the given power.

    Parameters
    ----------
    member_rates : array_like of shape (n_levels,) or (n_metrics, n_levels)
        Share of the target's members at or below each reference cut-off (e.g.
        ``MemberTailCurve.rates(levels).rate`` of each metric).
    levels : array_like of shape (n_levels,)
        Quantile levels of the cut-offs in the reference.
    n_reference : int
        Reference samples (the target's non-members) the cut-offs come from.
    alpha : float
        Family-wise significance level of the test of H0 "removed".
    power : float
        Required probability of rejecting H0 "removed" for a member set.
    n_tests : int, optional
        Size of the corrected family; ``member_rates.size`` by default.
    max_n : int
        Largest size considered.

    Returns
    -------
    QuerySizeResult

    Notes
    -----
    The power is exact for each test: the critical count comes from the placement law
    (:func:`placement_pvalues`) at level ``alpha / n_tests`` (Holm's first step, which decides
    whether H0 "removed" is rejected), and a member set's tail count is Binomial(n, member
    rate). The family rejects when any test does, so its power is at least that of the best
    test, which is what is used: the size returned is enough, possibly more than needed. The
    "memorized" verdict additionally needs H0 "retained" not to be rejected, which for a
    member set fails with probability at most alpha; so P(memorized) >= power - alpha. The
    power is a saw-toothed function of n (counts are discrete); the size is found by doubling
    and bisection on it.

    Examples
    --------
    >>> required_query_size([0.01, 0.02], [0.05, 0.1], 2000, alpha=0.1).n_required < 200
    True
    """
    _check_unit_interval("alpha", alpha)
    _check_unit_interval("power", power)
    levels = np.atleast_1d(np.asarray(levels, dtype=np.float64))
    member_rates = np.atleast_2d(np.asarray(member_rates, dtype=np.float64))
    if levels.ndim != 1 or member_rates.shape[-1] != levels.size or member_rates.ndim != 2:
        raise InputError(
            f"expected `member_rates` of shape (n_levels,) or (n_metrics, n_levels) with n_levels = {levels.size}, "
            f"got shape {member_rates.shape}"
        )
    if np.any((levels <= 0) | (levels >= 1)) or np.any((member_rates < 0) | (member_rates > 1)):
        raise InputError(
            f"expected levels in (0, 1) and member rates in [0, 1], got {levels.tolist()} and {member_rates.tolist()}"
        )
    if not (isinstance(n_reference, (int, np.integer)) and n_reference >= 1):
        raise InputError(f"expected `n_reference` to be a positive integer, got {n_reference!r}")
    if not (isinstance(max_n, (int, np.integer)) and max_n >= 1):
        raise InputError(f"expected `max_n` to be a positive integer, got {max_n!r}")
    n_tests = member_rates.size if n_tests is None else n_tests
    if not (isinstance(n_tests, (int, np.integer)) and n_tests >= member_rates.size):
        raise InputError(
            f"expected `n_tests` to be an integer >= {member_rates.size} (the tests given), got {n_tests!r}"
        )
    ranks = cutoff_ranks(int(n_reference), levels)
    test_alpha = alpha / n_tests

    def best(n: int) -> tuple[float, int, int]:
        table = _removal_power(n, member_rates, ranks, int(n_reference), test_alpha)
        metric, level = np.unravel_index(int(np.argmax(table)), table.shape)
        return float(table[metric, level]), int(metric), int(level)

    low, high = 0, 1
    while best(high)[0] < power:
        if high >= max_n:
            achieved, metric, level = best(max_n)
            return QuerySizeResult(
                None, achieved, float(power), float(alpha), int(n_tests), float(levels[level]), metric
            )
        low, high = high, min(2 * high, max_n)
    while high - low > 1:
        middle = (low + high) // 2
        if best(middle)[0] >= power:
            high = middle
        else:
            low = middle
    achieved, metric, level = best(high)
    return QuerySizeResult(high, achieved, float(power), float(alpha), int(n_tests), float(levels[level]), metric)
