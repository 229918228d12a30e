"""What a deletion audit can certify before it runs: the information of a score, the certifiable margin, the sizes.

A removed query (retained share pi = 0) is certified at margin m when the one-sided upper
confidence bound on pi that the member-reference auditor computes (the profile-likelihood
interval of :func:`ema.stats.mixture.retained_fraction`) is at most m. How low that bound gets
depends on three numbers known before the query's outcome: the query size, the non-member
reference size, and the Fisher information per sample about pi of the auditor's binned score,
estimated by cross-fitting on the two references (:mod:`ema.stats.information`). The margin is
stated from the estimate's lower bound (:meth:`~ema.stats.information.InformationEstimate.lower_bound`),
not the estimate itself; see :func:`certifiable_margin`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from ema.errors import InputError
from ema.stats.information import jeffreys_shares
from ema.validation import check_certify_level, check_open_unit, check_positive_int

#: Probability of certifying a removed query at the certifiable margin (issue 26).
CERTIFY_PROBABILITY = 0.85
#: Probability of certifying that ``ema power --certify`` plans sizes for.
PLAN_PROBABILITY = 0.9
#: The least probability of certifying a plan or margin is stated for: below it, z_p < 0 and a removed query
#: would be certified less often than not.
MIN_CERTIFY_PROBABILITY = 0.5
#: Below this |x|, x - log1p(x) is taken from its series (relative error under 1e-9), not by cancellation.
SERIES_BELOW = 1e-3


@dataclass(frozen=True)
class CertifyPlan:
    """Sizes that certify a margin with a given probability, or why none do.

    Attributes
    ----------
    margin : float
        The margin asked for.
    reachable : bool
        Whether some query size certifies it with a reference of at most ``max_reference``.
    query_size : int or None
        Query samples needed (None when unreachable).
    reference_size : int
        Non-member reference samples to use (when unreachable: ``max_reference``).
    smallest_reachable_margin : float
        The certifiable margin as the query grows without bound, with ``max_reference``
        reference samples: margins above it are reachable. At most 1, as the audit's
        ``certifiable_margin``: 1 means none below 1 is (a retained share is at most 1).
    information : float
        Fisher information per sample about the retained share (the point estimate).
    information_lower : float
        The information the plan used: the estimate's lower bound
        (:meth:`InformationEstimate.lower_bound`), or ``information`` when that is known exactly.
    certify_level : float
        One-sided level of the upper bound that certifies.
    probability : float
        Probability of certifying a removed query at these sizes.
    views : int
        Views of each sample the information was measured on (9 under ``--augment shifts``).
    single_view : CertifyPlan or None
        With several views, the plan from the identity view alone: what the views buy.
    """

    margin: float
    reachable: bool
    query_size: int | None
    reference_size: int
    smallest_reachable_margin: float
    information: float
    information_lower: float
    certify_level: float
    probability: float
    views: int = 1
    single_view: CertifyPlan | None = None


def level_text(level: float) -> str:
    """A level or rate as a percentage with the digits it has, as reports and messages write it.

    Examples
    --------
    >>> level_text(0.95), level_text(0.975), level_text(0.999)
    ('95%', '97.5%', '99.9%')
    """
    return f"{100.0 * level:.6g}%"


def _check_margin_inputs(information: float, certify_level: float, probability: float) -> None:
    if not (isinstance(information, (int, float, np.floating)) and math.isfinite(information) and information >= 0):
        raise InputError(f"expected the information to be a finite number >= 0, got {information!r}")
    check_certify_level(certify_level)
    check_open_unit("probability", probability)
    if probability < MIN_CERTIFY_PROBABILITY:
        raise InputError(
            f"expected a probability of certifying of at least {MIN_CERTIFY_PROBABILITY} (and below 1), got "
            f"{probability!r}"
        )


def _z_sum(certify_level: float, probability: float) -> float:
    """z_L + z_p: how many standard errors of pi_hat the bound ends above 0 in the wanted share of removed draws."""
    return float(stats.norm.ppf(certify_level) + stats.norm.ppf(probability))


def certifiable_margin(
    n_query: float,
    n_reference: float,
    information: float,
    *,
    certify_level: float = 0.95,
    probability: float = CERTIFY_PROBABILITY,
    binned_references: tuple[np.ndarray, np.ndarray] | None = None,
) -> float:
    """The smallest retained share certified with ``probability`` when the query is in fact removed.

    Parameters
    ----------
    n_query : int or float
        Query samples (``math.inf`` for the limit of an unbounded query).
    n_reference : int or float
        Non-member reference samples.
    information : float
        Fisher information per sample about pi at pi = 0 to plan with: an audit passes its estimate's
        lower bound (:meth:`InformationEstimate.lower_bound`; see Notes).
    certify_level : float
        One-sided level of the upper bound that certifies (the profile-likelihood interval at
        two-sided level 2 L - 1).
    probability : float
        Wanted probability of certifying a removed query, >= 0.5.
    binned_references : (member_counts, nonmember_counts), optional
        The auditor's references per bin. When given, the information is scaled by how far the
        binned likelihood drops out to the margin against a quadratic (:func:`likelihood_drop_ratio`;
        see Notes), and the margin solves m = (z_L + z_p) sqrt((1/n_q + 1/n_ref) / (I c(m))).

    Returns
    -------
    float
        m = (z_L + z_p) sqrt((1/n_q + 1/n_ref) / I); ``inf`` when I = 0. Not clipped: a value
        of 1 or more means no share below 1 can be certified.

    Notes
    -----
    Derivation. The query's likelihood depends on pi through the mixture of the member and
    non-member bin shares, both estimated from references. At pi = 0 the member shares drop
    out of the score (their error enters at second order), while the non-member shares are
    estimated from the reference and the query alike; profiling them out leaves the efficient
    information I_eff = I / (1/n_q + 1/n_ref), so the unconstrained estimate is
    pi_hat ~ N(0, s^2), s = I_eff^(-1/2). The profile-likelihood upper bound at one-sided level
    L is U = pi_hat + z_L s when pi_hat >= 0 (at the boundary, pi_hat < 0, it is
    s (Z + sqrt(Z^2 + z_L^2)) with Z = pi_hat / s, still increasing in Z). U <= m with
    probability p exactly when Z <= z_p; for p >= 0.5, z_p >= 0, so m = s (z_L + z_p). With
    p = 0.5 and n_q -> inf this is the floor z_L / sqrt(n_ref I) that no query size lowers
    (1.645 / sqrt(n_ref I) at today's 95% one-sided bound).

    Which information. The derivation takes I as known; an audit only has its cross-fitted
    estimate, whose standard error is large next to it where the margin is barely reachable
    (0.01-0.03 on 0.02-0.14 for the image targets, 3.7 on 11 for the breast-cancer table).
    Planning with the estimate states too low a margin whenever the estimate is high by chance.
    The audit therefore plans with the estimate less :data:`~ema.stats.information.INFORMATION_LOWER_SE` = 1 standard
    error (a one-sided 84% lower bound): the margin is optimistic only in the draws whose estimate
    overshoots by more than its own standard error, about 1 in 6, the same order as the 1 - 0.85
    that the promise leaves. It is a conventional level, not fitted to the grid (replays of the
    grid's draws with 0, 1 and 1.645 standard errors are in docs/VALIDITY.md). On the grid it
    raises the margin by 11-16% at 200 and 1,000 samples on the image targets (about 20% on the
    table) and halves the table target's shortfall, but it does not remove the selection among
    barely reachable draws: a draw still reaches a margin below 1 when its estimate is high by chance.

    How the likelihood drops out to m. The derivation takes the log-likelihood as quadratic in pi
    with curvature I(0) all the way to m. The profile bound is where the log-likelihood has dropped
    by z_L^2 / 2 from its maximum; a removed query's expected drop from pi = 0 to m is
    n_eff KL(f_non || g_m), g_m = m f_mem + (1 - m) f_non, which is n_eff I(0) m^2 / 2 only while m
    is small. With ``binned_references`` the margin solves sqrt(n_eff I c(m)) m = z_L + z_p,
    c(m) = 2 KL / (m^2 I(0)) (:func:`likelihood_drop_ratio`): the signed root of the likelihood
    ratio at m, whose mean is sqrt(2 n_eff KL) and whose spread is about 1, exceeds z_L in a share
    p of removed queries. c(m) comes from the plug-in binned shares with the auditor's pseudo-count
    (a shape, not a size: the size stays the cross-fitted lower bound). It is below 1 where members
    crowd a bin that non-members rarely reach, since g_m fills that bin quickly: the breast-cancer
    table's trees give every member probability 1, and so do 8-12 of its 126 non-members, so all
    members fall in one bin and c is 0.5-0.6 at m = 0.13-0.2, the "information of about 6 where
    the estimate is 11" that the auditor's bounds showed. It is above 1 where non-members fill
    bins that members never reach, since no mixture with many members explains them: on the
    overfit target a tenth of non-members sit in bins with no member of 4,000, and c is 1.27 at
    0.4 and 1.54 at 0.6 (Fashion-MNIST 1.21 / 1.40, the generalising target 1.16 / 1.28). It does
    not capture everything on the table: in a simulation of its shape with the information known
    exactly (tests/core/test_stats_certify.py), c raises the share certified at 50 rows from 0.62 to
    about 0.8, not 0.85; the rest is the skew of small counts (4 query rows expected in the members'
    bin), which the lower bound covers (0.97 with both, 0.88 on the grid).

    Examples
    --------
    >>> round(certifiable_margin(200, 1000, 0.5), 3)
    0.294
    """
    _check_margin_inputs(information, certify_level, probability)
    if not (n_query > 0 and n_reference > 0):
        raise InputError(f"expected positive sizes, got n_query={n_query!r} and n_reference={n_reference!r}")
    if information == 0:
        return math.inf
    z_sum, spread = _z_sum(certify_level, probability), math.sqrt(1.0 / n_query + 1.0 / n_reference)
    quadratic = z_sum * spread / math.sqrt(information)
    if binned_references is None:
        return quadratic
    member_shares, nonmember_shares = (jeffreys_shares(np.asarray(c, dtype=np.float64)) for c in binned_references)

    def excess(margin: float) -> float:
        """m less the margin that the likelihood's drop out to m gives: the certifiable margin is its root."""
        drop_ratio = likelihood_drop_ratio(member_shares, nonmember_shares, margin)
        return margin - z_sum * spread / math.sqrt(information * drop_ratio)

    if excess(1.0) < 0.0:  # nothing below 1 is certified: the margin 1 would need, above 1
        return 1.0 - excess(1.0)
    return float(optimize.brentq(excess, quadratic * 1e-3, 1.0, xtol=1e-6))


def likelihood_drop_ratio(member_shares: np.ndarray, nonmember_shares: np.ndarray, margin: float) -> float:
    """How far a removed query's binned log-likelihood drops from pi = 0 to ``margin``, over the quadratic drop.

    Parameters
    ----------
    member_shares, nonmember_shares : ndarray of shape (n_bins,)
        Per-bin shares f_mem and f_non (positive, each summing to 1).
    margin : float
        The retained share m, in (0, 1].

    Returns
    -------
    float
        c(m) = 2 KL(f_non || g_m) / (m^2 chi^2(f_mem || f_non)), g_m = m f_mem + (1 - m) f_non:
        1 in the limit m -> 0 (chi^2 is I(0)) and when the shares are equal; below 1 where members
        crowd bins that non-members rarely reach, above 1 where non-members fill bins that members
        never reach (:func:`certifiable_margin`'s Notes).

    Examples
    --------
    >>> round(likelihood_drop_ratio(np.array([0.98, 0.02]), np.array([0.08, 0.92]), 0.2), 2)
    0.48
    """
    chi_square = float(np.sum((member_shares - nonmember_shares) ** 2 / nonmember_shares))
    if chi_square == 0.0:
        return 1.0
    # KL = sum f_non (x - log1p(x)), x = m (f_mem - f_non) / f_non (the linear terms sum to 0): every term is
    # non-negative, and the series keeps small margins exact where x - log1p(x) would cancel to noise
    x = margin * (member_shares - nonmember_shares) / nonmember_shares
    series = x**2 / 2.0 - x**3 / 3.0 + x**4 / 4.0
    terms = np.where(np.abs(x) < SERIES_BELOW, series, x - np.log1p(x))
    return 2.0 * float(np.sum(nonmember_shares * terms)) / (margin**2 * chi_square)


def reference_floor(
    n_reference: float,
    information: float,
    *,
    certify_level: float = 0.95,
    binned_references: tuple[np.ndarray, np.ndarray] | None = None,
) -> float:
    """The certifiable margin that no query size lowers: z_L / sqrt(n_ref I), set by the non-member reference.

    :func:`certifiable_margin` with an unbounded query and probability 0.5; ``inf`` when I = 0.
    With ``binned_references`` (the auditor's references per bin) the floor follows how far the
    binned likelihood drops out to it, as the auditor's own certifiable margin does: higher where
    members crowd one bin (the Breast Cancer table), lower where non-members fill bins that members
    never reach (the image targets).

    Examples
    --------
    >>> round(reference_floor(1000, 0.1), 3)
    0.164
    """
    return certifiable_margin(
        math.inf,
        n_reference,
        information,
        certify_level=certify_level,
        probability=0.5,
        binned_references=binned_references,
    )


def plan_certification(
    margin: float,
    information: float,
    *,
    n_reference: int,
    max_reference: int | None = None,
    information_lower: float | None = None,
    certify_level: float = 0.95,
    probability: float = PLAN_PROBABILITY,
    binned_references: tuple[np.ndarray, np.ndarray] | None = None,
) -> CertifyPlan:
    """The query and non-member reference sizes that certify ``margin`` with ``probability``, or why none do.

    Parameters
    ----------
    margin : float
        Retained share to certify, in (0, 1).
    information : float
        Fisher information per sample about pi at pi = 0 (an estimate's point value).
    n_reference : int
        The reference size the auditor has now: kept when it suffices (and ``max_reference`` allows it).
    max_reference : int, optional
        The most reference samples the data allow (default: ``n_reference``); below ``n_reference``, the
        plan keeps to it (a smaller reference than today's).
    information_lower : float, optional
        The information to plan with: an estimate's lower bound, as the audit's certifiable margin
        uses it, so that what the plan promises is what an audit then certifies (default:
        ``information``, an information known exactly).
    certify_level, probability, binned_references
        As in :func:`certifiable_margin`; with ``binned_references`` the plan takes the information
        scaled by the likelihood's drop out to ``margin`` (:func:`likelihood_drop_ratio`), as the audit's margin is.

    Returns
    -------
    CertifyPlan

    Notes
    -----
    Certifying needs 1/n_q + 1/n_ref <= B = I (margin / (z_L + z_p))^2 (inverting
    :func:`certifiable_margin`). The reference is the larger of today's and 2 / B (where query
    and reference are equal: the fewest samples in all), up to ``max_reference``; the query is
    then the smallest n_q with 1/n_q <= B - 1/n_ref. Unreachable when 1/max_reference >= B.
    """
    check_open_unit("margin", margin)
    _check_margin_inputs(information, certify_level, probability)
    planned = information if information_lower is None else information_lower
    _check_margin_inputs(planned, certify_level, probability)
    check_positive_int("n_reference", n_reference)
    limit = check_positive_int("max_reference", max_reference) if max_reference is not None else n_reference
    common = {"margin": float(margin), "information": float(information), "information_lower": float(planned)}
    common |= {"certify_level": float(certify_level), "probability": float(probability)}
    options = {"certify_level": certify_level, "probability": probability, "binned_references": binned_references}
    floor = min(certifiable_margin(math.inf, limit, planned, **options), 1.0)  # 1: none below 1
    if binned_references is not None:
        planned *= likelihood_drop_ratio(*(jeffreys_shares(np.asarray(c)) for c in binned_references), margin)
    budget = planned * (margin / _z_sum(certify_level, probability)) ** 2
    if budget * limit <= 1.0:
        return CertifyPlan(
            reachable=False, query_size=None, reference_size=limit, smallest_reachable_margin=floor, **common
        )
    reference = min(limit, max(n_reference, math.ceil(2.0 / budget)))
    query = math.ceil(1.0 / (budget - 1.0 / reference) - 1e-9)
    return CertifyPlan(
        reachable=True, query_size=query, reference_size=reference, smallest_reachable_margin=floor, **common
    )
