"""Threshold selection that maximises balanced accuracy between members and non-members.

A sample is flagged as a member when its score is >= the threshold. Balanced accuracy
BA(tau) = (TPR(tau) + TNR(tau)) / 2 is maximal where TPR - FPR is, which is the ROC sweep:
one sort and cumulative counts (``sklearn.metrics.roc_curve``), O(n log n) in all.

Two modes: ``"global"`` (one threshold per metric, as the paper's text describes) and
``"per-class"`` (one per metric and class, the choice of the reference implementation
of Song & Mittal). ``"global"`` is the default: the calibration halves hold 500 samples,
about 50 per class, and per-class thresholds fitted on 50 + 50 samples are noisy.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ema.errors import InputError
from ema.stats._validation import check_score_vector

THRESHOLD_MODES = ("global", "per-class")


@dataclass(frozen=True)
class ThresholdResult:
    """The chosen threshold and what it achieves on the data it was chosen on."""

    threshold: float
    balanced_accuracy: float
    tpr: float
    fpr: float


def _sweep(member_scores: np.ndarray, nonmember_scores: np.ndarray) -> ThresholdResult:
    """Best threshold for validated, non-empty score arrays."""
    from sklearn.metrics import roc_curve  # scikit-learn only where thresholds are fitted, not for a cached audit

    scores = np.concatenate([member_scores, nonmember_scores])
    is_member = np.concatenate([np.ones(member_scores.size, bool), np.zeros(nonmember_scores.size, bool)])
    fpr, tpr, thresholds = roc_curve(is_member, scores, drop_intermediate=False)
    # thresholds[0] is +inf (flag nothing); candidates are the observed score values.
    best = 1 + int(np.argmax(tpr[1:] - fpr[1:]))
    return ThresholdResult(
        threshold=float(thresholds[best]),
        balanced_accuracy=float((tpr[best] + 1.0 - fpr[best]) / 2.0),
        tpr=float(tpr[best]),
        fpr=float(fpr[best]),
    )


def select_threshold(member_scores: np.ndarray, nonmember_scores: np.ndarray) -> ThresholdResult:
    """Pick the score threshold that maximises balanced accuracy.

    Parameters
    ----------
    member_scores : ndarray of shape (n_members,)
        Metric values on samples the model was trained on.
    nonmember_scores : ndarray of shape (n_nonmembers,)
        Metric values on samples it was not trained on.

    Returns
    -------
    ThresholdResult
        Among thresholds reaching the best balanced accuracy, the highest.

    Examples
    --------
    >>> select_threshold(np.array([0.9, 0.8, 0.7]), np.array([0.2, 0.75])).threshold
    0.8
    """
    return _sweep(
        check_score_vector("member_scores", member_scores), check_score_vector("nonmember_scores", nonmember_scores)
    )


def select_class_thresholds(
    member_scores: np.ndarray,
    member_labels: np.ndarray,
    nonmember_scores: np.ndarray,
    nonmember_labels: np.ndarray,
    *,
    n_classes: int,
) -> np.ndarray:
    """One threshold per class; a class missing from either side gets the global threshold.

    Returns
    -------
    ndarray of shape (n_classes,)
    """
    member_scores = check_score_vector("member_scores", member_scores)
    nonmember_scores = check_score_vector("nonmember_scores", nonmember_scores)
    member_labels, nonmember_labels = np.asarray(member_labels), np.asarray(nonmember_labels)
    if member_labels.shape != member_scores.shape or nonmember_labels.shape != nonmember_scores.shape:
        raise InputError(
            "expected one label per score, got "
            f"{member_labels.shape} labels for {member_scores.shape} member scores and "
            f"{nonmember_labels.shape} labels for {nonmember_scores.shape} non-member scores"
        )
    fallback = _sweep(member_scores, nonmember_scores).threshold
    thresholds = np.full(n_classes, fallback)
    missing = []
    for cls in range(n_classes):
        members, nonmembers = member_scores[member_labels == cls], nonmember_scores[nonmember_labels == cls]
        if members.size and nonmembers.size:
            thresholds[cls] = _sweep(members, nonmembers).threshold
        else:
            missing.append(cls)
    if missing:
        warnings.warn(
            f"classes {missing} lack members or non-members in the calibration data; they use the global threshold",
            stacklevel=2,
        )
    return thresholds
