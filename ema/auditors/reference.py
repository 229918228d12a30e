"""The member-reference auditor: both hypotheses tested on the target itself, a retained fraction, stated power.

Inputs are the TARGET's probabilities on two references: samples known to be in its training
data (for a workbench target, the training folds other than the audited one: auditing M1 uses
M2..M5) and samples it never saw (the clean calibration set). No calibration model, so no
assumption that another model's members behave like the target's.

* H0 "removed": the query is exchangeable with the non-member reference.
* H0 "retained": the query is exchangeable with the member reference.

Both are exact permutation tests of one statistic, the sum of the query samples' binned member / non-member
log-likelihood ratio (:mod:`ema.stats.binned_tests`). The retained share pi (F_q = pi F_mem + (1 - pi) F_non)
gets a profile-likelihood interval that carries both references' sampling error.

Verdict at ``alpha`` and ``margin`` (:func:`~ema.auditors.reference_record.decide_reference_verdict`):
``memorized`` when H0 "removed" is rejected; ``not_memorized`` when it is not, H0 "retained" is, and
the retained share's one-sided upper bound (at ``certify_level``) is at most ``margin``;
``inconclusive`` otherwise. Every result states ``power_retained``, ``min_detectable_fraction`` and
``certifiable_margin``, the margin a removed query of its size is certified at with probability
0.85, from the sizes and references alone (:mod:`ema.stats.certify`); ``margin="auto"`` certifies at it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ema.auditors.attack import attack_strength
from ema.auditors.base import check_calibrated
from ema.auditors.reference_checks import check_query, check_reference_config, check_references
from ema.auditors.reference_gates import reference_diagnostics, reference_gate_warnings
from ema.auditors.reference_record import (
    AUTO_MARGIN,
    DEFAULT_MARGIN,
    bound_counts,
    calibration_record,
    certify_record,
    decide_reference_verdict,
    default_certify_level,
    evidence_note,
    information_metrics,
    shift_warnings,
    single_view_metrics,
    tests_record,
)
from ema.auditors.result import AuditResult
from ema.auditors.views import identity_view, n_views, view_score, view_score_name
from ema.signals import SIGNALS
from ema.stats.binned_tests import (
    DEFAULT_BIN_LEVELS,
    DEFAULT_N_PERMUTATIONS,
    bin_counts,
    class_mix_pvalue,
    log_likelihood_ratio,
    quantile_edges,
    removal_test,
    retention_test,
)
from ema.stats.certify import certifiable_margin
from ema.stats.information import binned_information, cross_fitted_information_estimate
from ema.stats.mixture import (
    DEFAULT_POWER_RESAMPLES,
    DetectionPower,
    RetainedFractionResult,
    resampled_power,
    retained_fraction,
)

#: The attack-strength metrics' suffix (``mia_auc.calibrated``): the auditor's score on the references.
ATTACK_SUFFIX = "calibrated"
#: The default score: the true-class log-odds, which keeps resolving outputs that round to 1.0.
DEFAULT_SIGNAL = "log_odds"
#: Whose separation the gate warning measures (EMA's own warning, beside it, names EMA's signals).
SEPARATION_OF = "the calibrated auditor's member-reference score"
#: Power that defines the minimum detectable fraction.
DEFAULT_POWER = 0.9
#: Significance level of the shift checks (class mix, mixture fit); lower than alpha because
#: they only warn, and a warning on every tenth clean audit would be noise.
DEFAULT_SHIFT_ALPHA = 0.01


class ReferenceAuditor:
    """Tests "removed" and "retained" against references scored on the target, and states its power.

    Parameters
    ----------
    signal : str
        A continuous membership signal from :data:`ema.signals.SIGNALS`; ``"log_odds"`` by default
        (rank-equivalent to the confidence, but it still separates outputs tied at 1.0 in float32).
    alpha : float
        Level of the tests; ``memorized`` means p_removed <= alpha.
    margin : float or "auto"
        Largest retained share ``not_memorized`` allows (the upper bound at ``certify_level``);
        ``"auto"``: the audit's own ``certifiable_margin`` (from the sizes and references, not the outcome).
    certify_level : float or None
        One-sided level of the upper bound that certifies; None: 1 - alpha / 2
        (:func:`default_certify_level`), the upper end of the two-sided 1 - alpha interval.
    confidence_level : float
        Level of the reported retained-fraction interval (two-sided; its upper end is one-sided
        at (1 + confidence_level) / 2).
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
        Gate warnings from the references (:func:`~ema.auditors.reference_gates.reference_gate_warnings`).
    information_, information_lower_ : float
        Fisher information per sample about the retained share at pi = 0, cross-fitted on the two
        references, and its lower bound, which :meth:`certifiable_margin` takes
        (:func:`~ema.stats.information.binned_information`); both 0 where it is not estimable.
    information_estimate_ : InformationEstimate
        The estimate itself, with its standard error and whether it is estimable.
    n_views_ : int
        Views of each sample the references came with (1, or 9 under ``--augment shifts``).
    information_single_view_, information_single_view_lower_, single_view_estimate_, single_view_counts_
        The same of the identity view's score alone, and the references' counts in its bins.

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
        margin: float | str = DEFAULT_MARGIN,
        certify_level: float | None = None,
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
        self.certify_level = certify_level
        self.confidence_level = confidence_level
        self.power = power
        self.levels = tuple(levels)
        self.n_permutations = n_permutations
        self.shift_alpha = shift_alpha
        self.n_power_resamples = n_power_resamples
        self.random_state = random_state

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
        member_proba : ndarray of shape (n_members, n_classes) or (n_views, n_members, n_classes)
            The TARGET's probabilities on samples in its training data, excluding the query's
            own samples (auditing fold M1: folds M2..M5). With several views of each sample
            (the identity first, then its shifts: ``--augment shifts``), the score is
            :func:`~ema.auditors.views.view_score`; both references and the query must have as many.
        member_labels : ndarray of shape (n_members,)
        nonmember_proba : ndarray of shape (n_nonmembers, n_classes) or (n_views, n_nonmembers, n_classes)
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
        levels = check_reference_config(self)
        member_proba, member_labels, nonmember_proba, nonmember_labels = check_references(
            member_proba, member_labels, nonmember_proba, nonmember_labels
        )
        score = SIGNALS[self.signal]
        members = view_score(score, member_proba, member_labels)
        nonmembers = view_score(score, nonmember_proba, nonmember_labels)
        member_identity, nonmember_identity = identity_view(member_proba), identity_view(nonmember_proba)
        self.n_classes_ = int(member_proba.shape[-1])
        self.n_views_ = n_views(member_proba)
        self.member_scores_, self.nonmember_scores_ = members, nonmembers
        self.nonmember_labels_ = nonmember_labels
        self.edges_ = quantile_edges(nonmembers, levels)
        self.member_counts_ = bin_counts(members, self.edges_)
        self.nonmember_counts_ = bin_counts(nonmembers, self.edges_)
        self.weights_ = log_likelihood_ratio(self.member_counts_, self.nonmember_counts_)
        self.diagnostics_ = reference_diagnostics(
            members,
            nonmembers,
            member_identity,
            member_labels,
            nonmember_identity,
            nonmember_labels,
            self.weights_,
            self.nonmember_counts_,
        )
        gates = {name: value for name, value in self.diagnostics_.items() if name != "member_accuracy"}
        self.warnings_ = reference_gate_warnings(
            self.n_classes_, nonmember_labels, separation_of=SEPARATION_OF, **gates
        )
        self.attack_ = attack_strength(members, nonmembers)
        information = cross_fitted_information_estimate(members, nonmembers, levels, random_state=self.random_state)
        self.information_estimate_ = information
        self.information_, self.information_lower_ = information.estimate, information.lower_bound()
        # With several views, what the identity alone carries: the report says what the views bought.
        single, self.single_view_counts_ = (
            (information, (self.member_counts_, self.nonmember_counts_))
            if self.n_views_ == 1
            else binned_information(
                score(member_identity, member_labels),
                score(nonmember_identity, nonmember_labels),
                levels,
                self.random_state,
            )
        )
        self.single_view_estimate_ = single
        self.information_single_view_, self.information_single_view_lower_ = single.estimate, single.lower_bound()
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

    def resolved_certify_level(self) -> float:
        """The one-sided level of the bound that certifies: as given, else 1 - alpha / 2."""
        return default_certify_level(self.alpha) if self.certify_level is None else float(self.certify_level)

    def certifiable_margin(self, n_query: int, *, single_view: bool = False) -> float:
        """Smallest margin that certifies a removed query of ``n_query`` samples with probability 0.85, at most 1.

        From the query size, the non-member reference size, :attr:`information_lower_` and the
        references' bin counts only (:func:`~ema.stats.certify.certifiable_margin` says why those);
        1 means nothing below 1 can be certified. ``single_view`` takes the identity view's
        information and bins instead (to say what the views bought).
        """
        check_calibrated(self)
        information, counts = (
            (self.information_single_view_lower_, self.single_view_counts_)
            if single_view
            else (self.information_lower_, (self.member_counts_, self.nonmember_counts_))
        )
        margin = certifiable_margin(
            n_query,
            self.nonmember_scores_.size,
            information,
            certify_level=self.resolved_certify_level(),
            binned_references=counts,
        )
        return float(min(margin, 1.0))

    # ------------------------------------------------------------------ audit
    def audit(self, query_proba: np.ndarray, query_labels: np.ndarray) -> AuditResult:
        """Test both hypotheses on a query set, estimate its retained share, state the power, check for shift.

        Parameters
        ----------
        query_proba : ndarray of shape (n_query, n_classes) or (n_views, n_query, n_classes)
            The target's probabilities on the query set, with as many views as the references had.
        query_labels : ndarray of shape (n_query,)

        Returns
        -------
        AuditResult
            ``metrics``: ``p_removed``, ``p_retained``, ``p_too_forgotten``,
            ``retained_fraction``, ``retained_ci_low``, ``retained_ci_high``,
            ``power_retained``, ``min_detectable_fraction`` (NaN when not reached),
            ``certifiable_margin`` (from ``information_lower``), ``information`` (the point estimate),
            ``information_lower`` (its lower bound), ``retained_upper_bound`` (the bound at
            ``certify_level`` the verdict compares with the margin), with several views
            ``information_single_view`` (and ``_lower``), ``certifiable_margin_single_view`` (the identity alone),
            ``p_class_mix``, ``p_mixture_fit``, ``n_query``, ``flag_rate``.
            ``thresholds["certify"]``: the margin as asked and as used, the level, and ``advice``
            (what a larger non-member reference would lower the floor to).
            ``thresholds["evidence"]``: one sentence on how strong the evidence behind the verdict
            is (:func:`~ema.auditors.reference_record.evidence_note`).
            ``thresholds["warnings"]``: list of str, the calibration gates plus this query's
            shift checks (``[]`` when none). ``flags[signal]``: the sample's bin has a positive
            log-likelihood ratio (descriptive only; the verdict comes from the tests).

        Raises
        ------
        InputError
            If not calibrated (:class:`~ema.errors.NotCalibratedError`), or on invalid probabilities or labels.
        """
        check_calibrated(self)
        levels = check_reference_config(self)
        proba, labels = check_query(
            query_proba,
            query_labels,
            levels=levels,
            calibrated_levels=self.levels_,
            n_classes=self.n_classes_,
            views=self.n_views_,
        )
        scores = view_score(SIGNALS[self.signal], proba, labels)
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
        certifiable = self.certifiable_margin(n)
        margin = certifiable if self.margin == AUTO_MARGIN else float(self.margin)
        upper_bound = self._upper_bound(fraction, query_counts)
        p_removed, p_retained = removed["greater"].pvalue, retained["less"].pvalue
        p_class_mix = class_mix_pvalue(labels, self.nonmember_labels_, self.n_classes_)
        shifts = shift_warnings(removed["less"].pvalue, p_class_mix, fraction.fit_pvalue, shift_alpha=self.shift_alpha)
        warnings = list(self.warnings_) + shifts
        counts = bound_counts(certifiable, fraction.fit_pvalue, shift_alpha=self.shift_alpha)
        verdict = decide_reference_verdict(
            p_removed, p_retained, upper_bound, alpha=self.alpha, margin=margin, bound_counts=counts
        )
        score_name = view_score_name(self.signal, self.n_views_)
        flags = {score_name: self.weights_[np.searchsorted(self.edges_, scores, side="left")] > 0}
        membership = flags[score_name].astype(np.int8)
        thresholds = {
            **self.to_dict(),
            "warnings": warnings,
            "tests": tests_record(removed, retained),
            "query_counts": query_counts.tolist(),
            "attack": self.attack_.to_dict(),
            "certify": certify_record(
                self.margin,
                margin,
                self.resolved_certify_level(),
                n_reference=self.nonmember_scores_.size,
                information=self.information_,
                information_lower=self.information_lower_,
                binned_references=(self.member_counts_, self.nonmember_counts_),
            ),
            "evidence": evidence_note(
                verdict,
                p_removed=p_removed,
                p_retained=p_retained,
                alpha=self.alpha,
                retained_low=fraction.low,
                retained_high=fraction.high,
                upper_bound=upper_bound,
                margin=margin,
                certifiable_margin=certifiable,
                certify_level=self.resolved_certify_level(),
            ),
        }
        return AuditResult(
            method=self.method,
            scores={score_name: scores},
            flags=flags,
            membership=membership,
            metrics={
                "p_removed": float(p_removed),
                "p_retained": float(p_retained),
                "p_too_forgotten": float(removed["less"].pvalue),
                "retained_fraction": fraction.estimate,
                "retained_ci_low": fraction.low,
                "retained_ci_high": fraction.high,
                "power_retained": power.power_retained,
                "min_detectable_fraction": power.min_detectable_fraction,
                "certifiable_margin": certifiable,
                **information_metrics(self.information_estimate_),
                **single_view_metrics(self, n),
                "retained_upper_bound": upper_bound,
                "p_class_mix": p_class_mix,
                "p_mixture_fit": fraction.fit_pvalue,
                "n_query": float(n),
                "flag_rate": float(membership.mean()),
                **{f"{name}.{ATTACK_SUFFIX}": value for name, value in self.attack_.metrics().items()},
            },
            verdict=verdict,
            alpha=float(self.alpha),
            thresholds=thresholds,
        )

    def _upper_bound(self, fraction: RetainedFractionResult, query_counts: np.ndarray) -> float:
        """The retained share's one-sided upper bound at the certify level (the interval's upper end if they match)."""
        two_sided = 2.0 * self.resolved_certify_level() - 1.0
        if np.isclose(two_sided, self.confidence_level):
            return fraction.high
        if two_sided <= 0:
            return fraction.estimate
        return retained_fraction(
            query_counts, self.member_counts_, self.nonmember_counts_, confidence_level=two_sided
        ).high

    # ------------------------------------------------------------------ export
    def to_dict(self) -> dict:
        """The calibration as JSON-ready data (``thresholds.json``): bins, weights, diagnostics, assumptions."""
        check_calibrated(self)
        return calibration_record(self)
