"""Family-wise corrections for testing several signals and cut-offs at once."""

from __future__ import annotations

import numpy as np

from ema.errors import InputError
from ema.validation import check_choice

#: Family-wise corrections for testing several signals and cut-offs at once.
CORRECTIONS = ("holm", "bonferroni")


def adjust_pvalues(pvalues: np.ndarray, method: str = "holm") -> np.ndarray:
    """Family-wise error rate adjusted p-values (Holm's step-down or Bonferroni).

    Parameters
    ----------
    pvalues : array_like
        Unadjusted p-values, any shape.
    method : {"holm", "bonferroni"}

    Returns
    -------
    ndarray of the same shape
        Reject the hypotheses whose adjusted p-value is <= alpha; the family-wise error rate
        is then <= alpha under any dependence between the tests.

    Examples
    --------
    >>> adjust_pvalues([0.01, 0.04, 0.03], "holm").round(2).tolist()
    [0.03, 0.06, 0.06]
    """
    check_choice("method", method, CORRECTIONS)
    pvalues = np.asarray(pvalues, dtype=np.float64)
    if pvalues.size == 0 or not np.isfinite(pvalues).all() or np.any((pvalues < 0) | (pvalues > 1)):
        raise InputError(f"expected a non-empty array of p-values in [0, 1], got {pvalues.tolist()}")
    flat = pvalues.ravel()
    m = flat.size
    if method == "bonferroni":
        return np.minimum(1.0, flat * m).reshape(pvalues.shape)
    order = np.argsort(flat, kind="stable")
    stepped = np.maximum.accumulate(np.minimum(1.0, flat[order] * (m - np.arange(m))))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    return adjusted.reshape(pvalues.shape)
