"""Checks of the member-reference auditor at its public boundary: its options, both references, each query."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ema.auditors.reference_record import AUTO_MARGIN
from ema.auditors.views import check_view_probabilities, n_views
from ema.errors import InputError
from ema.signals import check_signal_names
from ema.stats.binned_tests import check_levels
from ema.stats.information import INFORMATION_FOLDS
from ema.validation import check_certify_level, check_open_unit

if TYPE_CHECKING:
    from ema.auditors.reference import ReferenceAuditor

#: Binary scores carry no ranking within a class of outcome; refused as the auditor's score.
BINARY_SIGNALS = ("correctness",)


def check_reference_config(auditor: ReferenceAuditor) -> np.ndarray:
    """The auditor's options checked (a continuous signal, levels in (0, 1), enough draws); returns its bin levels.

    Raises
    ------
    InputError
        Naming the first option out of range.
    """
    check_signal_names([auditor.signal])
    if auditor.signal in BINARY_SIGNALS:
        raise InputError(f"expected a continuous signal, not one of {BINARY_SIGNALS}, got {auditor.signal!r}")
    for name in ("alpha", "confidence_level", "power", "shift_alpha"):
        check_open_unit(name, getattr(auditor, name))
    if auditor.margin != AUTO_MARGIN:
        check_open_unit("margin", auditor.margin)
    if auditor.certify_level is not None:
        check_certify_level(auditor.certify_level)
    for name in ("n_permutations", "n_power_resamples"):
        value = getattr(auditor, name)
        if not (isinstance(value, (int, np.integer)) and value >= 100):
            raise InputError(f"expected {name} to be an integer >= 100, got {value!r}")
    return check_levels(auditor.levels)


def check_references(
    member_proba: np.ndarray, member_labels: np.ndarray, nonmember_proba: np.ndarray, nonmember_labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Both references checked (:func:`~ema.auditors.views.check_view_probabilities`), in the order given.

    Raises
    ------
    InputError
        On invalid probabilities or labels, or references over other classes or with other views of each sample.
    """
    member_proba, member_labels = check_view_probabilities(member_proba, member_labels)
    nonmember_proba, nonmember_labels = check_view_probabilities(nonmember_proba, nonmember_labels)
    if member_proba.shape[-1] != nonmember_proba.shape[-1]:
        raise InputError(
            f"expected member and non-member references over the same classes, got {member_proba.shape[-1]} and "
            f"{nonmember_proba.shape[-1]} columns"
        )
    if n_views(member_proba) != n_views(nonmember_proba):
        raise InputError(
            f"expected member and non-member references with the same views of each sample, got "
            f"{n_views(member_proba)} and {n_views(nonmember_proba)}"
        )
    smallest = 2 * INFORMATION_FOLDS
    if min(len(member_labels), len(nonmember_labels)) < smallest:
        raise InputError(
            f"expected at least {smallest} samples in each reference (the information about the retained share is "
            f"cross-fitted on {INFORMATION_FOLDS} folds of at least 2), got {len(member_labels)} members and "
            f"{len(nonmember_labels)} non-members (after the query's own rows are left out); give larger --members "
            "and --reference files"
        )
    return member_proba, member_labels, nonmember_proba, nonmember_labels


def check_query(
    query_proba: np.ndarray,
    query_labels: np.ndarray,
    *,
    levels: np.ndarray,
    calibrated_levels: np.ndarray,
    n_classes: int,
    views: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The query checked against the calibration: the same bin levels, classes and views of each sample.

    Raises
    ------
    InputError
        If the levels changed since calibration, or on invalid probabilities or labels, or other classes or views.
    """
    if levels.shape != calibrated_levels.shape or not np.allclose(levels, calibrated_levels):
        raise InputError(
            f"expected the levels used at calibration {calibrated_levels.tolist()}, got {levels.tolist()}: "
            "calibrate again"
        )
    proba, labels = check_view_probabilities(query_proba, query_labels)
    if proba.shape[-1] != n_classes:
        raise InputError(
            f"expected probabilities over the calibrated {n_classes} classes, got {proba.shape[-1]} columns"
        )
    if n_views(proba) != views:
        raise InputError(
            f"expected the {views} view(s) of each sample the references had, got {n_views(proba)}: "
            "score the query as the references were (--augment)"
        )
    return proba, labels
