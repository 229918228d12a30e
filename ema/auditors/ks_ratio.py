"""The KS-ratio baseline of Liu & Tsaftaris (2020), as compared in the EMA paper.

rho_KS = KS(f_D(D_q), f_Dq(D_q)) / KS(f_Dcal(D_q), f_Dq(D_q))

f_D is the target, f_Dq a model trained on the query set and f_Dcal one trained on the
calibration set, both with the target's recipe. If the target memorized D_q its outputs on
D_q are close to those of f_Dq (which memorized it by construction): rho_KS < 1. If D_q was
removed, the target is no closer to f_Dq than a model that never saw D_q: rho_KS >= 1,
"forgotten".
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats

from ema.auditors.base import check_calibrated
from ema.auditors.result import INCONCLUSIVE, MEMORIZED, NOT_MEMORIZED, AuditResult
from ema.errors import InputError
from ema.signals import check_probabilities


def ks_statistic(first_proba: np.ndarray, second_proba: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic between two FLATTENED probability matrices.

    Flattening pools every entry of every row (all classes) into one sample, the choice of
    the reference reimplementation; the statistic is scipy's ``ks_2samp`` on the two pools.
    For validated matrices.
    """
    # Only the statistic is used: the entries of one row are not independent, so the p-value
    # would mean nothing; the asymptotic method avoids an expensive exact computation.
    return float(stats.ks_2samp(first_proba.ravel(), second_proba.ravel(), method="asymp").statistic)


def _ks_ratio(ks_target: float, ks_calibration: float) -> float:
    """rho_KS, or inf or nan with a warning when KS(f_Dcal, f_Dq) is 0 (see the Notes of :class:`KSRatioAuditor`).

    Two statistics equal but for float rounding (9/200 computed as 0.044999999999999984 and as
    0.04500000000000004) give exactly 1: the verdict's cut-off at 1 must not turn on the last bit.
    """
    if ks_calibration > 0:
        return 1.0 if math.isclose(ks_target, ks_calibration, rel_tol=1e-9) else ks_target / ks_calibration
    if ks_target > 0:
        warnings.warn(
            "KS(f_Dcal, f_Dq) = 0: the calibration and query models agree on D_q; rho_KS is reported as inf",
            RuntimeWarning,
            stacklevel=3,
        )
        return float("inf")
    warnings.warn(
        "KS(f_Dcal, f_Dq) = KS(f_D, f_Dq) = 0: all three models agree on D_q; rho_KS is undefined (nan) "
        "and the verdict inconclusive",
        RuntimeWarning,
        stacklevel=3,
    )
    return float("nan")


#: rho_KS at or above this means "not memorized" (forgotten), as in Liu & Tsaftaris.
RATIO_THRESHOLD = 1.0


def ratio_verdict(rho: float | np.ndarray, threshold: float = RATIO_THRESHOLD) -> np.ndarray:
    """The KS ratio's rule, elementwise: rho >= threshold (inf included) is ``not_memorized``; NaN gives ``""``.

    >>> ratio_verdict(np.array([0.8, 1.0, np.inf, np.nan])).tolist()
    ['memorized', 'not_memorized', 'not_memorized', '']
    """
    rho = np.asarray(rho, dtype=float)
    return np.where(np.isnan(rho), "", np.where(rho >= threshold, NOT_MEMORIZED, MEMORIZED))


