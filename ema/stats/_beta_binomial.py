"""The beta-binomial law's pmf and tails, vectorised over parameters; for validated input."""

from __future__ import annotations

import numpy as np
from scipy import special


def betabinom_pmf(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Beta-binomial pmf over 0..n for each (a, b); shape ``a.shape + (n + 1,)``. Validated input."""
    a = np.asarray(a, dtype=np.float64)[..., None]
    b = np.asarray(b, dtype=np.float64)[..., None]
    # pmf(0) = B(a, n + b) / B(a, b), then the ratio pmf(k + 1) / pmf(k) =
    # (n - k)(k + a) / ((k + 1)(n - k - 1 + b)): a cumulative sum of logarithms, much cheaper
    # than a log-beta function per entry.
    k = np.arange(n, dtype=np.float64)
    log_ratio = np.log(n - k) + np.log(k + a) - np.log(k + 1.0) - np.log(n - k - 1.0 + b)
    log_first = special.betaln(a, n + b) - special.betaln(a, b)
    log_pmf = np.concatenate([log_first, log_first + np.cumsum(log_ratio, axis=-1)], axis=-1)
    return np.exp(log_pmf)


def tail_probability(pmf: np.ndarray, counts: np.ndarray, alternative: str) -> np.ndarray:
    """P(X <= count) ("less") or P(X >= count) ("greater") from pmf rows; summed from the tail side."""
    counts = np.asarray(counts, dtype=np.int64)
    if alternative == "less":
        tail = np.cumsum(pmf, axis=-1)
    else:
        tail = np.cumsum(pmf[..., ::-1], axis=-1)[..., ::-1]
    picked = np.take_along_axis(tail, counts.reshape((*counts.shape, 1)), axis=-1)[..., 0]
    return np.clip(picked, 0.0, 1.0)
