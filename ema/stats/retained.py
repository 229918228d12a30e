"""How much of a query set is still memorized: the retained fraction, its interval, a target-only bound."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ema.errors import InputError
from ema.stats._dirichlet import nested_dirichlet
from ema.stats._results import ConfidenceInterval
from ema.stats._validation import check_score_vector
from ema.stats.member_tails import MemberTailCurve
from ema.stats.placement import expected_cutoff_levels
from ema.validation import check_open_unit, check_positive_int

#: Monte Carlo draws for the retained-fraction interval.
DEFAULT_INTERVAL_DRAWS = 4000


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
    counts, reference_ranks, reference_sizes, stratum_weights = _check_interval_arguments(
        counts, n, reference_ranks, reference_sizes, stratum_weights, confidence_level, n_draws
    )
    rng = np.random.default_rng(random_state)
    levels = expected_cutoff_levels(reference_ranks, reference_sizes, stratum_weights)
    # Cut-offs at one reference rank (small references) carry the same information: keep one.
    levels, first = np.unique(levels, return_index=True)
    counts, reference_ranks = counts[first], reference_ranks[:, first]
    rates = member_curve.rates(levels)
    separation = float(np.sum(levels - rates.rate))
    estimate = float(np.clip(np.sum(levels - counts / n) / separation, 0.0, 1.0)) if separation > 0 else float("nan")
    pi, separated = _draw_retained_fractions(
        rng,
        n_draws,
        counts=counts,
        n=n,
        levels=levels,
        reference_ranks=reference_ranks,
        reference_sizes=reference_sizes,
        stratum_weights=stratum_weights,
        member_curve=member_curve,
        member_slope=rates.slope,
    )
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


def _check_interval_arguments(
    counts: np.ndarray,
    n: int,
    reference_ranks: np.ndarray,
    reference_sizes: np.ndarray,
    stratum_weights: np.ndarray | None,
    confidence_level: float,
    n_draws: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The arguments of :func:`retained_fraction_interval` checked; counts, ranks, sizes and weights as arrays."""
    check_positive_int("n", n)
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
    check_open_unit("confidence_level", confidence_level)
    if not (isinstance(n_draws, (int, np.integer)) and n_draws >= 100):
        raise InputError(f"expected `n_draws` to be an integer >= 100, got {n_draws!r}")
    return counts, reference_ranks, reference_sizes, stratum_weights


def _draw_retained_fractions(
    rng: np.random.Generator,
    n_draws: int,
    *,
    counts: np.ndarray,
    n: int,
    levels: np.ndarray,
    reference_ranks: np.ndarray,
    reference_sizes: np.ndarray,
    stratum_weights: np.ndarray,
    member_curve: MemberTailCurve,
    member_slope: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo draws of pi from the joint uncertainty of query, reference and member shares; for validated input.

    Returns the draws (0 where members and non-members are not separated) and where they are.
    """
    # Total prior weight 1 spread over the bins (Perks): for one cut-off, the Jeffreys Beta(x + 1/2, n - x + 1/2).
    query = nested_dirichlet(rng, counts, n, n_draws, 1.0 / (levels.size + 1))
    nonmember = np.zeros((n_draws, levels.size))
    for weight, ranks, size in zip(stratum_weights, reference_ranks, reference_sizes, strict=True):
        if weight > 0:
            nonmember += weight * nested_dirichlet(rng, ranks, size + 1, n_draws, 0.0)
    member = member_curve.draw(levels, n_draws, rng) + member_slope * (nonmember - levels)
    numerator = np.sum(nonmember - query, axis=1)
    denominator = np.sum(nonmember - member, axis=1)
    separated = denominator > 0
    return np.divide(numerator, denominator, out=np.zeros(n_draws), where=separated), separated


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
    check_open_unit("confidence_level", confidence_level)
    query_scores = np.sort(check_score_vector("query_scores", query_scores))
    reference_scores = np.sort(check_score_vector("reference_scores", reference_scores))
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
