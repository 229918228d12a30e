"""Checks of the statistics' array arguments (scores, strata); scalar checks are :mod:`ema.validation`'s."""

from __future__ import annotations

import numpy as np

from ema.errors import InputError


def check_score_vector(name: str, scores: np.ndarray) -> np.ndarray:
    """A non-empty 1-D array of finite scores, as float64."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0:
        raise InputError(f"expected `{name}` to be a non-empty 1-D array of scores, got shape {scores.shape}")
    if not np.isfinite(scores).all():
        raise InputError(f"expected finite `{name}`, got {int((~np.isfinite(scores)).sum())} NaN or inf values")
    return scores


def check_strata(name: str, strata: np.ndarray | None, size: int) -> np.ndarray:
    """Non-negative integer strata (class labels) of shape ``(size,)`` as int64; None means one stratum."""
    if strata is None:
        return np.zeros(size, dtype=np.int64)
    strata = np.asarray(strata)
    if strata.shape != (size,) or not np.issubdtype(strata.dtype, np.integer) or (strata.size and strata.min() < 0):
        raise InputError(
            f"expected `{name}` to be non-negative integers of shape ({size},) (e.g. class labels), "
            f"got shape {strata.shape} and dtype {strata.dtype}"
        )
    return strata.astype(np.int64, copy=False)


def check_paired_strata(
    names: tuple[str, str], strata: tuple[np.ndarray | None, np.ndarray | None], sizes: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, int]:
    """Strata of two samples, both or neither, each checked by :func:`check_strata`.

    Returns both as int64 (zeros when neither is given) and the number of strata they span.
    """
    if (strata[0] is None) != (strata[1] is None):
        raise InputError(f"expected `{names[0]}` and `{names[1]}` both or neither, got only one")
    first = check_strata(names[0], strata[0], sizes[0])
    second = check_strata(names[1], strata[1], sizes[1])
    return first, second, int(max(first.max(), second.max())) + 1
