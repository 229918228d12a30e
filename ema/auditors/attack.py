"""Attack strength where membership is known: ROC AUC and TPR at low FPR, as membership-inference papers report.

The calibration model's halves (EMA) and the member and non-member references scored on the
target (the calibrated auditor) are sets whose membership is known, so each score's ROC curve
there says how strong the attack is before any query is judged. scikit-learn is imported where
a curve is computed, never on the path of an audit that reuses a cached calibration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ema.errors import InputError

#: The ROC AUC's metric name (``mia_auc.<signal>``).
AUC_METRIC = "mia_auc"
#: What each attack-strength metric is, by the name it is logged under (``<name>.<signal>``).
ATTACK_METRICS = {
    AUC_METRIC: "ROC AUC of the {signal} score separating {where}'s members from its non-members (0.5: chance)",
    "tpr_at_fpr_1pct": "share of {where}'s members the {signal} score finds at 1% false positives "
    "(not resolved below 100 non-members)",
    "tpr_at_fpr_0_1pct": "share of {where}'s members the {signal} score finds at 0.1% false positives "
    "(not resolved below 1,000 non-members)",
    "mia_n_nonmembers": "non-members behind the {signal} score's ROC curve on {where}",
}
#: The false-positive rates at which the true-positive rate is reported (1% and 0.1%).
LOW_FPRS = {"tpr_at_fpr_1pct": 0.01, "tpr_at_fpr_0_1pct": 0.001}
#: Non-members needed for the 0.1% point to rest on at least one false positive (the 1% point needs a tenth).
RESOLVED_NONMEMBERS = 1000
#: The most points of the curve kept for the figure (log-spaced in FPR).
CURVE_POINTS = 200
#: The smallest FPR the kept curve resolves (a guard for curves of millions of non-members).
SMALLEST_FPR_KEPT = 1e-6


def is_attack_metric(name: str) -> bool:
    """Whether the logged metric ``name`` (``mia_auc.confidence``) is one of :data:`ATTACK_METRICS`."""
    return name.partition(".")[0] in ATTACK_METRICS


@dataclass(frozen=True)
class AttackStrength:
    """How well one score separates known members (higher) from known non-members.

    Attributes
    ----------
    auc : float
        Area under the ROC curve (0.5: no better than chance).
    tpr_at_fpr_1pct, tpr_at_fpr_0_1pct : float
        The highest true-positive rate at a false-positive rate of at most 1% and 0.1%.
    n_members, n_nonmembers : int
        The samples behind the curve; below :data:`RESOLVED_NONMEMBERS` non-members the 0.1%
        point is not resolved (it rests on no false positive at all), below 100 the 1% point.
    fpr, tpr : tuple of float
        The curve, at most :data:`CURVE_POINTS` points, for the report's figure.
    """

    auc: float
    tpr_at_fpr_1pct: float
    tpr_at_fpr_0_1pct: float
    n_members: int
    n_nonmembers: int
    fpr: tuple[float, ...]
    tpr: tuple[float, ...]

    def resolves(self, name: str) -> bool:
        """Whether enough non-members back the TPR named ``name`` (a key of :data:`LOW_FPRS`): at least 1 / FPR of
        them, so that its false-positive rate can rest on one false positive."""
        return self.n_nonmembers >= round(1 / LOW_FPRS[name])

    @property
    def resolves_0_1pct(self) -> bool:
        """Whether enough non-members back the 0.1% point (:data:`RESOLVED_NONMEMBERS`)."""
        return self.resolves("tpr_at_fpr_0_1pct")

    @property
    def resolves_1pct(self) -> bool:
        """Whether enough non-members back the 1% point (one false positive in a hundred)."""
        return self.resolves("tpr_at_fpr_1pct")

    def metrics(self) -> dict[str, float]:
        """The headline numbers by metric name (without a signal suffix).

        A TPR its non-members do not resolve is left out, as a number that could not be estimated
        is: with 75 non-members the 0.1% point is the TPR at no false positive at all, which a
        compare page would show beside resolved ones as if it were one. ``mia_n_nonmembers`` says
        how many non-members back the curve; report.html shows the unresolved values as such.
        """
        resolved = {name: getattr(self, name) for name in LOW_FPRS if self.resolves(name)}
        return {AUC_METRIC: self.auc, **resolved, "mia_n_nonmembers": float(self.n_nonmembers)}

    def to_dict(self) -> dict:
        """JSON-ready values (``thresholds.json``)."""
        return {
            "auc": self.auc,
            "tpr_at_fpr_1pct": self.tpr_at_fpr_1pct,
            "tpr_at_fpr_0_1pct": self.tpr_at_fpr_0_1pct,
            "n_members": self.n_members,
            "n_nonmembers": self.n_nonmembers,
            "fpr": list(self.fpr),
            "tpr": list(self.tpr),
        }

    @classmethod
    def from_dict(cls, data: dict) -> AttackStrength:
        """Rebuild from :meth:`to_dict` output."""
        return cls(
            auc=float(data["auc"]),
            tpr_at_fpr_1pct=float(data["tpr_at_fpr_1pct"]),
            tpr_at_fpr_0_1pct=float(data["tpr_at_fpr_0_1pct"]),
            n_members=int(data["n_members"]),
            n_nonmembers=int(data["n_nonmembers"]),
            fpr=tuple(float(v) for v in data["fpr"]),
            tpr=tuple(float(v) for v in data["tpr"]),
        )


def attack_strength(member_scores: np.ndarray, nonmember_scores: np.ndarray) -> AttackStrength:
    """The ROC curve of a membership score on known members and non-members, and its headline numbers.

    Parameters
    ----------
    member_scores, nonmember_scores : ndarray of shape (n,)
        One score per sample, higher meaning more member-like; non-finite scores are refused.

    Returns
    -------
    AttackStrength

    Raises
    ------
    InputError
        If either set is empty or holds a non-finite score.
    """
    from sklearn.metrics import roc_auc_score, roc_curve  # here, not on the cached audit's import path

    members = np.asarray(member_scores, dtype=np.float64).ravel()
    nonmembers = np.asarray(nonmember_scores, dtype=np.float64).ravel()
    if members.size == 0 or nonmembers.size == 0:
        raise InputError(
            f"expected known members and non-members to measure attack strength, got {members.size} members "
            f"and {nonmembers.size} non-members"
        )
    scores = np.concatenate([members, nonmembers])
    if not np.isfinite(scores).all():
        raise InputError("expected finite membership scores to measure attack strength, got NaN or inf")
    truth = np.concatenate([np.ones(members.size), np.zeros(nonmembers.size)])
    fpr, tpr, _ = roc_curve(truth, scores)
    low = {name: float(tpr[fpr <= level].max()) for name, level in LOW_FPRS.items()}
    kept = _curve_points(fpr)
    return AttackStrength(
        auc=float(roc_auc_score(truth, scores)),
        n_members=int(members.size),
        n_nonmembers=int(nonmembers.size),
        fpr=tuple(float(v) for v in fpr[kept]),
        tpr=tuple(float(v) for v in tpr[kept]),
        **low,
    )


def _curve_points(fpr: np.ndarray) -> np.ndarray:
    """Indices of at most :data:`CURVE_POINTS` points, spread evenly in log FPR, both ends kept."""
    if fpr.size <= CURVE_POINTS:
        return np.arange(fpr.size)
    smallest = max(float(fpr[fpr > 0].min()), SMALLEST_FPR_KEPT)
    targets = np.geomspace(smallest, 1.0, CURVE_POINTS - 1)
    # the last point at or below each target FPR: the step curve's corners
    chosen = np.searchsorted(fpr, targets, side="right") - 1
    return np.unique(np.concatenate([[0], chosen, [fpr.size - 1]]))
