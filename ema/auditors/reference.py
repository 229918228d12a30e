"""The member-reference auditor: both hypotheses tested on the target itself, a retained fraction, stated power.

Inputs are the TARGET's probabilities on two references: samples known to be in its training
data (for a workbench target, the training folds other than the audited one: auditing M1 uses
M2..M5) and samples it never saw (the clean calibration set). No calibration model, so no
assumption that another model's members behave like the target's.

* H0 "removed": the query is exchangeable with the non-member reference.
* H0 "retained": the query is exchangeable with the member reference.

Both are exact permutation tests of one statistic, the sum of the query samples' binned
member / non-member log-likelihood ratio (see :mod:`ema.stats.binned_tests`). The
retained share pi (F_q = pi F_mem + (1 - pi) F_non) gets a profile-likelihood interval that
carries both references' sampling error.

Verdict at ``alpha`` and ``margin``: ``memorized`` when H0 "removed" is rejected;
``not_memorized`` when it is not and the retained share's upper confidence bound is at most
``margin`` (the data rule out that more than ``margin`` of the query is still memorized);
``inconclusive`` otherwise. Every result states how sure it could have been:
``power_retained`` (the probability that a fully memorized query of this size is called
``memorized``) and ``min_detectable_fraction``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

import numpy as np
from scipy import stats

from ema.auditors.base import check_calibrated
from ema.auditors.reference_gates import reference_gate_warnings
from ema.auditors.result import INCONCLUSIVE, MEMORIZED, NOT_MEMORIZED, AuditResult
from ema.errors import InputError
from ema.signals import SIGNALS, check_probabilities, check_signal_names
from ema.stats.binned_tests import (
    DEFAULT_BIN_LEVELS,
    DEFAULT_N_PERMUTATIONS,
    bin_counts,
    check_levels,
    class_mix_pvalue,
    log_likelihood_ratio,
    quantile_edges,
    removal_test,
    retention_test,
)
from ema.stats.mixture import DEFAULT_POWER_RESAMPLES, DetectionPower, resampled_power, retained_fraction
from ema.thresholds import select_threshold
from ema.validation import check_open_unit

#: The default score: the true-class log-odds, which keeps resolving outputs that round to 1.0.
DEFAULT_SIGNAL = "log_odds"
#: Binary scores carry no ranking within a class of outcome; refused as the auditor's score.
BINARY_SIGNALS = ("correctness",)
#: Largest retained share a ``not_memorized`` verdict allows (its upper confidence bound).
DEFAULT_MARGIN = 0.1
#: Power that defines the minimum detectable fraction.
DEFAULT_POWER = 0.9
#: Significance level of the shift checks (class mix, mixture fit); lower than alpha because
#: they only warn, and a warning on every tenth clean audit would be noise.
DEFAULT_SHIFT_ALPHA = 0.01

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
}


def decide_reference_verdict(p_removed: float, retained_high: float, *, alpha: float, margin: float) -> str:
    """``memorized`` if H0 "removed" is rejected; ``not_memorized`` if not and pi's upper bound <= margin.

    Examples
    --------
    >>> decide_reference_verdict(0.01, 0.9, alpha=0.1, margin=0.1)
    'memorized'
    >>> decide_reference_verdict(0.6, 0.05, alpha=0.1, margin=0.1)
    'not_memorized'
    >>> decide_reference_verdict(0.6, 0.4, alpha=0.1, margin=0.1)
    'inconclusive'
    """
    if p_removed <= alpha:
        return MEMORIZED
    if retained_high <= margin:
        return NOT_MEMORIZED
    return INCONCLUSIVE


class ReferenceAuditor:
    """Tests "removed" and "retained" against references scored on the target, and states its power.

    Parameters
    ----------
    signal : str
        A continuous membership signal from :data:`ema.signals.SIGNALS`; ``"log_odds"`` by default
        (rank-equivalent to the confidence, but it still separates outputs tied at 1.0 in float32).
    alpha : float
        Level of the tests; ``memorized`` means p_removed <= alpha.
    margin : float
        Largest retained share that ``not_memorized`` allows: the interval's upper bound must
        be at most ``margin``.
    confidence_level : float
        Level of the retained-fraction interval (two-sided; the upper bound is one-sided at
        (1 + confidence_level) / 2).
    power : float
        Power that defines ``min_detectable_fraction``.
    levels : sequence of float
        Quantile levels of the non-member side at which scores are binned.
    n_permutations : int
        Monte Carlo permutations per test (the p-value is exact for any number; more draws
        lose less power).
    shift_alpha : float
        Level of the checks that only warn: class mix, mixture fit, and the over-unlearning
        trace (``p_too_forgotten``; at ``alpha`` it would warn on one clean audit in ten).
    n_power_resamples : int
        Resampled member queries behind ``power_retained`` and ``min_detectable_fraction``
        (computed once per query size).
    random_state : int or None
        Seeds the permutations and the power draws; an int makes audits reproducible.

    Attributes
    ----------
    n_classes_ : int
    edges_ : ndarray of shape (n_bins - 1,)
        Bin edges: the non-member reference's scores at ``levels``.
    member_counts_, nonmember_counts_ : ndarray of shape (n_bins,)
        Both references per bin.
    weights_ : ndarray of shape (n_bins,)
        Binned log-likelihood ratio of members against non-members.
    diagnostics_ : dict of str to float
        Accuracies of the target on both references, the score's AUC and best balanced accuracy
        (members against non-members), and the share of non-members with a positive weight.
    warnings_ : list of str
        Gate warnings from the references
        (:func:`~ema.auditors.reference_gates.reference_gate_warnings`), carried by every audit.

    Examples
    --------
    >>> auditor = ReferenceAuditor().calibrate(mem_p, mem_y, non_p, non_y)  # doctest: +SKIP
    >>> result = auditor.audit(query_p, query_y)  # doctest: +SKIP
    >>> result.verdict, result.metrics["retained_ci_high"], result.thresholds["warnings"]  # doctest: +SKIP
    ('not_memorized', 0.07, [])
    """

    method = "reference"

    def __init__(
        self,
        signal: str = DEFAULT_SIGNAL,
        *,
        alpha: float = 0.1,
        margin: float = DEFAULT_MARGIN,
        confidence_level: float = 0.9,
        power: float = DEFAULT_POWER,
        levels: Sequence[float] = DEFAULT_BIN_LEVELS,
        n_permutations: int = DEFAULT_N_PERMUTATIONS,
        shift_alpha: float = DEFAULT_SHIFT_ALPHA,
        n_power_resamples: int = DEFAULT_POWER_RESAMPLES,
        random_state: int | None = 0,
    ) -> None:
        self.signal = signal
        self.alpha = alpha
        self.margin = margin
        self.confidence_level = confidence_level
        self.power = power
        self.levels = tuple(levels)
        self.n_permutations = n_permutations
        self.shift_alpha = shift_alpha
        self.n_power_resamples = n_power_resamples
        self.random_state = random_state

    # ------------------------------------------------------------------ validation
    def _check_config(self) -> np.ndarray:
        check_signal_names([self.signal])
        if self.signal in BINARY_SIGNALS:
            raise InputError(f"expected a continuous signal, not one of {BINARY_SIGNALS}, got {self.signal!r}")
        for name in ("alpha", "margin", "confidence_level", "power", "shift_alpha"):
            check_open_unit(name, getattr(self, name))
        for name in ("n_permutations", "n_power_resamples"):
            value = getattr(self, name)
            if not (isinstance(value, (int, np.integer)) and value >= 100):
                raise InputError(f"expected {name} to be an integer >= 100, got {value!r}")
        return check_levels(self.levels)

    # ------------------------------------------------------------------ calibrate
    def calibrate(
        self,
        member_proba: np.ndarray,
        member_labels: np.ndarray,
        nonmember_proba: np.ndarray,
        nonmember_labels: np.ndarray,
    ) -> ReferenceAuditor:
        """Score both references on the target, bin them, and check that they can support a verdict.

        Parameters
        ----------
        member_proba : ndarray of shape (n_members, n_classes)
            The TARGET's probabilities on samples in its training data, excluding the query's
            own samples (auditing fold M1: folds M2..M5).
        member_labels : ndarray of shape (n_members,)
        nonmember_proba : ndarray of shape (n_nonmembers, n_classes)
            The TARGET's probabilities on samples it never saw, drawn like a removed query would
            be (the clean calibration set).
        nonmember_labels : ndarray of shape (n_nonmembers,)

        Returns
        -------
        self

        Raises
        ------
        InputError
            On invalid configuration, probabilities or labels, or class counts that differ.
        """
        levels = self._check_config()
        member_proba, member_labels = check_probabilities(member_proba, member_labels)
        nonmember_proba, nonmember_labels = check_probabilities(nonmember_proba, nonmember_labels)
        if member_proba.shape[1] != nonmember_proba.shape[1]:
            raise InputError(
                f"expected member and non-member references over the same classes, got {member_proba.shape[1]} and "
                f"{nonmember_proba.shape[1]} columns"
            )
        score = SIGNALS[self.signal]
        members, nonmembers = score(member_proba, member_labels), score(nonmember_proba, nonmember_labels)
        self.n_classes_ = int(member_proba.shape[1])
        self.member_scores_, self.nonmember_scores_ = members, nonmembers
        self.nonmember_labels_ = nonmember_labels
        self.edges_ = quantile_edges(nonmembers, levels)
        self.member_counts_ = bin_counts(members, self.edges_)
        self.nonmember_counts_ = bin_counts(nonmembers, self.edges_)
        self.weights_ = log_likelihood_ratio(self.member_counts_, self.nonmember_counts_)
        u_statistic = stats.mannwhitneyu(members, nonmembers).statistic
        self.diagnostics_ = {
            "member_accuracy": float((member_proba.argmax(axis=1) == member_labels).mean()),
            "reference_accuracy": float((nonmember_proba.argmax(axis=1) == nonmember_labels).mean()),
            "auc": float(u_statistic / (members.size * nonmembers.size)),
            "balanced_accuracy": float(select_threshold(members, nonmembers).balanced_accuracy),
            "nonmember_flag_rate": float(self.nonmember_counts_[self.weights_ > 0].sum() / nonmembers.size),
        }
        self.warnings_ = reference_gate_warnings(n_classes=self.n_classes_, **self.diagnostics_)
        self.levels_ = levels
        self._power_cache: dict[int, DetectionPower] = {}
        return self

    # ------------------------------------------------------------------ power
    def detection_power(self, n_query: int) -> DetectionPower:
        """Power of H0 "removed" at ``n_query`` samples, resampling the member reference (cached per size, seeded)."""
        check_calibrated(self)
        if n_query not in self._power_cache:
            self._power_cache[n_query] = resampled_power(
                self.member_scores_,
                self.nonmember_scores_,
                int(n_query),
                alpha=self.alpha,
                power=self.power,
                levels=self.levels_,
                n_resamples=int(self.n_power_resamples),
                random_state=self.random_state,
            )
        return self._power_cache[n_query]

    # ------------------------------------------------------------------ audit
    def audit(self, query_proba: np.ndarray, query_labels: np.ndarray) -> AuditResult:
        """Test both hypotheses on a query set, estimate its retained share, state the power, check for shift.

        Parameters
        ----------
        query_proba : ndarray of shape (n_query, n_classes)
            The target's probabilities on the query set.
        query_labels : ndarray of shape (n_query,)

        Returns
        -------
        AuditResult
            ``metrics``: ``p_removed``, ``p_retained``, ``p_too_forgotten``,
            ``retained_fraction``, ``retained_ci_low``, ``retained_ci_high``,
            ``power_retained``, ``min_detectable_fraction`` (NaN when not reached),
            ``p_class_mix``, ``p_mixture_fit``, ``n_query``, ``flag_rate``.
            ``thresholds["warnings"]``: list of str, the calibration gates plus this query's
            shift checks (``[]`` when none). ``flags[signal]``: the sample's bin has a positive
            log-likelihood ratio (descriptive only; the verdict comes from the tests).

        Raises
        ------
        InputError
            If not calibrated (:class:`~ema.errors.NotCalibratedError`), or on invalid probabilities or labels.
        """
        check_calibrated(self)
        levels = self._check_config()
        if levels.shape != self.levels_.shape or not np.allclose(levels, self.levels_):
            raise InputError(
                f"expected the levels used at calibration {self.levels_.tolist()}, got {levels.tolist()}: "
                "calibrate again"
            )
        proba, labels = check_probabilities(query_proba, query_labels)
        if proba.shape[1] != self.n_classes_:
            raise InputError(
                f"expected probabilities over the calibrated {self.n_classes_} classes, got {proba.shape[1]} columns"
            )
        scores = SIGNALS[self.signal](proba, labels)
        n = int(labels.size)
        rng = np.random.default_rng(self.random_state)
        options = {"levels": levels, "n_permutations": int(self.n_permutations), "random_state": rng}
        removed = removal_test(
            scores, self.nonmember_scores_, self.member_scores_, alternatives=("greater", "less"), **options
        )
        retained = retention_test(scores, self.member_scores_, self.nonmember_scores_, **options)
        query_counts = bin_counts(scores, self.edges_)
        fraction = retained_fraction(
            query_counts, self.member_counts_, self.nonmember_counts_, confidence_level=self.confidence_level
        )
        power = self.detection_power(n)
        p_removed = removed["greater"].pvalue
        p_class_mix = class_mix_pvalue(labels, self.nonmember_labels_, self.n_classes_)
        warnings = list(self.warnings_) + self._shift_warnings(removed["less"].pvalue, p_class_mix, fraction.fit_pvalue)
        verdict = decide_reference_verdict(p_removed, fraction.high, alpha=self.alpha, margin=self.margin)
        flags = {self.signal: self.weights_[np.searchsorted(self.edges_, scores, side="left")] > 0}
        membership = flags[self.signal].astype(np.int8)
        thresholds = {
            **self.to_dict(),
            "warnings": warnings,
            "tests": {
                "removed": asdict(removed["greater"]),
                "too_forgotten": asdict(removed["less"]),
                "retained": asdict(retained["less"]),
            },
            "query_counts": query_counts.tolist(),
        }
        return AuditResult(
            method=self.method,
            scores={self.signal: scores},
            flags=flags,
            membership=membership,
            metrics={
                "p_removed": float(p_removed),
                "p_retained": float(retained["less"].pvalue),
                "p_too_forgotten": float(removed["less"].pvalue),
                "retained_fraction": fraction.estimate,
                "retained_ci_low": fraction.low,
                "retained_ci_high": fraction.high,
                "power_retained": power.power_retained,
                "min_detectable_fraction": power.min_detectable_fraction,
                "p_class_mix": p_class_mix,
                "p_mixture_fit": fraction.fit_pvalue,
                "n_query": float(n),
                "flag_rate": float(membership.mean()),
            },
            verdict=verdict,
            alpha=float(self.alpha),
            thresholds=thresholds,
        )

    def _shift_warnings(self, p_too_forgotten: float, p_class_mix: float, p_fit: float) -> list[str]:
        warnings = []
        if p_class_mix <= self.shift_alpha:
            warnings.append(
                f"the query's class mix differs from the non-member reference's (chi-square p={p_class_mix:.2g}): "
                "p_removed assumes a removed query is drawn like the reference"
            )
        if p_fit <= self.shift_alpha:
            warnings.append(
                f"the query's scores fit no mix of members and non-members (p={p_fit:.2g}): another domain or "
                "over-unlearning; p_removed and the retained fraction assume the query is like the references"
            )
        if p_too_forgotten <= self.shift_alpha:
            warnings.append(
                f"the query is less member-like than never-seen data (p_too_forgotten={p_too_forgotten:.2g}): "
                "approximate unlearning that overshot, or a domain shift"
            )
        return warnings

    # ------------------------------------------------------------------ export
    def to_dict(self) -> dict:
        """The calibration as JSON-ready data (``thresholds.json``): bins, weights, diagnostics, assumptions."""
        check_calibrated(self)
        return {
            "method": self.method,
            "signal": self.signal,
            "alpha": float(self.alpha),
            "margin": float(self.margin),
            "confidence_level": float(self.confidence_level),
            "power": float(self.power),
            "levels": self.levels_.tolist(),
            "n_classes": self.n_classes_,
            "n_members": int(self.member_scores_.size),
            "n_nonmembers": int(self.nonmember_scores_.size),
            "edges": self.edges_.tolist(),
            "member_counts": self.member_counts_.tolist(),
            "nonmember_counts": self.nonmember_counts_.tolist(),
            "weights": self.weights_.tolist(),
            "diagnostics": dict(self.diagnostics_),
            "calibration_warnings": list(self.warnings_),
            "assumptions": dict(ASSUMPTIONS),
        }
