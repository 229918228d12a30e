"""The calibrated auditor's two tail tests and its verdict.

Membership shows in the low tail: a well-trained classifier is as confident on most
non-members as on members, but members rarely land among the least confident scores.
For each metric and each cut-off (the reference's 1%, 5%, 10%, 25% and 50% order
statistics by default) the query samples at or below the cut-off (of their stratum) are
counted, and each count is tested twice:

* H0 "removed" (the query behaves like data the target never saw): the count is compared
  with its exact placement law among the reference (beta-binomial: exact for any score
  distribution, no reference sample spent on choosing cut-offs). A memorized query set
  puts FEWER samples in the tail.
* H0 "retained" (the query behaves like the target's members): the count is compared with
  the members' tail share at the same non-member quantile level, measured on the
  calibration model and transferred. A removed query set puts MORE samples in the tail
  than members would; the tests account for the finite calibration and reference samples.

Each family of single tests, over signals x cut-offs, is corrected for multiplicity (Holm by
default). The functions take arrays already validated by
:class:`~ema.auditors.calibrated.CalibratedAuditor`, with per-signal sequences in its signal order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ema.auditors.result import INCONCLUSIVE, MEMORIZED, NOT_MEMORIZED
from ema.stats import (
    MemberTailCurve,
    adjust_pvalues,
    expected_cutoff_levels,
    member_tail_pvalues,
    order_statistic_level_variance,
    placement_pvalues,
)


@dataclass(frozen=True)
class QueryTails:
    """A query's tail counts against the calibrated cut-offs, and the non-member share expected there.

    ``strata`` (n_query,) is each sample's stratum (0 in global mode); ``stratum_sizes`` and
    ``weights`` (n_strata,) count and share the query per stratum; ``counts`` (n_signals,
    n_levels) are the samples at or below each metric's cut-offs; ``nonmember_rate`` and
    ``nonmember_variance`` (n_levels,) are the expected reference level of each cut-off and its spread.
    """

    n: int
    strata: np.ndarray
    stratum_sizes: np.ndarray
    weights: np.ndarray
    counts: np.ndarray
    nonmember_rate: np.ndarray
    nonmember_variance: np.ndarray


@dataclass(frozen=True)
class HypothesisTests:
    """The single tests of both hypotheses, (n_signals, n_levels) each, and the family-wise p-values."""

    member_rate: np.ndarray
    p_removed: np.ndarray
    p_retained: np.ndarray
    adjusted_removed: np.ndarray
    adjusted_retained: np.ndarray
    p_removed_family: float
    p_retained_family: float


def count_query_tails(
    scores: Sequence[np.ndarray],
    labels: np.ndarray,
    cutoffs: Sequence[np.ndarray],
    ranks: np.ndarray,
    reference_sizes: np.ndarray,
) -> QueryTails:
    """The query's samples at or below each cut-off (of their stratum), and the non-member share expected there.

    Parameters
    ----------
    scores : sequence of ndarray of shape (n_query,)
        One per signal.
    labels : ndarray of shape (n_query,)
        The strata in per-class mode (more than one stratum); ignored otherwise.
    cutoffs : sequence of ndarray of shape (n_strata, n_levels)
        One per signal.
    ranks : ndarray of shape (n_strata, n_levels)
        Rank of each cut-off among its stratum's reference scores.
    reference_sizes : ndarray of shape (n_strata,)
        Reference samples behind each stratum's cut-offs.
    """
    n = int(labels.size)
    n_strata = reference_sizes.size
    strata = labels if n_strata > 1 else np.zeros(n, dtype=np.int64)
    stratum_sizes = np.bincount(strata, minlength=n_strata)
    weights = stratum_sizes / n
    return QueryTails(
        n=n,
        strata=strata,
        stratum_sizes=stratum_sizes,
        weights=weights,
        counts=np.stack([(s[:, None] <= c[strata]).sum(axis=0) for s, c in zip(scores, cutoffs, strict=True)]),
        nonmember_rate=expected_cutoff_levels(ranks, reference_sizes, weights),
        nonmember_variance=(weights**2) @ order_statistic_level_variance(ranks, reference_sizes[:, None]),
    )


def run_tail_tests(
    tails: QueryTails,
    *,
    ranks: np.ndarray,
    reference_sizes: np.ndarray,
    member_curves: Sequence[MemberTailCurve],
    correction: str,
    transfer_trusted: bool,
) -> HypothesisTests:
    """Every single test of H0 "removed" and H0 "retained", corrected over the family.

    Member behaviour that cannot be transferred (``transfer_trusted`` false) leaves H0
    "retained" untested (family p-value 1), so the auditor never calls a set removed on that evidence.
    """
    p_removed = removed_pvalues(tails, ranks, reference_sizes)
    member_rate, p_retained = retained_pvalues(tails, member_curves)
    adjusted_removed = adjust_pvalues(p_removed, correction)
    adjusted_retained = adjust_pvalues(p_retained, correction)
    return HypothesisTests(
        member_rate=member_rate,
        p_removed=p_removed,
        p_retained=p_retained,
        adjusted_removed=adjusted_removed,
        adjusted_retained=adjusted_retained,
        p_removed_family=float(adjusted_removed.min()),
        p_retained_family=float(adjusted_retained.min()) if transfer_trusted else 1.0,
    )


def removed_pvalues(tails: QueryTails, ranks: np.ndarray, reference_sizes: np.ndarray) -> np.ndarray:
    """Exact placement p-values of H0 "removed", (n_signals, n_levels): a memorized query has FEWER in the tail."""
    n_signals, n_levels = tails.counts.shape
    return placement_pvalues(
        tails.counts.ravel(),
        tails.stratum_sizes,
        np.tile(ranks.T, (n_signals, 1)),
        reference_sizes,
        alternative="less",
    ).reshape(n_signals, n_levels)


def retained_pvalues(tails: QueryTails, member_curves: Sequence[MemberTailCurve]) -> tuple[np.ndarray, np.ndarray]:
    """Members' tail share at the query's cut-off levels and the p-values of H0 "retained", (n_signals, n_levels).

    A removed query puts MORE samples in the tail than members would.
    """
    member_rates = [curve.rates(tails.nonmember_rate) for curve in member_curves]
    member_rate = np.stack([r.rate for r in member_rates])
    member_variance = np.stack([r.variance for r in member_rates])
    slope = np.stack([r.slope for r in member_rates])
    null_variance = member_variance + slope**2 * tails.nonmember_variance[None, :]
    p_retained = member_tail_pvalues(tails.counts.ravel(), tails.n, member_rate.ravel(), null_variance.ravel())
    return member_rate, p_retained.reshape(member_rate.shape)


def decide_verdict(p_removed: float, p_retained: float, alpha: float) -> str:
    """The verdict from the two family-wise p-values.

    ``memorized`` when H0 "removed" is rejected (``p_removed <= alpha``) and H0 "retained"
    is not; ``not_memorized`` in the mirror case; ``inconclusive`` when neither or both are.

    Examples
    --------
    >>> decide_verdict(0.01, 0.5, 0.1), decide_verdict(0.5, 0.01, 0.1), decide_verdict(0.5, 0.5, 0.1)
    ('memorized', 'not_memorized', 'inconclusive')
    """
    removed_rejected, retained_rejected = p_removed <= alpha, p_retained <= alpha
    if removed_rejected and not retained_rejected:
        return MEMORIZED
    if retained_rejected and not removed_rejected:
        return NOT_MEMORIZED
    return INCONCLUSIVE
