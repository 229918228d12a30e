"""The member-reference auditor's record: what each number relies on, its verdict rule, its shift checks."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import TYPE_CHECKING

from ema.auditors.result import INCONCLUSIVE, MEMORIZED, NOT_MEMORIZED
from ema.auditors.views import view_score_name
from ema.stats.binned_tests import PermutationTestResult
from ema.stats.certify import CERTIFY_PROBABILITY, level_text, reference_floor
from ema.stats.information import InformationEstimate

if TYPE_CHECKING:
    import numpy as np

    from ema.auditors.reference import ReferenceAuditor

#: Largest retained share a ``not_memorized`` verdict allows (its upper confidence bound).
DEFAULT_MARGIN = 0.1
#: The margin value that certifies at the audit's own certifiable margin.
AUTO_MARGIN = "auto"
#: How many times the reference the advice proposes: four times the samples halve the floor (about, when the
#: floor follows the binned likelihood).
REFERENCE_ADVICE_FACTOR = 4

#: What each reported number relies on; copied into ``thresholds["assumptions"]``.
ASSUMPTIONS: dict[str, str] = {
    "p_removed": (
        "exact permutation test: a removed query is exchangeable with the non-member reference (same "
        "domain, class mix and preprocessing), scored on the target; conditional on the member reference"
    ),
    "p_retained": (
        "exact permutation test: a retained query is exchangeable with the member reference (training "
        "samples of the target drawn like the query, e.g. the other training folds)"
    ),
    "p_too_forgotten": "the p_removed test, other side: the query is less member-like than never-seen data",
    "retained_fraction": (
        "binned mixture F_q = pi F_mem + (1 - pi) F_non, both references' bin shares estimated; profile "
        "likelihood interval"
    ),
    "power_retained": (
        "resampling: member queries drawn from the member reference run through the same test against the "
        "non-member reference; min_detectable_fraction from their standardised statistics, linear in the share"
    ),
    "certifiable_margin": (
        "normal approximation of the profile-likelihood bound at pi = 0, from |D_q|, the non-member reference size "
        "and the score's information cross-fitted on both references (before the query's outcome is seen)"
    ),
}


def default_certify_level(alpha: float) -> float:
    """The one-sided level of the bound that certifies, when none is given: 1 - alpha / 2.

    The upper end of the two-sided 1 - alpha interval, as ``not_memorized`` has always used
    (a one-sided 95% bound at alpha 0.1); see :class:`ReferenceAuditor`.

    >>> default_certify_level(0.1)
    0.95
    """
    return 1.0 - alpha / 2.0


def decide_reference_verdict(
    p_removed: float, p_retained: float, retained_high: float, *, alpha: float, margin: float, bound_counts: bool = True
) -> str:
    """``memorized`` if H0 "removed" is rejected; ``not_memorized`` if not, H0 "retained" is rejected and pi's upper
    bound <= margin < 1 (and ``bound_counts``: see :func:`bound_counts`).

    A margin of 1 (an automatic margin where nothing can be certified) certifies nothing. Nor does
    a bound below the margin while the test of H0 "retained" cannot reject the whole set being
    retained: the two then disagree, as when the references barely differ on the target (no
    information) and a query unlike both (a set unlearning pushed past never-seen data) fits the
    mixture model at its edge; a certificate that at most a share is retained must at least rule
    out all of it.

    Examples
    --------
    >>> decide_reference_verdict(0.01, 1.0, 0.9, alpha=0.1, margin=0.1)
    'memorized'
    >>> decide_reference_verdict(0.6, 0.001, 0.05, alpha=0.1, margin=0.1)
    'not_memorized'
    >>> decide_reference_verdict(0.6, 0.001, 0.4, alpha=0.1, margin=0.1)
    'inconclusive'
    >>> decide_reference_verdict(0.6, 0.14, 0.05, alpha=0.1, margin=0.1)
    'inconclusive'
    """
    if p_removed <= alpha:
        return MEMORIZED
    if p_retained <= alpha and bound_counts and retained_high <= margin < 1.0:
        return NOT_MEMORIZED
    return INCONCLUSIVE


def bound_counts(certifiable_margin: float, p_mixture_fit: float, *, shift_alpha: float) -> bool:
    """Whether the retained share's upper bound may certify: not when the references carry too little information
    to certify any share below 1 (``certifiable_margin`` 1) *and* the query fits no mixture of them
    (``p_mixture_fit <= shift_alpha``, which the audit warns of). A query unlike both references then
    sits at the mixture model's edge, where its bound is tight however little the score tells
    members from non-members.

    >>> bound_counts(1.0, 1e-7, shift_alpha=0.01), bound_counts(0.3, 1e-7, shift_alpha=0.01)
    (False, True)
    """
    return certifiable_margin < 1.0 or p_mixture_fit > shift_alpha


#: ``memorized`` with p_removed above alpha / WEAK_EVIDENCE_DIVISOR is called weak evidence: a set the
#: model never saw gets such a p-value in more than a tenth of the audits that alpha already accepts.
WEAK_EVIDENCE_DIVISOR = 10


def evidence_note(
    verdict: str,
    *,
    p_removed: float,
    p_retained: float,
    alpha: float,
    retained_low: float,
    retained_high: float,
    upper_bound: float,
    margin: float,
    certifiable_margin: float,
    certify_level: float,
) -> str:
    """One sentence on how strong the evidence behind ``verdict`` is, in the audit's own numbers.

    A ``memorized`` verdict whose p_removed is above alpha / 10 is said to be weak, with the rate
    at which removed sets get such a p-value (the permutation p-value is exact) and how low the
    retained share may be; ``not_memorized`` states the bound it certified; ``inconclusive`` says
    which test fell short (a bound below the margin with H0 "retained" not rejected certifies
    nothing: see :func:`decide_reference_verdict`) and the smallest margin this query size could certify.

    Examples
    --------
    >>> evidence_note("memorized", p_removed=0.043, p_retained=1.0, alpha=0.1, retained_low=0.04, retained_high=0.35,
    ...               upper_bound=0.35, margin=0.1, certifiable_margin=0.31, certify_level=0.95)[:14]
    'weak evidence:'
    """
    interval = f"retained share {retained_low:.2f} to {retained_high:.2f}"
    if verdict == MEMORIZED:
        if p_removed > alpha / WEAK_EVIDENCE_DIVISOR:
            least = (
                "the data are consistent with none of the set retained"
                if retained_low < 0.005
                else f"as little as {retained_low:.2f} of the set may be retained"
            )
            return (
                f"weak evidence: a set the model never saw gets p_removed <= {p_removed:.2g} in {p_removed:.1%} of "
                f"audits (alpha {alpha:g} calls {level_text(alpha)} of removed sets memorized); {interval}, so {least}"
            )
        return f"strong evidence: p_removed={p_removed:.2g} is below alpha/{WEAK_EVIDENCE_DIVISOR}; {interval}"
    reach = "none below 1" if certifiable_margin >= 1 else f"{certifiable_margin:.2f}"
    planned = f"the smallest margin this query size certifies in {level_text(CERTIFY_PROBABILITY)} of removed sets"
    if verdict == NOT_MEMORIZED:
        return (
            f"certified: at most {margin:.2f} of the set is retained (one-sided {level_text(certify_level)} bound "
            f"{upper_bound:.2f}); {planned}: {reach}"
        )
    if margin >= 1:  # --margin auto where this size certifies nothing: no bound could be "above" it
        return (
            f"neither shown: p_removed={p_removed:.2g} > alpha {alpha:g}, and no share below 1 can be certified at "
            f"this query size (one-sided {level_text(certify_level)} bound {upper_bound:.2f}); {planned}: {reach}"
        )
    if upper_bound <= margin and p_retained > alpha:  # below the margin, yet the whole set retained is not ruled out
        return (
            f"neither shown: p_removed={p_removed:.2g} > alpha {alpha:g}, and p_retained={p_retained:.2g} > alpha: the "
            f"whole set being retained is not ruled out, so the one-sided {level_text(certify_level)} bound "
            f"{upper_bound:.2f} certifies nothing (the mixture model's edge, not evidence); {planned}: {reach}"
        )
    if upper_bound <= margin:  # a bound at the mixture model's edge, with no information to certify by
        return (
            f"neither shown: p_removed={p_removed:.2g} > alpha {alpha:g}, and the one-sided "
            f"{level_text(certify_level)} bound {upper_bound:.2f} certifies nothing: the query fits no mix of the "
            f"references, which carry too little information to certify any share below 1 ({planned}: {reach})"
        )
    return (
        f"neither shown: p_removed={p_removed:.2g} > alpha {alpha:g} and the one-sided {level_text(certify_level)} "
        f"bound {upper_bound:.2f} > margin {margin:.2f}; {planned}: {reach}"
    )


def shift_warnings(p_too_forgotten: float, p_class_mix: float, p_fit: float, *, shift_alpha: float) -> list[str]:
    """Warnings that the query is unlike both references: its class mix, its fit to a mixture, too forgotten."""
    warnings = []
    if p_class_mix <= shift_alpha:
        warnings.append(
            f"the query's class mix differs from the non-member reference's (chi-square p={p_class_mix:.2g}): "
            "p_removed assumes a removed query is drawn like the reference"
        )
    if p_fit <= shift_alpha:
        warnings.append(
            f"the query's scores fit no mix of members and non-members (p={p_fit:.2g}): another domain or "
            "over-unlearning; p_removed and the retained fraction assume the query is like the references"
        )
    if p_too_forgotten <= shift_alpha:
        warnings.append(
            f"the query is less member-like than never-seen data (p_too_forgotten={p_too_forgotten:.2g}): "
            "approximate unlearning that overshot, or a domain shift"
        )
    return warnings


def reference_advice(
    n_reference: int,
    information: float,
    *,
    certify_level: float,
    binned_references: tuple[np.ndarray, np.ndarray] | None = None,
) -> str:
    """What a larger non-member reference would buy: "a reference of N would lower the floor to m".

    The floor z_L / sqrt(n_ref I) (:func:`~ema.stats.certify.reference_floor`) bounds the
    certifiable margin at any query size; :data:`REFERENCE_ADVICE_FACTOR` times the reference halves
    it. ``binned_references`` (the auditor's references per bin) make both floors follow the binned
    likelihood as the audit's own margin does, so the halving is then approximate. A floor of 1 or
    more is worded as nothing below 1 being certifiable, not as a number.

    Examples
    --------
    >>> reference_advice(1000, 0.1, certify_level=0.95)[:72]
    'a non-member reference of 4,000 samples would lower the floor to 0.082 ('
    """
    if information <= 0:
        return (
            f"the score carries no measurable information about the retained share (with {n_reference:,} "
            "non-members): no reference size makes a margin below 1 certifiable"
        )
    larger = REFERENCE_ADVICE_FACTOR * n_reference
    now, then = (
        reference_floor(size, information, certify_level=certify_level, binned_references=binned_references)
        for size in (n_reference, larger)
    )
    if then >= 1.0:
        return (
            f"even a non-member reference of {larger:,} samples (now {n_reference:,}) would leave nothing below 1 "
            "certifiable: the score carries too little information about the retained share"
        )
    return (
        f"a non-member reference of {larger:,} samples would lower the floor to {then:.3f} (now "
        f"{_floor_text(now)} with {n_reference:,}): the floor is the margin that even an unbounded query certifies "
        "in only half of removed sets, so none below it is certifiable"
    )


def _floor_text(floor: float) -> str:
    """A floor as the advice words it: its value, or "none below 1" where nothing below 1 is certifiable."""
    return "none below 1" if floor >= 1.0 else f"{floor:.3f}"


def information_metrics(estimate: InformationEstimate, suffix: str = "") -> dict[str, float]:
    """``information{suffix}`` and ``information{suffix}_lower`` as an audit reports them: the estimate and its
    lower bound, or NaN for both where the references estimated nothing (:attr:`InformationEstimate.estimable`).

    The 0 the certifiable margin then plans with is a convention, not a measurement: a NaN metric is
    not logged, and the report and printout say "not estimable".
    """
    if not estimate.estimable:
        return {f"information{suffix}": math.nan, f"information{suffix}_lower": math.nan}
    return {f"information{suffix}": estimate.estimate, f"information{suffix}_lower": estimate.lower_bound()}


def single_view_metrics(auditor: ReferenceAuditor, n_query: int) -> dict[str, float]:
    """With several views: the information and certifiable margin of the identity view alone; else none."""
    if auditor.n_views_ == 1:
        return {}
    return {
        **information_metrics(auditor.single_view_estimate_, "_single_view"),
        "certifiable_margin_single_view": auditor.certifiable_margin(n_query, single_view=True),
    }


def certify_record(
    margin: float | str,
    margin_used: float,
    certify_level: float,
    *,
    n_reference: int,
    information: float,
    information_lower: float,
    binned_references: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict:
    """``thresholds["certify"]``: the margin as asked and as used, the level, the information behind the
    certifiable margin (its lower bound; the point estimate beside it), and :func:`reference_advice` from it
    and the auditor's ``binned_references``.
    """
    return {
        "margin": margin,
        "margin_used": margin_used,
        "certify_level": certify_level,
        "information": information,
        "information_lower": information_lower,
        "margin_from": "information_lower",
        "advice": reference_advice(
            n_reference, information_lower, certify_level=certify_level, binned_references=binned_references
        ),
    }


def calibration_record(auditor: ReferenceAuditor) -> dict:
    """A calibrated auditor's calibration as JSON-ready data (``thresholds.json``): bins, weights, diagnostics,
    assumptions. Reads a calibrated auditor (:meth:`ReferenceAuditor.to_dict` checks that it is).
    """
    return {
        "method": auditor.method,
        "signal": auditor.signal,
        "score": view_score_name(auditor.signal, auditor.n_views_),
        "alpha": float(auditor.alpha),
        "margin": auditor.margin if auditor.margin == AUTO_MARGIN else float(auditor.margin),
        "certify_level": auditor.resolved_certify_level(),
        "information": auditor.information_,
        "information_lower": auditor.information_lower_,
        "confidence_level": float(auditor.confidence_level),
        "power": float(auditor.power),
        "levels": auditor.levels_.tolist(),
        "n_classes": auditor.n_classes_,
        "n_views": auditor.n_views_,
        "n_members": int(auditor.member_scores_.size),
        "n_nonmembers": int(auditor.nonmember_scores_.size),
        "edges": auditor.edges_.tolist(),
        "member_counts": auditor.member_counts_.tolist(),
        "nonmember_counts": auditor.nonmember_counts_.tolist(),
        "weights": auditor.weights_.tolist(),
        "diagnostics": dict(auditor.diagnostics_),
        "calibration_warnings": list(auditor.warnings_),
        "assumptions": dict(ASSUMPTIONS),
    }


def tests_record(removed: dict[str, PermutationTestResult], retained: dict[str, PermutationTestResult]) -> dict:
    """``thresholds["tests"]``: each test as data, by side (``removed`` by alternative, ``retained``'s "less")."""
    return {
        "removed": asdict(removed["greater"]),
        "too_forgotten": asdict(removed["less"]),
        "retained": asdict(retained["less"]),
    }
