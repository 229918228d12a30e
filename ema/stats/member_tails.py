"""How members sit in the non-members' low tail (the member tail curve), and tests against it.

The curve is measured on a calibration model and transferred to the target; the tests of H0
"retained" compare a query's tail count with the share members would put there.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ema.errors import InputError
from ema.stats._beta_binomial import betabinom_pmf, tail_probability
from ema.stats._dirichlet import nested_dirichlet
from ema.stats._results import TailTestResult
from ema.stats._validation import (
    check_paired_strata,
    check_score_vector,
)
from ema.validation import check_open_unit, check_positive_int

#: Pseudo-count added to each side of a share estimated from counts (the Jeffreys prior
#: Beta(1/2, 1/2)): a share estimated from zero observed samples stays above an impossible 0.
JEFFREYS_PSEUDOCOUNT = 0.5


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
        for n_nonmembers, cumulative in zip(self.stratum_nonmembers, self.cumulative, strict=True):
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
        draws = nested_dirichlet(rng, member_counts, self.n_members, n_draws, JEFFREYS_PSEUDOCOUNT)
        weights = self.stratum_members / self.n_members
        true_levels = np.zeros((n_draws, levels.size))
        for weight, n_nonmembers in zip(weights, self.stratum_nonmembers, strict=True):
            true_levels += weight * nested_dirichlet(rng, levels * (n_nonmembers + 1), n_nonmembers + 1, n_draws, 0.0)
        # The members were counted below quantiles whose true level is true_levels; T at `levels`
        # is that count moved back along the slope.
        return draws - rates.slope * (true_levels - levels)


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
    member_scores = check_score_vector("member_scores", member_scores)
    nonmember_scores = check_score_vector("nonmember_scores", nonmember_scores)
    member_strata, nonmember_strata, n_strata = check_paired_strata(
        ("member_strata", "nonmember_strata"),
        (member_strata, nonmember_strata),
        (member_scores.size, nonmember_scores.size),
    )
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


#: Largest variance of a Beta null share, as a share of its ceiling mean (1 - mean).
MAX_VARIANCE_SHARE = 0.99


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
    ceiling = null_share * (1.0 - null_share)
    # A Beta law needs variance < mean (1 - mean): tied scores (outputs saturated at 1.0) can push the
    # estimated variance past it, and a share of exactly 0 or 1 has none to spare: cap, or go binomial.
    null_variance = np.minimum(np.asarray(null_variance, dtype=np.float64), MAX_VARIANCE_SHARE * ceiling)
    exact = (null_variance <= 0) | (ceiling <= 0)
    pvalues = np.asarray(stats.binom.sf(counts - 1, n, null_share), dtype=np.float64)
    if (~exact).any():
        a, b = _beta_moments(null_share[~exact], null_variance[~exact])
        pmf = betabinom_pmf(n, a, b)
        pvalues[~exact] = tail_probability(pmf, counts[~exact], "greater")
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
    check_positive_int("n", n)
    if not (isinstance(count, (int, np.integer)) and 0 <= count <= n):
        raise InputError(f"expected `count` to be an integer in 0..{n}, got {count!r}")
    check_open_unit("null_share", null_share)
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
