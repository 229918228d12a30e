"""Statistics of the member-reference auditor: binned likelihood-ratio tests, a retained fraction, power.

Moves into the ``ema.stats`` package at merge; nothing here imports an auditor.

Every function works on one continuous membership score per sample (higher = more
member-like). Scores are binned at quantiles of the non-member side, and each bin gets the
log-likelihood ratio of members against non-members, w_k = log(P_mem(k) / P_non(k)), with
Jeffreys pseudo-counts. A query set's statistic is the sum of its samples' weights: the
Neyman-Pearson statistic of "all members" against "all non-members", up to the binning.
It weighs where membership shows: a target that never misclassifies its training samples
gives the low-score bins a strongly negative weight, so a query with non-member-like
mistakes is caught by a few samples, which a rank-sum test on the same score misses (the
member / non-member AUC is 0.53 to 0.56 on the workbench's MNIST and Fashion-MNIST targets).

The test of H0 "removed" is a permutation test whose bins and weights are computed from the
pooled query and non-member samples, so it is exact (given the member reference) whatever the
score's distribution or ties; the test of H0 "retained" weighs each member-reference sample
leave-one-out and compares the query with it. The retained share pi of a query set
(F_q = pi F_mem + (1 - pi) F_non) comes from a multinomial profile likelihood over the bins that
treats both references' bin shares as estimated, not known. Power comes from resampling the
member reference through the same test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from ema.errors import InputError

#: Pseudo-count added to every bin of a share estimate (Jeffreys): a bin without members gets a
#: finite, strongly negative weight instead of log(0).
JEFFREYS_PSEUDOCOUNT = 0.5
#: Quantile levels of the non-member side at which scores are binned: finer in the low tail,
#: where members of a well-trained target are rare (its non-members' mistakes sit there).
DEFAULT_BIN_LEVELS: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.95, 0.99)
#: Monte Carlo permutations of a test; the p-value (1 + hits) / (1 + draws) is exact for any number.
DEFAULT_N_PERMUTATIONS = 10_000
#: Resampled member queries behind a power estimate, and permutations per resampled test.
DEFAULT_POWER_RESAMPLES = 200
POWER_PERMUTATIONS = 1_000
#: Step of the retained-fraction grid on which the profile likelihood is evaluated.
FRACTION_GRID_STEP = 0.0025
#: EM iterations of the profile likelihood at each grid point (the nuisance shares converge fast:
#: the references are larger than most queries).
EM_ITERATIONS = 200
#: Relative tolerance when a permuted statistic is compared with the observed one (sums of floats).
STATISTIC_TOLERANCE = 1e-9
ALTERNATIVES = ("greater", "less")


# --------------------------------------------------------------------------- result objects
@dataclass(frozen=True)
class PermutationTestResult:
    """A binned likelihood-ratio permutation test.

    Attributes
    ----------
    statistic : float
        Sum of the query samples' log-likelihood-ratio weights.
    pvalue : float
        Monte Carlo permutation p-value, (1 + hits) / (1 + n_permutations).
    alternative : {"greater", "less"}
        "greater": the query is more member-like than the reference set it is compared with.
    n : int
        Query samples.
    n_permutations : int
    """

    statistic: float
    pvalue: float
    alternative: str
    n: int
    n_permutations: int


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


# --------------------------------------------------------------------------- validation
def check_scores(name: str, scores: np.ndarray) -> np.ndarray:
    """Refuse anything but a non-empty finite 1-d score vector; return it as float64."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0 or not np.isfinite(scores).all():
        raise InputError(f"expected `{name}` to be a non-empty 1-d array of finite scores, got shape {scores.shape}")
    return scores


