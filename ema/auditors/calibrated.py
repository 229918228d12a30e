"""The calibrated auditor: two exact-style hypothesis tests, an "inconclusive" outcome and a retained fraction.

The paper's EMA asks one question (is the query set like members?) through a t-test whose
p-value depends on the count of unflagged samples, not their share. This auditor asks two:

* H0 "removed": the query set behaves like data the target never saw. Tested against
  reference non-members scored ON THE TARGET (through the oracle), so no assumption links a
  calibration model to the target. Membership shows in the low tail: a well-trained
  classifier is as confident on most non-members as on members, but members rarely land
  among the least confident scores. For each metric and each cut-off (the reference's 1%,
  5%, 10%, 25% and 50% order statistics by default) the number of query samples at or below
  the cut-off is compared with its exact placement law (beta-binomial: exact for any score
  distribution, no reference sample spent on choosing cut-offs). A memorized query set puts
  FEWER samples in the tail. Holm's correction over signals x cut-offs gives ``p_removed``.
* H0 "retained": the query set behaves like the target's members. Members of the target
  cannot be observed, so their tail share is measured on the calibration model (its training
  half against its held-out half) at the same non-member quantile level, and transferred
  (the transfer assumption, recorded in every result). A removed query set puts MORE samples
  in the tail than members would; beta-binomial tests that account for the finite
  calibration and reference samples, Holm-corrected, give ``p_retained``.

Verdict at ``alpha``: ``memorized`` when H0 removed is rejected and H0 retained is not;
``not_memorized`` when H0 retained is rejected and H0 removed is not; ``inconclusive``
otherwise (too few samples to tell, or a partly removed set that is like neither).

Retained fraction: a query set mixing a share pi of members with non-members has tail
shares F_q = pi F_mem + (1 - pi) F_non at every cut-off, so pi is estimated on the first
metric with all cut-offs pooled, with an interval that carries the query, reference and
calibration sample sizes (transfer assumption). A lower bound needs the target only:
pi >= sup_c (F_ref(c) - F_q(c)), with finite-sample margins.

The transfer assumption is the weak point: a calibration model that overfits more than the
target (e.g. trained on far fewer samples) understates how often the target's members fall
in the tail, so H0 "retained" is rejected for real members and the interval moves down.
``to_dict()["diagnostics"]`` records the accuracies that reveal such a mismatch.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ema.auditors.ema import check_alpha
from ema.auditors.result import INCONCLUSIVE, MEMORIZED, NOT_MEMORIZED, AuditResult
from ema.errors import InputError
from ema.signals import check_probabilities, check_signal_names, compute_scores
from ema.stats import (
    CORRECTIONS,
    DEFAULT_INTERVAL_DRAWS,
    MemberTailCurve,
    MemberTailRates,
    QuerySizeResult,
    RetainedFraction,
    adjust_pvalues,
    expected_cutoff_levels,
    member_tail_curve,
    member_tail_pvalues,
    order_statistic_level_variance,
    placement_pvalues,
    retained_fraction_interval,
    retained_lower_bound,
    stratified_cutoffs,
)
from ema.stats import required_query_size as _required_query_size
from ema.thresholds import THRESHOLD_MODES

#: Continuous signals by default: correctness is binary and carries no tail.
CALIBRATED_SIGNALS: tuple[str, ...] = ("confidence", "negative_entropy", "modified_entropy")
#: Largest |target reference accuracy - calibration non-member accuracy| at which member
#: behaviour is transferred from the calibration model; beyond it H0 "retained" is not tested
#: and the retained interval falls back to [target-only lower bound, 1].
DEFAULT_TRANSFER_TOLERANCE = 0.02
#: Quantile levels of the reference cut-offs.
DEFAULT_TAIL_LEVELS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.25, 0.5)

#: What each reported number relies on; copied into every result's ``thresholds["assumptions"]``.
ASSUMPTIONS: dict[str, str] = {
    "p_removed": (
        "target only: exact placement tests of the query against reference data the target never saw, "
        "scored through the oracle; assumes the query, if removed, is distributed like the reference "
        "(same domain and class mix; per class in per-class mode)"
    ),
    "p_retained": (
        "transfer: the target's members sit in the target's non-member low tail as the calibration model's "
        "members sit in its own (equal member share at equal non-member quantile level); a calibration model "
        "that overfits more than the target makes this test reject too often"
    ),
    "retained_fraction": "transfer: member tail share from the calibration model (mixture F_q = pi F_mem + "
    "(1 - pi) F_non)",
    "retained_ci_low": "transfer: member tail share from the calibration model",
    "retained_ci_high": "transfer: member tail share from the calibration model",
    "retained_lower_bound_target_only": (
        "target only: pi >= sup_c (F_ref(c) - F_query(c)) with Dvoretzky-Kiefer-Wolfowitz-Massart margins; "
        "no calibration model; assumes the non-removed part is distributed like the reference"
    ),
}


def _check_levels(quantiles: Sequence[float]) -> np.ndarray:
    levels = np.asarray(quantiles, dtype=np.float64)
    if (
        levels.ndim != 1
        or levels.size == 0
        or not np.isfinite(levels).all()
        or np.any((levels <= 0) | (levels >= 1))
        or np.any(np.diff(levels) <= 0)
    ):
        raise InputError(
            f"expected `quantiles` to be increasing levels in (0, 1), e.g. (0.01, 0.05, 0.1), got {list(quantiles)}"
        )
    return levels


def _check_calibration_arrays(**pairs: tuple[np.ndarray, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each (probabilities, labels) pair checked, in the order given, all over the same classes."""
    arrays = {name: check_probabilities(proba, labels) for name, (proba, labels) in pairs.items()}
    n_classes = {name: proba.shape[1] for name, (proba, _) in arrays.items()}
    if len(set(n_classes.values())) != 1:
        raise InputError(f"expected the same number of classes in every input, got {n_classes}")
    return arrays