class KSRatioAuditor:
    """Liu & Tsaftaris's KS-ratio audit.

    Parameters
    ----------
    threshold : float
        rho_KS >= threshold means "not memorized" (forgotten); 1.0 in the paper.

    Notes
    -----
    Each KS is the two-sample Kolmogorov-Smirnov statistic between the flattened
    (n_query * n_classes,) probability matrices, as in the reference reimplementation.

    When KS(f_Dcal, f_Dq) = 0 (the calibration and query models give identically distributed
    outputs on D_q), the ratio is undefined by division: it is reported as ``inf`` with a
    ``RuntimeWarning`` when the numerator is positive (the target is further from f_Dq than a
    model that never saw D_q: "not memorized"), and as ``nan`` with verdict ``inconclusive``
    when the numerator is 0 as well (all three models agree; nothing to tell apart).

    The result's per-sample ``membership`` flags a query sample when the target's
    probability row is closer, in total variation (half the L1 distance), to f_Dq's row than
    to f_Dcal's: a descriptive per-sample analogue of the ratio, which does not enter the
    verdict. ``flag_rate`` is its mean. ``scores`` holds both distances (lower = closer).
    """

    method = "ks-ratio"

    def __init__(self, *, threshold: float = RATIO_THRESHOLD) -> None:
        self.threshold = threshold

    def _check_config(self) -> None:
        if not (
            isinstance(self.threshold, (int, float, np.floating, np.integer))
            and np.isfinite(self.threshold)
            and self.threshold > 0
        ):
            raise InputError(f"expected a finite threshold > 0, got {self.threshold!r}")

    def calibrate(self, query_model_proba: np.ndarray, calibration_model_proba: np.ndarray) -> KSRatioAuditor:
        """Store the two reference models' outputs on the query set.

        Parameters
        ----------
        query_model_proba : ndarray of shape (n_query, n_classes)
            Probabilities of f_Dq (trained on the query set) on the query set.
        calibration_model_proba : ndarray of shape (n_query, n_classes)
            Probabilities of f_Dcal (trained on the calibration set) on the query set.

        Returns
        -------
        self

        Raises
        ------
        InputError
            If either is not a probability matrix or their shapes differ.
        """
        self._check_config()
        query_model_proba, _ = check_probabilities(query_model_proba)
        calibration_model_proba, _ = check_probabilities(calibration_model_proba)
        if query_model_proba.shape != calibration_model_proba.shape:
            raise InputError(
                "expected the query model's and the calibration model's probabilities on the same query set, "
                f"with equal shapes, got {query_model_proba.shape} and {calibration_model_proba.shape}"
            )
        self.query_model_proba_ = query_model_proba
        self.calibration_model_proba_ = calibration_model_proba
        self.ks_calibration_ = ks_statistic(calibration_model_proba, query_model_proba)
        return self

    def audit(self, target_proba: np.ndarray, labels: np.ndarray | None = None) -> AuditResult:
        """Compute rho_KS for the target's outputs on the query set.

        Parameters
        ----------
        target_proba : ndarray of shape (n_query, n_classes)
            The target's probabilities on the query set, rows in the same order as at calibration.
        labels : ndarray of shape (n_query,), optional
            The query labels; rho_KS does not use them, they are only validated.

        Returns
        -------
        AuditResult
            ``metrics``: ``rho_ks``, ``ks_target``, ``ks_calibration``, ``n_query``, ``flag_rate``.

        Raises
        ------
        InputError
            If not calibrated (:class:`~ema.errors.NotCalibratedError`), or if ``target_proba`` is not
            a probability matrix of the calibrated shape.
        """
        check_calibrated(self)
        self._check_config()
        target_proba, labels = check_probabilities(target_proba, labels)
        if target_proba.shape != self.query_model_proba_.shape:
            raise InputError(
                f"expected the target's probabilities on the calibrated query set, of shape "
                f"{self.query_model_proba_.shape}, got {target_proba.shape}"
            )
        ks_target = ks_statistic(target_proba, self.query_model_proba_)
        ks_calibration = self.ks_calibration_
        rho = _ks_ratio(ks_target, ks_calibration)
        verdict = str(ratio_verdict(rho, self.threshold)) or INCONCLUSIVE

        to_query_model = 0.5 * np.abs(target_proba - self.query_model_proba_).sum(axis=1)
        to_calibration_model = 0.5 * np.abs(target_proba - self.calibration_model_proba_).sum(axis=1)
        closer = to_query_model < to_calibration_model
        return AuditResult(
            method=self.method,
            scores={"tv_to_query_model": to_query_model, "tv_to_calibration_model": to_calibration_model},
            flags={"closer_to_query_model": closer},
            membership=closer.astype(np.int8),
            metrics={
                "rho_ks": float(rho),
                "ks_target": ks_target,
                "ks_calibration": ks_calibration,
                "n_query": float(target_proba.shape[0]),
                "flag_rate": float(closer.mean()),
            },
            verdict=verdict,
            alpha=float("nan"),
            thresholds=self.to_dict(),
        )

    def to_dict(self) -> dict:
        """The rule as JSON-ready data (``thresholds.json``): the threshold and what each number measures.

        The reference models' probabilities stay out: they are per-sample arrays, not a rule.
        """
        check_calibrated(self)
        return {
            "method": self.method,
            "threshold": float(self.threshold),
            "ks": "two-sample Kolmogorov-Smirnov statistic between flattened probability matrices",
            "membership": "target row closer in total variation to the query model's row than to the "
            "calibration model's",
        }