def check_levels(levels) -> np.ndarray:
    """Refuse bin levels that are not strictly increasing in (0, 1)."""
    array = np.asarray(levels, dtype=np.float64)
    if array.ndim != 1 or array.size == 0 or np.any((array <= 0) | (array >= 1)) or np.any(np.diff(array) <= 0):
        raise InputError(f"expected bin levels strictly increasing in (0, 1), e.g. (0.1, 0.5, 0.9), got {levels!r}")
    return array


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InputError(f"expected `{name}` in {choices}, got {value!r}")
    return value


# --------------------------------------------------------------------------- binning
def quantile_edges(scores: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Bin edges at the order statistics ``ceil(level * n)`` of validated ``scores``; ties give equal edges."""
    ordered = np.sort(scores)
    ranks = np.clip(np.ceil(levels * ordered.size).astype(np.int64), 1, ordered.size)
    return ordered[ranks - 1]


def bin_counts(scores: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Samples per bin; bin k holds scores in (edges[k-1], edges[k]], the last bin everything above."""
    return np.bincount(np.searchsorted(edges, scores, side="left"), minlength=edges.size + 1)


def log_likelihood_ratio(member_counts: np.ndarray, nonmember_counts: np.ndarray) -> np.ndarray:
    """Per-bin weight log(P_mem / P_non), both shares with the Jeffreys pseudo-count."""
    n_bins = member_counts.size
    member = (member_counts + JEFFREYS_PSEUDOCOUNT) / (member_counts.sum() + JEFFREYS_PSEUDOCOUNT * n_bins)
    nonmember = (nonmember_counts + JEFFREYS_PSEUDOCOUNT) / (nonmember_counts.sum() + JEFFREYS_PSEUDOCOUNT * n_bins)
    return np.log(member) - np.log(nonmember)


# --------------------------------------------------------------------------- tests
def _permuted_sums(
    n_query: int, pool_counts: np.ndarray, pool_values: np.ndarray, n_permutations: int, rng: np.random.Generator
) -> np.ndarray:
    """Sums over random ``n_query``-subsets of a pool given as groups of equal values; validated input.

    ``pool_counts[g]`` samples are worth ``pool_values[g]``, so a random subset is one
    multivariate hypergeometric draw.
    """
    return rng.multivariate_hypergeometric(pool_counts, n_query, size=n_permutations) @ pool_values


def _tail_pvalues(statistic: float, permuted: np.ndarray, alternatives: tuple[str, ...]) -> dict[str, float]:
    """Monte Carlo p-values (1 + hits) / (1 + draws) of ``statistic`` against permuted statistics."""
    tolerance = STATISTIC_TOLERANCE * max(1.0, abs(statistic))
    hits = {
        "greater": np.count_nonzero(permuted >= statistic - tolerance),
        "less": np.count_nonzero(permuted <= statistic + tolerance),
    }
    return {alternative: (1.0 + hits[alternative]) / (1.0 + permuted.size) for alternative in alternatives}


def _pooled_removal(
    query: np.ndarray, nonmembers: np.ndarray, members: np.ndarray, levels: np.ndarray, n_permutations: int, rng
) -> tuple[float, np.ndarray]:
    """(statistic, permuted statistics) of the test of H0 "removed" (see :func:`removal_test`); validated input."""
    pool = np.concatenate([query, nonmembers])
    edges = quantile_edges(pool, levels)
    pool_counts = bin_counts(pool, edges)
    weights = log_likelihood_ratio(bin_counts(members, edges), pool_counts)
    statistic = float(bin_counts(query, edges) @ weights)
    return statistic, _permuted_sums(query.size, pool_counts, weights, n_permutations, rng)


def _check_test_inputs(alternatives, levels, *scores) -> tuple[np.ndarray, list[np.ndarray]]:
    for alternative in alternatives:
        _check_choice("alternative", alternative, ALTERNATIVES)
    names = ("query_scores", "reference_scores", "contrast_scores")
    return check_levels(levels), [check_scores(name, array) for name, array in zip(names, scores)]


def _results(statistic, pvalues, n, n_permutations) -> dict[str, PermutationTestResult]:
    return {
        alternative: PermutationTestResult(
            statistic=float(statistic),
            pvalue=float(pvalue),
            alternative=alternative,
            n=int(n),
            n_permutations=int(n_permutations),
        )
        for alternative, pvalue in pvalues.items()
    }


def removal_test(
    query_scores: np.ndarray,
    nonmember_scores: np.ndarray,
    member_scores: np.ndarray,
    *,
    alternatives: tuple[str, ...] = ("greater",),
    levels=DEFAULT_BIN_LEVELS,
    n_permutations: int = DEFAULT_N_PERMUTATIONS,
    random_state: int | np.random.Generator | None = None,
) -> dict[str, PermutationTestResult]:
    """Test H0 "removed": the query is exchangeable with the non-member reference.

    Parameters
    ----------
    query_scores : ndarray of shape (n_query,)
        Membership scores of the query on the target (higher = more member-like).
    nonmember_scores : ndarray of shape (n_nonmembers,)
        Scores of the non-member reference; H0 says the query is drawn like them.
    member_scores : ndarray of shape (n_members,)
        Scores of the member reference; they only shape the weights.
    alternatives : tuple of {"greater", "less"}
        One p-value per alternative, from the same permutations. "greater": the query is more
        member-like than non-members (retained data); "less": less member-like (over-unlearning,
        another domain).
    levels : sequence of float
        Quantile levels at which the scores are binned.
    n_permutations : int
        Monte Carlo permutations.
    random_state : int, Generator or None
        Seeds the permutations.

    Returns
    -------
    dict of str to PermutationTestResult
        By alternative.

    Raises
    ------
    InputError
        On empty or non-finite scores, bad levels or an unknown alternative.

    Notes
    -----
    H0: query and non-member reference samples are exchangeable. The bins sit at quantiles of
    the POOLED query and non-member samples and the weights are the binned log-likelihood ratio
    of the member reference against that pool, so bins and weights are invariant under
    permutations of the pool, and the statistic's permutation law (random subsets of the
    pool's bin counts: multivariate hypergeometric) is its exact law under H0, for any score
    distribution and any ties. The member reference is held fixed (the test is conditional on it).
    A large member-like query dilutes the pool's non-member character and so the weights; the
    test stays exact and such queries are rejected anyway.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> non, mem = rng.normal(0, 1, 1000), rng.normal(1, 1, 1000)
    >>> bool(removal_test(rng.normal(1, 1, 50), non, mem, random_state=0)["greater"].pvalue < 0.01)
    True
    """
    levels, (query, nonmembers, members) = _check_test_inputs(
        alternatives, levels, query_scores, nonmember_scores, member_scores
    )
    statistic, permuted = _pooled_removal(
        query, nonmembers, members, levels, n_permutations, np.random.default_rng(random_state)
    )
    return _results(statistic, _tail_pvalues(statistic, permuted, alternatives), query.size, n_permutations)


def retention_test(
    query_scores: np.ndarray,
    member_scores: np.ndarray,
    nonmember_scores: np.ndarray,
    *,
    alternatives: tuple[str, ...] = ("less",),
    levels=DEFAULT_BIN_LEVELS,
    n_permutations: int = DEFAULT_N_PERMUTATIONS,
    random_state: int | np.random.Generator | None = None,
) -> dict[str, PermutationTestResult]:
    """Test H0 "retained": the query is exchangeable with the member reference.

    Parameters
    ----------
    query_scores : ndarray of shape (n_query,)
    member_scores : ndarray of shape (n_members,)
        Scores of training samples of the target drawn like the query (other training folds).
    nonmember_scores : ndarray of shape (n_nonmembers,)
        Scores of the non-member reference; they only shape the bins and weights.
    alternatives : tuple of {"greater", "less"}
        "less" (the default): the query is less member-like than members (removed data).
    levels, n_permutations, random_state
        As in :func:`removal_test`.

    Returns
    -------
    dict of str to PermutationTestResult

    Notes
    -----
    H0: query and member reference samples are exchangeable. Bins sit at the non-member
    reference's quantiles; weights are the log-likelihood ratio of the member reference
    against the non-member reference. Each member's own weight is computed leave-one-out
    (its bin's member count minus itself), so that a member reference sample is weighed like
    a fresh sample would be; the p-value compares the query's sum with random subsets of the
    pooled query and member values. Unlike pooling the query into the member side (exact, but
    an other-domain query would then teach the weights that members look like it), this keeps
    the direction of the weights whatever the query is; the price is that it is exact only up
    to the leave-one-out step (one sample in a bin of thousands).
    """
    levels, (query, members, nonmembers) = _check_test_inputs(
        alternatives, levels, query_scores, member_scores, nonmember_scores
    )
    rng = np.random.default_rng(random_state)
    edges = quantile_edges(nonmembers, levels)
    member_counts, nonmember_counts = bin_counts(members, edges), bin_counts(nonmembers, edges)
    n_bins = member_counts.size
    weights = log_likelihood_ratio(member_counts, nonmember_counts)
    nonmember_log_share = np.log(
        (nonmember_counts + JEFFREYS_PSEUDOCOUNT) / (nonmember_counts.sum() + JEFFREYS_PSEUDOCOUNT * n_bins)
    )
    leave_one_out = (
        np.log(
            (np.maximum(member_counts - 1, 0) + JEFFREYS_PSEUDOCOUNT)
            / (member_counts.sum() - 1 + JEFFREYS_PSEUDOCOUNT * n_bins)
        )
        - nonmember_log_share
    )
    query_counts = bin_counts(query, edges)
    statistic = float(query_counts @ weights)
    pool_counts = np.concatenate([query_counts, member_counts])
    pool_values = np.concatenate([weights, leave_one_out])
    permuted = _permuted_sums(query.size, pool_counts, pool_values, n_permutations, rng)
    return _results(statistic, _tail_pvalues(statistic, permuted, alternatives), query.size, n_permutations)


# --------------------------------------------------------------------------- retained fraction
def _fraction_grid() -> np.ndarray:
    return np.linspace(0.0, 1.0, int(round(1.0 / FRACTION_GRID_STEP)) + 1)


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
    if not 0.0 < confidence_level < 1.0:
        raise InputError(f"expected confidence_level in (0, 1), got {confidence_level}")
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


# --------------------------------------------------------------------------- power
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
    members = check_scores("member_scores", member_scores)
    nonmembers = check_scores("nonmember_scores", nonmember_scores)
    levels = check_levels(levels)
    if not (isinstance(n_query, (int, np.integer)) and n_query >= 1):
        raise InputError(f"expected `n_query` to be a positive integer, got {n_query!r}")
    rng = np.random.default_rng(random_state)
    replace = n_query > members.size // 2
    rejected, z_scores, critical = np.empty(n_resamples, bool), np.empty(n_resamples), np.empty(n_resamples)
    for b in range(n_resamples):  # each resample is one vectorised test
        chosen = rng.choice(members.size, size=n_query, replace=replace)
        contrast = members if replace else np.delete(members, chosen)
        statistic, permuted = _pooled_removal(members[chosen], nonmembers, contrast, levels, n_permutations, rng)
        rejected[b] = _tail_pvalues(statistic, permuted, ("greater",))["greater"] <= alpha
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


# --------------------------------------------------------------------------- shift and gates
def class_mix_pvalue(query_labels: np.ndarray, reference_labels: np.ndarray, n_classes: int) -> float:
    """Chi-square test that the query's class mix is the reference's (classes absent from both dropped).

    Returns 1.0 when fewer than two classes occur. Validated integer labels in 0..n_classes-1.
    """
    table = np.stack(
        [np.bincount(query_labels, minlength=n_classes), np.bincount(reference_labels, minlength=n_classes)]
    )
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        return 1.0
    return float(stats.chi2_contingency(table, correction=False).pvalue)
