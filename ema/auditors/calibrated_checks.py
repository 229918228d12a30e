"""Checks of the calibrated auditor's quantile levels and calibration arrays, at its public boundary."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ema.errors import InputError
from ema.signals import check_probabilities


def check_quantile_levels(quantiles: Sequence[float]) -> np.ndarray:
    """The reference cut-offs' quantile levels as an array of shape (n_levels,): increasing, in (0, 1).

    Raises
    ------
    InputError
        If the levels are empty, not finite, outside (0, 1) or not strictly increasing.
    """
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


def check_calibration_arrays(**pairs: tuple[np.ndarray, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each (probabilities, labels) pair checked, in the order given, all over the same classes.

    Raises
    ------
    InputError
        If a pair is invalid (see :func:`ema.signals.check_probabilities`) or the class counts differ.
    """
    arrays = {name: check_probabilities(proba, labels) for name, (proba, labels) in pairs.items()}
    n_classes = {name: proba.shape[1] for name, (proba, _) in arrays.items()}
    if len(set(n_classes.values())) != 1:
        raise InputError(f"expected the same number of classes in every input, got {n_classes}")
    return arrays
