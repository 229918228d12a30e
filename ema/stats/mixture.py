"""The retained share of a query set as a mixture of member and non-member references, and detection power.

The retained share pi of a query set (F_q = pi F_mem + (1 - pi) F_non) comes from a multinomial
profile likelihood over the bins of :mod:`ema.stats.binned_tests` that treats both references'
bin shares as estimated, not known. Power comes from resampling the member reference through
the very test of H0 "removed".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from ema.errors import InputError
from ema.limits import check_deadline
from ema.stats._validation import check_score_vector
from ema.stats.binned_tests import (
    DEFAULT_BIN_LEVELS,
    JEFFREYS_PSEUDOCOUNT,
    check_levels,
    pooled_removal,
    tail_pvalues,
)
from ema.validation import check_open_unit

#: Resampled member queries behind a power estimate, and permutations per resampled test.
DEFAULT_POWER_RESAMPLES = 200


POWER_PERMUTATIONS = 1_000


#: Step of the retained-fraction grid on which the profile likelihood is evaluated.
FRACTION_GRID_STEP = 0.0025


#: EM iterations of the profile likelihood at each grid point (the nuisance shares converge fast:
#: the references are larger than most queries).
EM_ITERATIONS = 200


@dataclass(frozen=True)
class RetainedFractionResult:
    """The share pi of a query set that behaves like members, with a profile-likelihood interval.

    Attributes
    ----------
    estimate : float
        Maximum-likelihood pi on the grid, in [0, 1].
    low, high : float
        Interval at ``confidence_level``: every pi whose profile deviance is at most the
        chi-square(1) quantile.
    confidence_level : float
    fit_pvalue : float
        Goodness of fit of the mixture model (deviance of the best mixture against a free query
        distribution, chi-square with n_bins - 2 degrees of freedom): small when the query is
        like neither members nor non-members nor a mix (another domain, over-unlearning).
    n : int
        Query samples.
    """

    estimate: float
    low: float
    high: float
    confidence_level: float
    fit_pvalue: float
    n: int

    def confidence_interval(self) -> tuple[float, float]:
        return self.low, self.high


@dataclass(frozen=True)
class DetectionPower:
    """How well a query of ``n`` samples can be told from non-members, from the references alone.

    Attributes
    ----------
    n : int
        Query size.
    power_retained : float
        Probability that a fully memorized query of ``n`` samples rejects H0 "removed" at alpha.
    min_detectable_fraction : float
        Smallest retained share detected with probability ``power``; NaN when even a fully
        memorized query falls short.
    power : float
        The power that defines ``min_detectable_fraction``.
    alpha : float
    """

    n: int
    power_retained: float
    min_detectable_fraction: float
    power: float
    alpha: float


def _fraction_grid() -> np.ndarray:
    return np.linspace(0.0, 1.0, round(1.0 / FRACTION_GRID_STEP) + 1)


def mixture_profile_loglik(
    query_counts: np.ndarray, member_counts: np.ndarray, nonmember_counts: np.ndarray, fractions: np.ndarray
) -> np.ndarray:
    """Profile log-likelihood of each retained fraction, the bin shares of both roles profiled out; validated input.

    Model: member counts ~ Mult(n_m, p), non-member counts ~ Mult(n_r, q), query counts ~
    Mult(n_q, pi p + (1 - pi) q). For each pi, EM maximises over (p, q): the query's counts
    are split into a member part pi p / (pi p + (1 - pi) q) and the rest. Multinomial
    coefficients are left out (constant in pi).

    Returns
    -------
    ndarray of shape fractions.shape
    """
    fractions = fractions[:, None]
    n_bins = member_counts.size
    # Start from the smoothed reference shares: EM never leaves an exact zero.
    member = np.broadcast_to(
        (member_counts + JEFFREYS_PSEUDOCOUNT) / (member_counts.sum() + JEFFREYS_PSEUDOCOUNT * n_bins),
        (fractions.size, n_bins),
    )
    nonmember = np.broadcast_to(
        (nonmember_counts + JEFFREYS_PSEUDOCOUNT) / (nonmember_counts.sum() + JEFFREYS_PSEUDOCOUNT * n_bins),
        (fractions.size, n_bins),
    )
    n_query = query_counts.sum()
    for _ in range(EM_ITERATIONS):  # fixed-point iterations, each vectorised over the grid and the bins
        member_part = fractions * member
        mixture = member_part + (1.0 - fractions) * nonmember
        from_members = query_counts * np.divide(member_part, mixture, out=np.zeros_like(mixture), where=mixture > 0)
        member_total = member_counts.sum() + from_members.sum(axis=1, keepdims=True)
        member = (member_counts + from_members) / member_total
        nonmember = (nonmember_counts + query_counts - from_members) / (
            nonmember_counts.sum() + n_query - from_members.sum(axis=1, keepdims=True)
        )
    mixture = fractions * member + (1.0 - fractions) * nonmember
    return (
        special.xlogy(member_counts, member).sum(axis=1)
        + special.xlogy(nonmember_counts, nonmember).sum(axis=1)
        + special.xlogy(query_counts, mixture).sum(axis=1)
    )


def retained_fraction(
    query_counts: np.ndarray,
    member_counts: np.ndarray,
    nonmember_counts: np.ndarray,
    *,
    confidence_level: float = 0.9,
) -> RetainedFractionResult:
    """Estimate the retained share pi of a query set from binned counts, with a profile-likelihood interval.

    Parameters
    ----------
    query_counts, member_counts, nonmember_counts : ndarray of int, shape (n_bins,)
        Query, member-reference and non-member-reference samples per score bin (the same bins).
    confidence_level : float
        Level of the interval: pi values whose profile deviance 2 (l_max - l(pi)) is at most
        the chi-square(1) quantile (two-sided; each bound is one-sided at (1 + level) / 2).

    Returns
    -------
    RetainedFractionResult

    Raises
    ------
    InputError
        On mismatched or negative counts, an empty query or reference, or a level outside (0, 1).

    Notes
    -----
    Both references' bin shares are estimated, not known, and the profile likelihood carries
    their uncertainty into the interval: a 1,000-sample non-member reference limits the
    precision of pi however large the query is. A query unlike any mixture (other domain)
    is pushed to the boundary whose bins it resembles least badly; ``fit_pvalue`` says so.

    Examples
    --------
    >>> res = retained_fraction(np.array([30, 70]), np.array([100, 900]), np.array([500, 500]))
    >>> round(res.estimate, 2), res.low < 0.5 < res.high
    (0.5, True)
    """
    counts = [np.asarray(c) for c in (query_counts, member_counts, nonmember_counts)]
    if len({c.shape for c in counts}) != 1 or counts[0].ndim != 1 or counts[0].size < 2:
        raise InputError(
            f"expected three count vectors over the same >= 2 bins, got shapes {[c.shape for c in counts]}"
        )
    if any(np.any(c < 0) or c.sum() == 0 or not np.issubdtype(c.dtype, np.integer) for c in counts):
        raise InputError(f"expected non-negative integer counts with at least one sample each, got {counts}")
    check_open_unit("confidence_level", confidence_level)
    query, member, nonmember = (c.astype(np.float64) for c in counts)
    grid = _fraction_grid()
    profile = mixture_profile_loglik(query, member, nonmember, grid)
    best = int(np.argmax(profile))
    inside = grid[2.0 * (profile[best] - profile) <= stats.chi2.ppf(confidence_level, df=1)]
    saturated = sum(special.xlogy(c, c / c.sum()).sum() for c in (query, member, nonmember))
    deviance = max(0.0, 2.0 * (saturated - profile[best]))
    dof = query.size - 2
    fit_pvalue = float(stats.chi2.sf(deviance, dof)) if dof > 0 else 1.0
    return RetainedFractionResult(
        estimate=float(grid[best]),
        low=float(inside.min()),
        high=float(inside.max()),
        confidence_level=float(confidence_level),
        fit_pvalue=fit_pvalue,
        n=int(query.sum()),
    )


def resampled_power(
    member_scores: np.ndarray,
    nonmember_scores: np.ndarray,
    n_query: int,
    *,
    alpha: float = 0.1,
    power: float = 0.9,
    levels=DEFAULT_BIN_LEVELS,
    n_resamples: int = DEFAULT_POWER_RESAMPLES,
    n_permutations: int = POWER_PERMUTATIONS,
    random_state: int | np.random.Generator | None = None,
) -> DetectionPower:
    """Power of the test of H0 "removed" for a query of ``n_query`` samples, by resampling the member reference.

    Parameters
    ----------
    member_scores : ndarray of shape (n_members,)
        The member reference's scores on the target.
    nonmember_scores : ndarray of shape (n_nonmembers,)
        The non-member reference's scores.
    n_query : int
        Query size.
    alpha : float
        Level of the test.
    power : float
        The power that defines the minimum detectable fraction.
    levels : sequence of float
        Bin levels, as in :func:`removal_test`.
    n_resamples : int
        Resampled member queries.
    n_permutations : int
        Permutations per resampled test.
    random_state : int, Generator or None

    Returns
    -------
    DetectionPower

    Notes
    -----
    Each resample draws ``n_query`` members (without replacement while they are at most half the
    member reference, else with replacement) and runs the very test of :func:`removal_test`
    against the non-member reference, the remaining members shaping the weights:
    ``power_retained`` is the share rejected. It states the power of THIS test with THESE
    references, including the weights' estimation noise (an idealised calculation from the
    binned shares overstates it by up to 0.2 here).

    For the minimum detectable fraction, each resample's statistic is standardised by its
    permutation law (z_b); a query retaining a share pi has a standardised statistic of about
    N(pi mean(z), (1 - pi) + pi var(z)) (the statistic is a sum over samples), compared with the
    median of the resamples' standardised critical values; the smallest pi on a 0.01 grid whose
    power reaches ``power`` is returned, NaN when none does.
    """
    members = check_score_vector("member_scores", member_scores)
    nonmembers = check_score_vector("nonmember_scores", nonmember_scores)
    levels = check_levels(levels)
    if not (isinstance(n_query, (int, np.integer)) and n_query >= 1):
        raise InputError(f"expected `n_query` to be a positive integer, got {n_query!r}")
    rng = np.random.default_rng(random_state)
    replace = n_query > members.size // 2
    rejected, z_scores, critical = np.empty(n_resamples, bool), np.empty(n_resamples), np.empty(n_resamples)
    for b in range(n_resamples):  # each resample is one vectorised test
        check_deadline("resample the detection power")
        chosen = rng.choice(members.size, size=n_query, replace=replace)
        contrast = members if replace else np.delete(members, chosen)
        statistic, permuted = pooled_removal(members[chosen], nonmembers, contrast, levels, n_permutations, rng)
        rejected[b] = tail_pvalues(statistic, permuted, ("greater",))["greater"] <= alpha
        center, spread = permuted.mean(), max(permuted.std(), np.finfo(float).tiny)
        z_scores[b] = (statistic - center) / spread
        critical[b] = (np.quantile(permuted, 1.0 - alpha, method="higher") - center) / spread
    fractions = np.linspace(0.0, 1.0, 101)
    spread = np.sqrt((1.0 - fractions) + fractions * z_scores.var())
    curve = stats.norm.cdf((fractions * z_scores.mean() - np.median(critical)) / np.maximum(spread, 1e-12))
    reached = np.flatnonzero(curve >= power)
    return DetectionPower(
        n=int(n_query),
        power_retained=float(rejected.mean()),
        min_detectable_fraction=float(fractions[reached[0]]) if reached.size else float("nan"),
        power=float(power),
        alpha=float(alpha),
    )