@dataclass(frozen=True)
class _QueryTails:
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
class _HypothesisTests:
    """The single tests of both hypotheses, (n_signals, n_levels) each, and the family-wise p-values."""

    member_rate: np.ndarray
    p_removed: np.ndarray
    p_retained: np.ndarray
    adjusted_removed: np.ndarray
    adjusted_retained: np.ndarray
    p_removed_family: float
    p_retained_family: float


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
        self.threshold_mode = threshold_mode
        self.random_state = random_state
        self.n_draws = n_draws

    # ------------------------------------------------------------------ validation
    def _check_config(self) -> np.ndarray:
        check_signal_names(self.signals)
        check_alpha(self.alpha)
        if self.correction not in CORRECTIONS:
            raise InputError(f"expected correction in {CORRECTIONS}, got {self.correction!r}")
        if not 0.0 < self.confidence_level < 1.0:
            raise InputError(f"expected confidence_level in (0, 1), got {self.confidence_level}")
        if self.threshold_mode not in THRESHOLD_MODES:
            raise InputError(f"expected threshold_mode in {THRESHOLD_MODES}, got {self.threshold_mode!r}")
        if not (isinstance(self.n_draws, (int, np.integer)) and self.n_draws >= 100):
            raise InputError(f"expected n_draws to be an integer >= 100, got {self.n_draws!r}")
        return _check_levels(self.quantiles)

    def _check_fitted(self) -> None:
        if not hasattr(self, "cutoffs_"):
            raise InputError("this CalibratedAuditor is not calibrated yet: call calibrate() first")

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
        arrays = _check_calibration_arrays(
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
        # Transfer diagnostics: a calibration model should generalise like the target
        # (similar held-out accuracy, not a much larger train/held-out gap).
        self.diagnostics_ = {
            f"{name}_accuracy": float((proba.argmax(axis=1) == labels).mean())
            for name, (proba, labels) in zip(
                ("target_reference", "calibration_member", "calibration_nonmember"), arrays.values()
            )
        }
        # The guard: transfer is trusted only when the calibration model generalises like the target.
        self.transfer_gap_ = (
            self.diagnostics_["target_reference_accuracy"] - self.diagnostics_["calibration_nonmember_accuracy"]
        )
        self.transfer_ok_ = bool(abs(self.transfer_gap_) <= self.transfer_tolerance)

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
            If not calibrated, or on invalid probabilities or labels.
        """
        levels, proba, labels = self._check_query(query_proba, query_labels)
        scores = compute_scores(proba, labels, self.signals)
        tails = self._count_tails(scores, labels)
        tests = self._test_hypotheses(tails)
        fraction = self._estimate_retained_fraction(tails)
        lower_bound = self._bound_retained_fraction(scores)
        interval = (fraction.low, fraction.high) if self.transfer_ok_ else (float(lower_bound), 1.0)
        flags = {m: scores[m] > self.cutoffs_[m][tails.strata, -1] for m in self.signals}
        membership = flags[self.signals[0]].astype(np.int8)
        return AuditResult(
            method=self.method,
            scores=scores,
            flags=flags,
            membership=membership,
            metrics={
                "p_removed": tests.p_removed_family,
                "p_retained": tests.p_retained_family,
                "retained_fraction": fraction.estimate,
                "retained_ci_low": interval[0],
                "retained_ci_high": interval[1],
                "transfer_gap": float(self.transfer_gap_),
                "retained_lower_bound_target_only": float(lower_bound),
                "n_query": float(tails.n),
                "flag_rate": float(membership.mean()),
            },
            verdict=decide_verdict(tests.p_removed_family, tests.p_retained_family, self.alpha),
            alpha=float(self.alpha),
            thresholds=self._audit_record(levels, tails, tests),
        )

    def _check_query(self, query_proba: np.ndarray, query_labels: np.ndarray) -> tuple[np.ndarray, ...]:
        """Refuse an uncalibrated auditor, changed quantiles and invalid query arrays; return levels, proba, labels."""
        self._check_fitted()
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

    def _count_tails(self, scores: dict[str, np.ndarray], labels: np.ndarray) -> _QueryTails:
        """The query's samples at or below each cut-off (of their stratum), and the non-member share expected there."""
        n = int(labels.size)
        n_strata = self.stratum_reference_sizes_.size
        strata = labels if n_strata > 1 else np.zeros(n, dtype=np.int64)
        stratum_sizes = np.bincount(strata, minlength=n_strata)
        weights = stratum_sizes / n
        return _QueryTails(
            n=n,
            strata=strata,
            stratum_sizes=stratum_sizes,
            weights=weights,
            counts=np.stack([(scores[m][:, None] <= self.cutoffs_[m][strata]).sum(axis=0) for m in self.signals]),
            nonmember_rate=expected_cutoff_levels(self.ranks_, self.stratum_reference_sizes_, weights),
            nonmember_variance=(weights**2)
            @ order_statistic_level_variance(self.ranks_, self.stratum_reference_sizes_[:, None]),
        )

    def _test_hypotheses(self, tails: _QueryTails) -> _HypothesisTests:
        """Every single test of H0 "removed" and H0 "retained", corrected over the family."""
        p_removed = self._removed_pvalues(tails)
        member_rate, p_retained = self._retained_pvalues(tails)
        adjusted_removed = adjust_pvalues(p_removed, self.correction)
        adjusted_retained = adjust_pvalues(p_retained, self.correction)
        return _HypothesisTests(
            member_rate=member_rate,
            p_removed=p_removed,
            p_retained=p_retained,
            adjusted_removed=adjusted_removed,
            adjusted_retained=adjusted_retained,
            p_removed_family=float(adjusted_removed.min()),
            # Member behaviour that cannot be transferred leaves H0 "retained" untested, so the
            # auditor never calls a set removed on that evidence.
            p_retained_family=float(adjusted_retained.min()) if self.transfer_ok_ else 1.0,
        )

    def _removed_pvalues(self, tails: _QueryTails) -> np.ndarray:
        """Exact placement p-values of H0 "removed", (n_signals, n_levels): a memorized query has FEWER in the tail."""
        n_signals, n_levels = tails.counts.shape
        return placement_pvalues(
            tails.counts.ravel(),
            tails.stratum_sizes,
            np.tile(self.ranks_.T, (n_signals, 1)),
            self.stratum_reference_sizes_,
            alternative="less",
        ).reshape(n_signals, n_levels)

    def _retained_pvalues(self, tails: _QueryTails) -> tuple[np.ndarray, np.ndarray]:
        """Members' tail share at the query's cut-off levels and the p-values of H0 "retained", (n_signals, n_levels).

        A removed query puts MORE samples in the tail than members would.
        """
        member_rates = [self.member_curves_[m].rates(tails.nonmember_rate) for m in self.signals]
        member_rate = np.stack([r.rate for r in member_rates])
        member_variance = np.stack([r.variance for r in member_rates])
        slope = np.stack([r.slope for r in member_rates])
        null_variance = member_variance + slope**2 * tails.nonmember_variance[None, :]
        p_retained = member_tail_pvalues(tails.counts.ravel(), tails.n, member_rate.ravel(), null_variance.ravel())
        return member_rate, p_retained.reshape(member_rate.shape)

    def _estimate_retained_fraction(self, tails: _QueryTails) -> RetainedFraction:
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

    def _audit_record(self, levels: np.ndarray, tails: _QueryTails, tests: _HypothesisTests) -> dict:
        """The result's ``thresholds``: the calibration, every single test and how the estimate pools them."""
        single_tests = [
            {
                "metric": metric,
                "level": float(levels[k]),
                "count": int(tails.counts[i, k]),
                "nonmember_share": float(tails.nonmember_rate[k]),
                "member_share": float(tests.member_rate[i, k]),
                "p_removed": float(tests.p_removed[i, k]),
                "p_removed_adjusted": float(tests.adjusted_removed[i, k]),
                "p_retained": float(tests.p_retained[i, k]),
                "p_retained_adjusted": float(tests.adjusted_retained[i, k]),
            }
            for i, metric in enumerate(self.signals)
            for k in range(levels.size)
        ]
        return {
            **self.to_dict(),
            "tests": single_tests,
            "estimate": {
                "metric": self.signals[0],
                "levels": levels.tolist(),
                "pooling": "equal weights over the cut-offs: pi = sum(F_non - F_q) / sum(F_non - F_mem)",
            },
            "membership": f"{self.signals[0]} above its cut-off at level {levels[-1]:g} (outside the non-member tail)",
        }

    # ------------------------------------------------------------------ power and export
    def required_query_size(self, *, power: float = 0.9, max_n: int = 100_000) -> QuerySizeResult:
        """Smallest |D_q| at which a member set of the target rejects H0 "removed" with ``power``.

        Uses the reference size and the member tail shares measured at calibration (under the
        transfer assumption); see :func:`ema.stats.required_query_size`. In per-class mode the
        cut-offs are approximated by global ones.
        """
        self._check_fitted()
        rates = np.stack([self.member_rates_[m].rate for m in self.signals])
        return _required_query_size(
            rates, self.levels_, self.n_reference_, alpha=self.alpha, power=power, n_tests=int(rates.size), max_n=max_n
        )

    def to_dict(self) -> dict:
        """The calibration as JSON-ready data (``thresholds.json``): cut-offs, member shares, assumptions."""
        self._check_fitted()
        per_class = self.threshold_mode == "per-class"
        return {
            "method": self.method,
            "mode": self.threshold_mode,
            "levels": self.levels_.tolist(),
            "alpha": float(self.alpha),
            "correction": self.correction,
            "confidence_level": float(self.confidence_level),
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
