"""The calibrated auditor: two exact-style hypothesis tests, an "inconclusive" outcome and a retained fraction.

The paper's EMA asks one question (is the query set like members?) through a t-test whose
p-value depends on the count of unflagged samples, not their share. This auditor asks two,
both on the low tail of the membership scores, where members rarely land (the tests are in
:mod:`ema.auditors.tail_tests`):

* H0 "removed": the query set behaves like data the target never saw. Tested against
  reference non-members scored ON THE TARGET (through the oracle), so no assumption links a
  calibration model to the target; Holm-corrected over signals x cut-offs: ``p_removed``.
* H0 "retained": the query set behaves like the target's members. Their tail share is
  measured on the calibration model (its training half against its held-out half) and
  transferred (the transfer assumption, recorded in every result; see
  :mod:`ema.auditors.transfer`); Holm-corrected: ``p_retained``.

Verdict at ``alpha``: ``memorized`` when H0 removed is rejected and H0 retained is not;
``not_memorized`` when H0 retained is rejected and H0 removed is not; ``inconclusive``
otherwise (too few samples to tell, or a partly removed set that is like neither).

Retained fraction: a query set mixing a share pi of members with non-members has tail
shares F_q = pi F_mem + (1 - pi) F_non at every cut-off, so pi is estimated on the first
metric with all cut-offs pooled, with an interval that carries the query, reference and
calibration sample sizes (transfer assumption). A lower bound needs the target only:
pi >= sup_c (F_ref(c) - F_q(c)), with finite-sample margins.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from ema.auditors.base import check_calibrated
from ema.auditors.calibrated_checks import check_calibration_arrays, check_quantile_levels
from ema.auditors.calibrated_record import ASSUMPTIONS, audit_record
from ema.auditors.reference_record import DEFAULT_MARGIN
from ema.auditors.result import INCONCLUSIVE, NOT_MEMORIZED, AuditResult
from ema.auditors.tail_tests import (
    HypothesisTests,
    QueryTails,
    count_query_tails,
    decide_verdict,
    run_tail_tests,
)
from ema.auditors.transfer import DEFAULT_TRANSFER_TOLERANCE, check_transfer
from ema.errors import InputError
from ema.signals import check_probabilities, check_signal_names, compute_scores
from ema.stats import (
    CORRECTIONS,
    DEFAULT_INTERVAL_DRAWS,
    MemberTailCurve,
    MemberTailRates,
    QuerySizeResult,
    RetainedFraction,
    member_tail_curve,
    retained_fraction_interval,
    retained_lower_bound,
    stratified_cutoffs,
)
from ema.stats import required_query_size as _required_query_size
from ema.thresholds import THRESHOLD_MODES
from ema.validation import check_choice, check_open_unit

#: Continuous signals by default: correctness is binary and carries no tail.
CALIBRATED_SIGNALS: tuple[str, ...] = ("confidence", "negative_entropy", "modified_entropy")
#: Quantile levels of the reference cut-offs.
DEFAULT_TAIL_LEVELS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.25, 0.5)


class CalibratedAuditor:
    """Tests "removed" against the target's own non-members and "retained" against transferred member behaviour.

    Parameters
    ----------
    signals : sequence of str
        membership signals from :data:`ema.signals.SIGNALS`; confidence, negative entropy and
        modified entropy (Song & Mittal 2020) by default.
    quantiles : sequence of float
        Increasing quantile levels of the reference cut-offs; the tail tests run at each.
    alpha : float
        Significance level of both tests (family-wise over signals x cut-offs).
    correction : {"holm", "bonferroni"}
        Family-wise correction. Holm and Bonferroni reject the family at the same p-value
        (the smallest adjusted one); Holm rejects more individual tests.
    confidence_level : float
        Level of the retained-fraction interval and of the target-only lower bound.
    margin : float
        ``not_memorized`` needs H0 "retained" rejected, H0 "removed" not, and the interval's upper
        end at most ``margin``: rejecting "all of it is retained" alone certifies no removal.
    threshold_mode : {"global", "per-class"}
        One reference cut-off per metric and level, or one per class as well (the tests then
        compare each query sample with reference samples of its own class).
    random_state : int or None
        Seed of the Monte Carlo draws of the retained-fraction interval; an int makes audits
        reproducible.
    n_draws : int
        Monte Carlo draws of that interval.

    Attributes
    ----------
    levels_ : ndarray of shape (n_levels,)
    n_classes_ : int
    n_reference_ : int
        Reference samples (target's non-members).
    stratum_reference_sizes_ : ndarray of shape (n_strata,)
        Reference samples behind each stratum's cut-offs (1 stratum in global mode).
    ranks_ : ndarray of shape (n_strata, n_levels)
        Rank of each cut-off among its stratum's reference scores.
    cutoffs_ : dict of str to ndarray of shape (n_strata, n_levels)
        The cut-off scores.
    member_curves_ : dict of str to MemberTailCurve
        The calibration model's member tail curves.
    member_rates_ : dict of str to MemberTailRates
        Those curves at the nominal levels.
    diagnostics_ : dict of str to float
        Accuracy of the target on the reference and of the calibration model on its two
        halves: a calibration model much less accurate on held-out data than the target, or
        with a larger train/held-out gap, breaks the transfer assumption.

    Examples
    --------
    >>> auditor = CalibratedAuditor().calibrate(ref_p, ref_y, mem_p, mem_y, non_p, non_y)  # doctest: +SKIP
    >>> auditor.audit(query_p, query_y).verdict  # doctest: +SKIP
    'memorized'
    """

    method = "calibrated"

    def __init__(
        self,
        signals: Sequence[str] = CALIBRATED_SIGNALS,
        *,
        quantiles: Sequence[float] = DEFAULT_TAIL_LEVELS,
        alpha: float = 0.1,
        correction: str = "holm",
        confidence_level: float = 0.9,
        margin: float = DEFAULT_MARGIN,
        threshold_mode: str = "global",
        random_state: int | None = 0,
        n_draws: int = DEFAULT_INTERVAL_DRAWS,
        transfer_tolerance: float = DEFAULT_TRANSFER_TOLERANCE,
    ) -> None:
        self.signals = tuple(signals)
        self.transfer_tolerance = transfer_tolerance
        self.quantiles = tuple(quantiles)
        self.alpha = alpha
        self.correction = correction
        self.confidence_level = confidence_level
        self.margin = margin
        self.threshold_mode = threshold_mode
        self.random_state = random_state
        self.n_draws = n_draws

    # ------------------------------------------------------------------ validation
    def _check_config(self) -> np.ndarray:
        check_signal_names(self.signals)
        check_open_unit("alpha", self.alpha)
        check_choice("correction", self.correction, CORRECTIONS)
        check_open_unit("confidence_level", self.confidence_level)
        check_open_unit("margin", self.margin)
        check_choice("threshold_mode", self.threshold_mode, THRESHOLD_MODES)
        if not (isinstance(self.n_draws, (int, np.integer)) and self.n_draws >= 100):
            raise InputError(f"expected n_draws to be an integer >= 100, got {self.n_draws!r}")
        return check_quantile_levels(self.quantiles)

    # ------------------------------------------------------------------ calibrate
    def calibrate(
        self,
        reference_proba: np.ndarray,
        reference_labels: np.ndarray,
        member_proba: np.ndarray,
        member_labels: np.ndarray,
        nonmember_proba: np.ndarray,
        nonmember_labels: np.ndarray,
    ) -> CalibratedAuditor:
        """Fit the reference cut-offs (on the target) and the member tail curves (on a calibration model).

        Parameters
        ----------
        reference_proba : ndarray of shape (n_reference, n_classes)
            The TARGET's probabilities on reference data it never saw.
        reference_labels : ndarray of shape (n_reference,)
        member_proba : ndarray of shape (n_members, n_classes)
            The CALIBRATION model's probabilities on its training half.
        member_labels : ndarray of shape (n_members,)
        nonmember_proba : ndarray of shape (n_nonmembers, n_classes)
            The calibration model's probabilities on its held-out half.
        nonmember_labels : ndarray of shape (n_nonmembers,)

        Returns
        -------
        self

        Raises
        ------
        InputError
            On invalid configuration, probabilities or labels, or class counts that differ.

        Warns
        -----
        UserWarning
            In per-class mode, for classes missing from the reference (their query samples are
            compared with the whole reference) or from the calibration non-members.
        """
        levels = self._check_config()
        arrays = check_calibration_arrays(
            reference=(reference_proba, reference_labels),
            member=(member_proba, member_labels),
            nonmember=(nonmember_proba, nonmember_labels),
        )
        scores = {name: compute_scores(proba, labels, self.signals) for name, (proba, labels) in arrays.items()}
        self.n_classes_ = int(arrays["reference"][0].shape[1])
        self._fit_reference_cutoffs(scores["reference"], arrays["reference"][1], levels)
        self._fit_member_curves(
            scores["member"], arrays["member"][1], scores["nonmember"], arrays["nonmember"][1], levels
        )
        self._fit_transfer_guard(arrays)
        self.levels_ = levels
        self.n_members_ = int(arrays["member"][1].size)
        self.n_nonmembers_ = int(arrays["nonmember"][1].size)
        return self

    def _fit_reference_cutoffs(self, scores: dict[str, np.ndarray], labels: np.ndarray, levels: np.ndarray) -> None:
        """Each metric's cut-offs at the reference's quantile ``levels`` (per class in per-class mode)."""
        per_class = self.threshold_mode == "per-class"
        n_reference = int(labels.size)
        strata = labels if per_class else np.zeros(n_reference, dtype=np.int64)
        n_strata = self.n_classes_ if per_class else 1
        cuts = {m: stratified_cutoffs(scores[m], strata, levels, n_strata=n_strata) for m in self.signals}
        # Ranks and reference sizes depend on the strata alone: the same for every metric.
        first = cuts[self.signals[0]]
        fallback = np.flatnonzero(~first.has_reference)
        if fallback.size:
            warnings.warn(
                f"classes {fallback.tolist()} have no reference samples; their query samples are compared with "
                "the whole reference",
                stacklevel=3,
            )
        self.cutoffs_: dict[str, np.ndarray] = {m: cut.cutoffs for m, cut in cuts.items()}
        self.reference_scores_: dict[str, np.ndarray] = {m: np.sort(scores[m]) for m in self.signals}
        self.n_reference_ = n_reference
        self.stratum_reference_sizes_ = first.reference_sizes
        self.reference_fallback_classes_ = fallback
        self.ranks_ = first.ranks

    def _fit_member_curves(
        self,
        member_scores: dict[str, np.ndarray],
        member_labels: np.ndarray,
        nonmember_scores: dict[str, np.ndarray],
        nonmember_labels: np.ndarray,
        levels: np.ndarray,
    ) -> None:
        """The calibration model's member tail curve of each metric (pooled over classes in per-class mode)."""
        per_class = self.threshold_mode == "per-class"
        self.member_curves_: dict[str, MemberTailCurve] = {}
        self.member_rates_: dict[str, MemberTailRates] = {}
        for signal in self.signals:  # a handful of signals
            self.member_curves_[signal] = member_tail_curve(
                member_scores[signal],
                nonmember_scores[signal],
                member_strata=member_labels if per_class else None,
                nonmember_strata=nonmember_labels if per_class else None,
            )
            self.member_rates_[signal] = self.member_curves_[signal].rates(levels)

    def _fit_transfer_guard(self, arrays: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        """Accuracies that reveal a calibration model unlike the target, and whether transfer is trusted."""
        check = check_transfer(
            arrays["reference"], arrays["member"], arrays["nonmember"], tolerance=self.transfer_tolerance
        )
        self.diagnostics_, self.transfer_gap_, self.transfer_ok_ = check.diagnostics, check.gap, check.trusted

    # ------------------------------------------------------------------ audit
    def audit(self, query_proba: np.ndarray, query_labels: np.ndarray) -> AuditResult:
        """Test both hypotheses on a query set and estimate how much of it is retained.

        Parameters
        ----------
        query_proba : ndarray of shape (n_query, n_classes)
            The target's probabilities on the query set.
        query_labels : ndarray of shape (n_query,)

        Returns
        -------
        AuditResult
            ``metrics``: ``p_removed``, ``p_retained``, ``retained_fraction``,
            ``retained_ci_low``, ``retained_ci_high``, ``retained_lower_bound_target_only``,
            ``n_query``, ``flag_rate``. ``thresholds``: cut-offs, every single test, the
            metric behind the estimate and ``assumptions`` (what each number relies on).
            ``flags[metric]`` is 1 where the sample scores above that metric's cut-off at the
            highest level (the reference median by default: outside the non-member tail);
            ``membership`` is the first metric's flags; ``flag_rate`` is its mean, about
            1 - level for non-members and 1 - T(level) for members. Descriptive only: the
            verdict comes from the tail tests.

        Raises
        ------
        InputError
            If not calibrated (:class:`~ema.errors.NotCalibratedError`), or on invalid probabilities or labels.
        """
        levels, proba, labels = self._check_query(query_proba, query_labels)
        scores = compute_scores(proba, labels, self.signals)
        tails = self._count_tails(scores, labels)
        tests = self._test_hypotheses(tails)
        flags = {m: scores[m] > self.cutoffs_[m][tails.strata, -1] for m in self.signals}
        membership = flags[self.signals[0]].astype(np.int8)
        retained = self._retained_fraction_metrics(scores, tails)
        verdict = decide_verdict(tests.p_removed_family, tests.p_retained_family, self.alpha)
        if verdict == NOT_MEMORIZED and retained["retained_ci_high"] > self.margin:
            verdict = INCONCLUSIVE
        return AuditResult(
            method=self.method,
            scores=scores,
            flags=flags,
            membership=membership,
            metrics={
                "p_removed": tests.p_removed_family,
                "p_retained": tests.p_retained_family,
                **retained,
                "n_query": float(tails.n),
                "flag_rate": float(membership.mean()),
            },
            verdict=verdict,
            alpha=float(self.alpha),
            thresholds={**self.to_dict(), **audit_record(self.signals, levels, tails, tests)},
        )

    def _check_query(self, query_proba: np.ndarray, query_labels: np.ndarray) -> tuple[np.ndarray, ...]:
        """Refuse an uncalibrated auditor, changed quantiles and invalid query arrays; return levels, proba, labels."""
        check_calibrated(self)
        levels = self._check_config()
        if levels.shape != self.levels_.shape or not np.allclose(levels, self.levels_):
            raise InputError(
                f"expected the quantiles used at calibration {self.levels_.tolist()}, got "
                f"{levels.tolist()}: calibrate again"
            )
        proba, labels = check_probabilities(query_proba, query_labels)
        if proba.shape[1] != self.n_classes_:
            raise InputError(
                f"expected probabilities over the calibrated {self.n_classes_} classes, got {proba.shape[1]} columns"
            )
        return levels, proba, labels

    def _count_tails(self, scores: dict[str, np.ndarray], labels: np.ndarray) -> QueryTails:
        """The query's samples at or below each cut-off (of their stratum), and the non-member share expected there."""
        scores_in_order, cutoffs_in_order = [scores[m] for m in self.signals], [self.cutoffs_[m] for m in self.signals]
        return count_query_tails(scores_in_order, labels, cutoffs_in_order, self.ranks_, self.stratum_reference_sizes_)

    def _test_hypotheses(self, tails: QueryTails) -> HypothesisTests:
        """Every single test of H0 "removed" and H0 "retained", corrected over the family."""
        return run_tail_tests(
            tails,
            ranks=self.ranks_,
            reference_sizes=self.stratum_reference_sizes_,
            member_curves=[self.member_curves_[m] for m in self.signals],
            correction=self.correction,
            transfer_trusted=self.transfer_ok_,
        )

    def _retained_fraction_metrics(self, scores: dict[str, np.ndarray], tails: QueryTails) -> dict[str, float]:
        """The retained fraction, its interval, the transfer gap behind it and the target-only lower bound.

        Member behaviour that cannot be transferred leaves the interval at [target-only lower bound, 1].
        """
        fraction = self._estimate_retained_fraction(tails)
        lower_bound = float(self._bound_retained_fraction(scores))
        low, high = (fraction.low, fraction.high) if self.transfer_ok_ else (lower_bound, 1.0)
        return {
            "retained_fraction": fraction.estimate,
            "retained_ci_low": low,
            "retained_ci_high": high,
            "transfer_gap": float(self.transfer_gap_),
            "retained_lower_bound_target_only": lower_bound,
        }

    def _estimate_retained_fraction(self, tails: QueryTails) -> RetainedFraction:
        """The retained fraction with its interval, on the first metric (transfer assumption)."""
        # All cut-offs pooled with fixed weights: nothing is picked after seeing the data, which
        # would bias the estimate.
        return retained_fraction_interval(
            tails.counts[0],
            tails.n,
            reference_ranks=self.ranks_,
            reference_sizes=self.stratum_reference_sizes_,
            member_curve=self.member_curves_[self.signals[0]],
            stratum_weights=tails.weights,
            confidence_level=self.confidence_level,
            n_draws=int(self.n_draws),
            random_state=self.random_state,
        )

    def _bound_retained_fraction(self, scores: dict[str, np.ndarray]) -> float:
        """The target-only lower bound on the retained fraction, the best over the signals."""
        # Each metric's bound at a Bonferroni-split level, so their maximum holds at confidence_level.
        bound_level = 1.0 - (1.0 - self.confidence_level) / len(self.signals)
        return max(
            retained_lower_bound(scores[m], self.reference_scores_[m], confidence_level=bound_level).low
            for m in self.signals
        )

    # ------------------------------------------------------------------ power and export
    def required_query_size(self, *, power: float = 0.9, max_n: int = 100_000) -> QuerySizeResult:
        """Smallest |D_q| at which a member set of the target rejects H0 "removed" with ``power``.

        Uses the reference size and the member tail shares measured at calibration (under the
        transfer assumption); see :func:`ema.stats.required_query_size`. In per-class mode the
        cut-offs are approximated by global ones.
        """
        check_calibrated(self)
        rates = np.stack([self.member_rates_[m].rate for m in self.signals])
        return _required_query_size(
            rates, self.levels_, self.n_reference_, alpha=self.alpha, power=power, n_tests=int(rates.size), max_n=max_n
        )

    def to_dict(self) -> dict:
        """The calibration as JSON-ready data (``thresholds.json``): cut-offs, member shares, assumptions."""
        check_calibrated(self)
        per_class = self.threshold_mode == "per-class"
        return {
            "method": self.method,
            "mode": self.threshold_mode,
            "levels": self.levels_.tolist(),
            "alpha": float(self.alpha),
            "correction": self.correction,
            "confidence_level": float(self.confidence_level),
            "margin": float(self.margin),
            "n_classes": self.n_classes_,
            "n_reference": self.n_reference_,
            "n_members": self.n_members_,
            "n_nonmembers": self.n_nonmembers_,
            "reference_fallback_classes": self.reference_fallback_classes_.tolist(),
            "signals": {
                m: {
                    "cutoffs": self.cutoffs_[m].tolist() if per_class else self.cutoffs_[m][0].tolist(),
                    "member_tail_rates": self.member_rates_[m].rate.tolist(),
                }
                for m in self.signals
            },
            "diagnostics": {
                **self.diagnostics_,
                "transfer_gap": self.transfer_gap_,
                "transfer_tolerance": self.transfer_tolerance,
                "transfer_trusted": self.transfer_ok_,
            },
            "assumptions": dict(ASSUMPTIONS),
        }
