"""The information per sample about the retained share that a score carries, estimated out of sample.

The certifiable margin (:mod:`ema.stats.certify`) and every comparison of scores (shifted views,
reference models, attacks) rest on one number: the Fisher information about the retained share pi
of a likelihood ratio fitted on the two references. Fitted and evaluated on the same references
it counts their noise as information, so it is cross-fitted: fitted on all folds but one,
evaluated on the held-out one, averaged over several fold assignments, with a standard error
and the lower bound the margin is stated from.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ema.errors import InputError
from ema.stats._validation import check_score_vector
from ema.stats.binned_tests import JEFFREYS_PSEUDOCOUNT, bin_counts, check_levels, quantile_edges
from ema.validation import check_positive_int

INFORMATION_FOLDS = 2
#: Fold assignments the cross-fitted information averages over. One assignment's estimate moves
#: with the assignment alone by about its whole spread across redrawn references (overfit target:
#: 0.014 of 0.015), so the margin an audit states moved with its seed (overfit, one reference, 200
#: samples: 0.54-0.70 over 20 seeds; with five assignments 0.56-0.64), and a draw could reach a
#: margin just below 1 by that chance alone: on the validity grid's barely reachable cells
#: (docs/VALIDITY.md) five assignments miss the promise in 2 of 15 such draws, one in 7 of 28.
#: Five times a cost of a few milliseconds per calibration.
INFORMATION_REPEATS = 5
#: Standard errors below its estimate at which the certifiable margin takes the information
#: (:meth:`InformationEstimate.lower_bound`). See :func:`certifiable_margin`'s Notes for why one.
INFORMATION_LOWER_SE = 1.0
#: A held-out variance of the likelihood's score below this share of its mean square is none (rounding): the
#: assignment then estimates nothing (information 0, standard error inf), as with a few references in one bin.
UNRESOLVED_VARIANCE = 1e-12


@dataclass(frozen=True)
class InformationEstimate:
    """A cross-fitted information and its standard error, with the lower bound the margin is stated from.

    Attributes
    ----------
    estimate : float
        The information per sample about the retained share, >= 0.
    standard_error : float
        Its standard error across the references' draws, by the delta method on the held-out folds
        (:func:`cross_fit_information_estimate`).
    """

    estimate: float
    standard_error: float

    @property
    def estimable(self) -> bool:
        """Whether the references estimated anything: every fold assignment's held-out scores varied (a finite
        standard error). Where one did not (a few references, one bin), ``estimate`` holds that assignment's 0,
        and the lower bound is 0: what the margin plans with, not a measurement.

        >>> InformationEstimate(0.0, math.inf).estimable
        False
        """
        return math.isfinite(self.standard_error)

    def lower_bound(self, standard_errors: float = INFORMATION_LOWER_SE) -> float:
        """``estimate - standard_errors * standard_error``, at least 0: the information the margin plans with.

        Examples
        --------
        >>> InformationEstimate(0.1, 0.03).lower_bound()
        0.07
        >>> InformationEstimate(0.01, 0.02).lower_bound()
        0.0
        """
        return float(max(0.0, self.estimate - standard_errors * self.standard_error))


def cross_fitted_information_estimate(
    member_scores: np.ndarray,
    nonmember_scores: np.ndarray,
    levels: np.ndarray,
    *,
    retained_share: float = 0.0,
    n_folds: int = INFORMATION_FOLDS,
    n_repeats: int = INFORMATION_REPEATS,
    random_state: int | np.random.Generator | None = 0,
) -> InformationEstimate:
    """The information per sample about the retained share of the auditor's binned score, out of sample, with its error.

    Parameters
    ----------
    member_scores : ndarray of shape (n_members,)
        The auditor's score on the member reference (scored on the target).
    nonmember_scores : ndarray of shape (n_nonmembers,)
        The same score on the non-member reference.
    levels : array_like of shape (n_levels,)
        The auditor's bin levels (quantiles of the non-member side).
    retained_share, n_folds, n_repeats, random_state
        As in :func:`cross_fit_information_estimate`; pi = 0 (a removed query) by default.

    Returns
    -------
    InformationEstimate
        The information at ``retained_share`` (``estimate``, >= 0) and its standard error.

    Notes
    -----
    The binned likelihood ratio P_mem(bin) / P_non(bin) (with the auditor's Jeffreys pseudo-count)
    is fitted on all folds but one; :func:`cross_fit_information_estimate` says how the held-out
    folds turn it into an information and its standard error. A plug-in estimate on the references
    that fitted the bins counts their noise as information (13 bins and 1,000 non-members add about
    0.015, as much as a generalising target's whole signal).
    """
    members = check_score_vector("member_scores", member_scores)
    nonmembers = check_score_vector("nonmember_scores", nonmember_scores)
    levels = check_levels(levels)

    def fit_binned_ratio(train_m: np.ndarray, train_n: np.ndarray):
        edges = quantile_edges(train_n, levels)
        ratio = _likelihood_ratio(bin_counts(train_m, edges), bin_counts(train_n, edges))
        return lambda scores: ratio[np.searchsorted(edges, scores, side="left")]

    return cross_fit_information_estimate(
        members,
        nonmembers,
        fit_binned_ratio,
        retained_share=retained_share,
        n_folds=n_folds,
        n_repeats=n_repeats,
        random_state=random_state,
    )


def binned_information(
    member_scores: np.ndarray, nonmember_scores: np.ndarray, levels: np.ndarray, random_state: int | None = 0
) -> tuple[InformationEstimate, tuple[np.ndarray, np.ndarray]]:
    """The cross-fitted information of a binned score, and the references' counts in its bins (edges from all).

    What the certifiable margin needs of a score: its information's lower bound and the shape of
    its binned likelihood (:func:`ema.stats.certify.certifiable_margin`).
    """
    estimate = cross_fitted_information_estimate(member_scores, nonmember_scores, levels, random_state=random_state)
    edges = quantile_edges(np.asarray(nonmember_scores, dtype=np.float64), check_levels(levels))
    return estimate, (bin_counts(member_scores, edges), bin_counts(nonmember_scores, edges))


def cross_fitted_information(
    member_scores: np.ndarray, nonmember_scores: np.ndarray, levels: np.ndarray, **options: Any
) -> float:
    """The ``estimate`` of :func:`cross_fitted_information_estimate` (same arguments): the information, >= 0."""
    return cross_fitted_information_estimate(member_scores, nonmember_scores, levels, **options).estimate


def cross_fit_information(
    members: np.ndarray,
    nonmembers: np.ndarray,
    fit_ratio: Callable[[np.ndarray, np.ndarray], Callable[[np.ndarray], np.ndarray]],
    **options: Any,
) -> float:
    """Fisher information about the retained share of any fitted likelihood ratio, on held-out folds.

    The ``estimate`` of :func:`cross_fit_information_estimate` (same arguments: ``retained_share``,
    ``n_folds``, ``n_repeats``, ``random_state``), for callers that compare informations and need no standard error.

    Returns
    -------
    float
        The information, >= 0.
    """
    return cross_fit_information_estimate(members, nonmembers, fit_ratio, **options).estimate


def cross_fit_information_estimate(
    members: np.ndarray,
    nonmembers: np.ndarray,
    fit_ratio: Callable[[np.ndarray, np.ndarray], Callable[[np.ndarray], np.ndarray]],
    *,
    retained_share: float = 0.0,
    n_folds: int = INFORMATION_FOLDS,
    n_repeats: int = INFORMATION_REPEATS,
    random_state: int | np.random.Generator | None = 0,
) -> InformationEstimate:
    """The cross-fitted information of any fitted likelihood ratio, with its standard error.

    Parameters
    ----------
    members : ndarray of shape (n_members, ...)
        Member features (one score per sample, or several: rows are samples).
    nonmembers : ndarray of shape (n_nonmembers, ...)
        Non-member features, laid out as ``members``.
    fit_ratio : callable
        ``fit_ratio(train_members, train_nonmembers)`` returns a function of features that gives
        the estimated likelihood ratio f_mem / f_non (> 0) per sample: binned shares, a
        classifier's odds corrected for the class sizes, a density ratio.
    retained_share : float
        The share pi at which the information is wanted, in [0, 1).
    n_folds : int
        Folds of each side; each is scored by a ratio fitted on the others.
    n_repeats : int
        Seeded fold assignments averaged over (:data:`INFORMATION_REPEATS`).
    random_state : int, Generator or None
        Seed of the fold assignments.

    Returns
    -------
    InformationEstimate

    Notes
    -----
    With the mixture g = pi f_mem + (1 - pi) f_non, the score of the likelihood at pi is
    w = (r - 1) / (pi r + 1 - pi), r = f_mem / f_non, and the information is
    I(pi) = (E_mem w - E_non w)^2 / Var_g w (both equal the integral of (f_mem - f_non)^2 / g
    when r is exact; chi^2(f_mem || f_non) at pi = 0). Here r is fitted on all folds but one and
    w is evaluated on the held-out fold, whose squared mean difference d^2 is debiased by its own
    variance v (``noise``). An imperfect r only lowers the estimate (it is the information of a
    statistic that is linear in w, at most the data's), so a margin derived from it errs towards
    certifying more often than promised, not less; a better-fitted ratio (finer in the tails, or
    using more features) can only raise it.

    Standard error, by the delta method on I = N / D. The held-out difference d of a fold is
    about N(delta, v), so its debiased square d^2 - v has variance 4 delta^2 v + 2 v^2
    (estimated with d^2 - v for delta^2, at least 0); a sample variance of n values has variance
    (mu_4 - sigma^4) / n, which carries D's heavy tail where a few non-members fall in bins
    of large ratio (the table target: without it the error is a sixth of the spread measured
    across redrawn references); the folds are disjoint, so each mean over K folds has the sum of
    the folds' variances over K^2, and Var I = (Var N + I^2 Var D) / D^2 (their covariance and
    the folds' shared fitting data are left out, and so is the fold assignment's own spread).
    Measured against the spread of the estimate across the validity grid's 200 redrawn references
    (which share most samples from draw to draw), the error is 0.8-1.2 times it on every target;
    over independent Gaussian references (tests/core/test_stats_certify.py) 0.72 times it.

    Repeated cross-fitting. All of the above is done for ``n_repeats`` seeded fold assignments, and
    the estimate is the mean of their (unclipped) informations, clipped at 0 once. The fold
    assignment is noise of the estimator, not of the data: averaging removes most of it. The
    standard error is the mean of the assignments' errors: all assignments read the same
    references, so their errors are strongly correlated, and the standard deviation of a mean is at
    most the mean of the standard deviations (equal when they are perfectly correlated), so this
    never understates it.
    """
    members, nonmembers = np.asarray(members, dtype=np.float64), np.asarray(nonmembers, dtype=np.float64)
    check_positive_int("n_folds", n_folds)
    check_positive_int("n_repeats", n_repeats)
    if not (0.0 <= retained_share < 1.0):
        raise InputError(f"expected a retained share in [0, 1), got {retained_share!r}")
    if n_folds < 2 or min(len(members), len(nonmembers)) < 2 * n_folds:
        raise InputError(
            f"expected n_folds >= 2 and at least 2 samples per fold in each reference, got n_folds={n_folds} with "
            f"{len(members)} members and {len(nonmembers)} non-members"
        )
    rng = np.random.default_rng(random_state)
    repeats = []
    for _ in range(n_repeats):  # a handful of fold assignments
        member_folds = rng.permutation(len(members)) % n_folds
        nonmember_folds = rng.permutation(len(nonmembers)) % n_folds
        folds = (member_folds, nonmember_folds, n_folds)
        repeats.append(_one_assignment(members, nonmembers, folds, fit_ratio, float(retained_share)))
    information, standard_error = np.mean(repeats, axis=0)
    return InformationEstimate(estimate=float(max(0.0, information)), standard_error=float(standard_error))


def _one_assignment(
    members: np.ndarray,
    nonmembers: np.ndarray,
    folds: tuple[np.ndarray, np.ndarray, int],
    fit_ratio: Callable[[np.ndarray, np.ndarray], Callable[[np.ndarray], np.ndarray]],
    pi: float,
) -> tuple[float, float]:
    """The information of one fold assignment (not clipped at 0, so that averaging stays unbiased) and its error.

    Takes validated input; ``folds`` is (member fold per sample, non-member fold per sample, n_folds).
    """
    member_folds, nonmember_folds, n_folds = folds
    numerators, numerator_variances, variances, variance_variances, squares = [], [], [], [], []
    for fold in range(n_folds):  # a handful of folds
        ratio = fit_ratio(members[member_folds != fold], nonmembers[nonmember_folds != fold])
        held_m = _mixture_score(ratio(members[member_folds == fold]), pi)
        held_n = _mixture_score(ratio(nonmembers[nonmember_folds == fold]), pi)
        difference = held_m.mean() - held_n.mean()
        noise = held_m.var(ddof=1) / held_m.size + held_n.var(ddof=1) / held_n.size
        numerators.append(difference**2 - noise)
        numerator_variances.append(4.0 * max(difference**2 - noise, 0.0) * noise + 2.0 * noise**2)
        variances.append(pi * held_m.var(ddof=1) + (1 - pi) * held_n.var(ddof=1) + pi * (1 - pi) * difference**2)
        variance_variances.append(pi**2 * _variance_error(held_m) + (1 - pi) ** 2 * _variance_error(held_n))
        squares.append(pi * np.mean(np.square(held_m)) + (1 - pi) * np.mean(np.square(held_n)))
    denominator = float(np.mean(variances))
    if not denominator > UNRESOLVED_VARIANCE * np.mean(squares):
        return 0.0, math.inf  # held-out scores that do not vary (a few references, one bin) estimate nothing
    information = np.mean(numerators) / denominator
    spread = math.sqrt(np.sum(numerator_variances) + max(information, 0.0) ** 2 * np.sum(variance_variances))
    return float(information), float(spread / n_folds / denominator)


def _variance_error(values: np.ndarray) -> float:
    """Sampling variance of a sample variance: (mu_4 - sigma^4) / n, from the sample's own moments."""
    squares = np.square(values - values.mean())
    return float(max(np.mean(squares * squares) - np.mean(squares) ** 2, 0.0) / values.size)


def _mixture_score(ratio: np.ndarray, retained_share: float) -> np.ndarray:
    """d/dpi of log(pi f_mem + (1 - pi) f_non) per sample, from the likelihood ratio r: (r - 1) / (pi r + 1 - pi)."""
    return (ratio - 1.0) / (retained_share * ratio + 1.0 - retained_share)


def jeffreys_shares(counts: np.ndarray) -> np.ndarray:
    """Per-bin shares with the Jeffreys pseudo-count, as the auditor's weights use them (and the margin's shape)."""
    return (counts + JEFFREYS_PSEUDOCOUNT) / (counts.sum() + JEFFREYS_PSEUDOCOUNT * counts.size)


def _likelihood_ratio(member_counts: np.ndarray, nonmember_counts: np.ndarray) -> np.ndarray:
    """Per-bin P_mem / P_non with the Jeffreys pseudo-count, as the auditor's weights use it."""
    return jeffreys_shares(member_counts) / jeffreys_shares(nonmember_counts)
