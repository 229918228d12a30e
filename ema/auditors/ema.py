"""The EMA auditor of Huang, Li & Li (2021), Algorithms 1 and 2."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ema.auditors.attack import AttackStrength, attack_strength
from ema.auditors.base import check_calibrated
from ema.auditors.result import MEMORIZED, NOT_MEMORIZED, AuditResult, SampleFlags
from ema.errors import InputError
from ema.signals import PAPER_SIGNALS, check_probabilities, check_signal_names, compute_scores
from ema.stats import EMA_TESTS, ema_pvalue_from_counts
from ema.thresholds import THRESHOLD_MODES, select_class_thresholds, select_threshold
from ema.validation import check_choice, check_open_unit


def pvalue_verdict(rho: float | np.ndarray, alpha: float) -> np.ndarray:
    """EMA's rule, elementwise: rho <= alpha is ``not_memorized``, else ``memorized``; NaN gives ``""``.

    >>> pvalue_verdict(np.array([0.05, 0.5, np.nan]), 0.1).tolist()
    ['not_memorized', 'memorized', '']
    """
    rho = np.asarray(rho, dtype=float)
    return np.where(np.isnan(rho), "", np.where(rho <= alpha, NOT_MEMORIZED, MEMORIZED))


class EMAAuditor:
    """Ensembled membership auditing.

    ``calibrate`` picks, for each metric, the threshold that maximises balanced accuracy
    between a calibration model's members and non-members. ``audit`` flags a query
    sample when any metric reaches its threshold and aggregates the flags into rho_EMA.

    Parameters
    ----------
    signals : sequence of str
        membership signals to ensemble; the paper's three by default.
    threshold_mode : {"global", "per-class"}
        One threshold per metric, or one per metric and class.
    test : {"t", "ks"}
        The test whose p-value decides the verdict; both are always reported.
    alpha : float
        rho_EMA <= alpha means "not memorized".
    """

    method = "ema"

    def __init__(
        self,
        signals: Sequence[str] = PAPER_SIGNALS,
        *,
        threshold_mode: str = "global",
        test: str = "t",
        alpha: float = 0.1,
    ) -> None:
        self.signals = tuple(signals)
        self.threshold_mode = threshold_mode
        self.test = test
        self.alpha = alpha

    def _check_config(self) -> None:
        check_signal_names(self.signals)
        check_open_unit("alpha", self.alpha)
        check_choice("threshold_mode", self.threshold_mode, THRESHOLD_MODES)
        check_choice("test", self.test, EMA_TESTS)

    def calibrate(
        self,
        member_proba: np.ndarray,
        member_labels: np.ndarray,
        nonmember_proba: np.ndarray,
        nonmember_labels: np.ndarray,
    ) -> EMAAuditor:
        """Fit thresholds on a calibration model's outputs on its training and held-out halves.

        Sets ``n_classes_``, ``thresholds_`` (metric -> global threshold),
        ``class_thresholds_`` (metric -> ndarray of shape (n_classes,)) and
        ``calibration_`` (metric -> balanced accuracy, TPR and FPR of the global threshold) and
        ``attack_`` (metric -> :class:`~ema.auditors.attack.AttackStrength` on the halves: ROC AUC,
        TPR at 1% and 0.1% FPR, logged with every audit as ``mia_auc.<metric>`` and so on).
        """
        self._check_config()
        member_proba, member_labels = check_probabilities(member_proba, member_labels)
        nonmember_proba, nonmember_labels = check_probabilities(nonmember_proba, nonmember_labels)
        if member_proba.shape[1] != nonmember_proba.shape[1]:
            raise InputError(
                f"expected members and non-members with the same number of classes, got "
                f"{member_proba.shape[1]} and {nonmember_proba.shape[1]}"
            )
        members = compute_scores(member_proba, member_labels, self.signals)
        nonmembers = compute_scores(nonmember_proba, nonmember_labels, self.signals)
        self.n_classes_ = int(member_proba.shape[1])
        results = {m: select_threshold(members[m], nonmembers[m]) for m in self.signals}
        self.thresholds_ = {m: r.threshold for m, r in results.items()}
        self.calibration_ = {
            m: {"balanced_accuracy": r.balanced_accuracy, "tpr": r.tpr, "fpr": r.fpr} for m, r in results.items()
        }
        self.class_thresholds_ = {
            m: select_class_thresholds(
                members[m], member_labels, nonmembers[m], nonmember_labels, n_classes=self.n_classes_
            )
            for m in self.signals
        }
        self.attack_ = {m: attack_strength(members[m], nonmembers[m]) for m in self.signals}
        return self

    def to_dict(self) -> dict:
        """The fitted thresholds as JSON-ready data (``thresholds.json``)."""
        check_calibrated(self)
        return {
            "method": self.method,
            "n_classes": self.n_classes_,
            "signals": {
                m: {
                    "global": self.thresholds_[m],
                    "per_class": self.class_thresholds_[m].tolist(),
                    **self.calibration_[m],
                    **({"attack": self.attack_[m].to_dict()} if m in self.attack_ else {}),
                }
                for m in self.signals
            },
        }

    @classmethod
    def from_dict(cls, data: dict, **config) -> EMAAuditor:
        """Rebuild a calibrated auditor from :meth:`to_dict` output (no refitting)."""
        try:
            entries = data["signals"]
            auditor = cls(signals=config.pop("signals", tuple(entries)), **config)
            auditor._check_config()
            auditor.n_classes_ = int(data["n_classes"])
            auditor.thresholds_ = {m: float(entries[m]["global"]) for m in auditor.signals}
            auditor.class_thresholds_ = {m: np.asarray(entries[m]["per_class"], float) for m in auditor.signals}
            auditor.calibration_ = {
                m: {k: entries[m][k] for k in ("balanced_accuracy", "tpr", "fpr")} for m in auditor.signals
            }
            auditor.attack_ = {
                m: AttackStrength.from_dict(entries[m]["attack"]) for m in auditor.signals if "attack" in entries[m]
            }
        except (KeyError, TypeError) as exc:
            raise InputError(
                f"expected thresholds with per-metric 'global' and 'per_class' entries, missing {exc}"
            ) from exc
        return auditor

    def attack_metrics(self) -> dict[str, float]:
        """Each signal's attack strength on the calibration halves, as ``mia_auc.<signal>`` and so on.

        Empty for thresholds calibrated before attack strength was recorded.
        """
        return {f"{name}.{m}": value for m, attack in self.attack_.items() for name, value in attack.metrics().items()}

    def _signal_thresholds(self, labels: np.ndarray) -> dict[str, np.ndarray | float]:
        if self.threshold_mode == "per-class":
            return {m: self.class_thresholds_[m][labels] for m in self.signals}
        return dict(self.thresholds_)

    def flag(self, proba: np.ndarray, labels: np.ndarray) -> SampleFlags:
        """Each query sample's scores, each metric's flags and M: the per-sample half of :meth:`audit`.

        A Spark job calls it on each batch of the query on its executors and adds up M;
        :meth:`audit_counts` then decides from the totals, as :meth:`audit` does.

        Parameters
        ----------
        proba : ndarray of shape (n_query, n_classes)
            The target model's probabilities on the query samples.
        labels : ndarray of shape (n_query,)
            The query samples' labels.
        """
        check_calibrated(self)
        self._check_config()
        proba, labels = check_probabilities(proba, labels)
        if proba.shape[1] != self.n_classes_:
            raise InputError(
                f"expected probabilities over the calibration model's {self.n_classes_} classes, "
                f"got {proba.shape[1]} columns"
            )
        scores = compute_scores(proba, labels, self.signals)
        limits = self._signal_thresholds(labels)
        flags = {m: scores[m] >= limits[m] for m in self.signals}
        membership = np.logical_or.reduce(list(flags.values())).astype(np.int8)
        return SampleFlags(scores, flags, membership)

    def audit(self, proba: np.ndarray, labels: np.ndarray) -> AuditResult:
        """Flag each query sample and decide whether the query set is memorized.

        Parameters
        ----------
        proba : ndarray of shape (n_query, n_classes)
            The target model's probabilities on the query set.
        labels : ndarray of shape (n_query,)
            The query samples' labels.
        """
        samples = self.flag(proba, labels)
        result = self.audit_counts(int(samples.membership.sum()), samples.membership.size)
        return dataclasses.replace(result, scores=samples.scores, flags=samples.flags, membership=samples.membership)

    def audit_counts(self, n_flagged: int, n_query: int) -> AuditResult:
        """The set-level decision from how many of the ``n_query`` samples :meth:`flag` flagged.

        rho_EMA depends on the membership vector only through its count of ones
        (:func:`~ema.stats.ema_pvalue_from_counts`), so this equals :meth:`audit` on the same
        samples, to the bit. The result carries no per-sample arrays (they stay where they were
        computed, e.g. in a Parquet table).
        """
        check_calibrated(self)
        self._check_config()
        rho_t = ema_pvalue_from_counts(n_flagged, n_query, "t").pvalue
        rho_ks = ema_pvalue_from_counts(n_flagged, n_query, "ks").pvalue
        rho = rho_t if self.test == "t" else rho_ks
        return AuditResult(
            method=self.method,
            scores={},
            flags={},
            membership=np.zeros(0, dtype=np.int8),
            metrics={
                "rho_ema": rho_t,
                "rho_ema_ks": rho_ks,
                "flag_rate": n_flagged / n_query,
                "n_query": float(n_query),
                **self.attack_metrics(),
            },
            verdict=str(pvalue_verdict(rho, self.alpha)),
            alpha=self.alpha,
            thresholds={"mode": self.threshold_mode, **self.to_dict()},
        )
