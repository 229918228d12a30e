"""membership signals on class-probability matrices (Song & Mittal 2020).

Every metric takes probabilities of shape (n_samples, n_classes) and labels of shape
(n_samples,) and returns one score per sample, higher meaning more member-like.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ema.errors import InputError

#: Smallest probability fed to a logarithm; keeps log(0) finite for saturated outputs.
LOG_FLOOR = 1e-30
#: Absolute tolerance on row sums when checking that rows are probability distributions.
ROW_SUM_TOLERANCE = 1e-3
#: Most negative value read as a probability of 0: float32 arithmetic leaves such values (an ONNX
#: runtime's binary classifier gives the second class as 1 - p, e.g. -1.19e-07).
NEGATIVE_TOLERANCE = 1e-6


def probability_rows(matrix: np.ndarray) -> np.ndarray:
    """Which rows of a finite (n, C) matrix are probabilities: non-negative (to float rounding), summing to 1."""
    return (matrix >= -NEGATIVE_TOLERANCE).all(axis=1) & (np.abs(matrix.sum(axis=1) - 1.0) <= ROW_SUM_TOLERANCE)


def check_probabilities(proba: np.ndarray, labels: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Validate a probability matrix (and labels) and return them as float64 / int64.

    Raises
    ------
    InputError
        If ``proba`` is not a finite (n_samples, n_classes) matrix of non-negative rows
        summing to 1, or ``labels`` do not match it.
    """
    proba = np.asarray(proba)
    if proba.ndim != 2 or proba.shape[0] == 0 or proba.shape[1] < 2:
        raise InputError(
            "expected probabilities of shape (n_samples, n_classes) with n_samples >= 1 and "
            f"n_classes >= 2, got shape {proba.shape}"
        )
    proba = proba.astype(np.float64, copy=False)
    if not np.isfinite(proba).all():
        n_bad = int((~np.isfinite(proba)).any(axis=1).sum())
        raise InputError(f"expected finite probabilities, got NaN or inf in {n_bad} of {len(proba)} rows")
    bad_rows = ~probability_rows(proba)
    if bad_rows.any():
        first = int(np.flatnonzero(bad_rows)[0])
        smallest = proba[first].min()
        why = f"holds {smallest:.4g}" if smallest < -NEGATIVE_TOLERANCE else f"sums to {proba[first].sum():.4g}"
        raise InputError(
            f"expected rows of non-negative probabilities summing to 1, got {int(bad_rows.sum())} of "
            f"{len(proba)} rows that are not (row {first} {why}); "
            "if the model returns logits, pass --outputs logits to apply softmax"
        )
    if (proba < 0).any():
        proba = np.maximum(proba, 0.0)
    if labels is None:
        return proba, None
    labels = np.asarray(labels)
    if labels.shape != (proba.shape[0],):
        raise InputError(f"expected labels of shape ({proba.shape[0]},) to match the probabilities, got {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise InputError(f"expected integer class labels, got dtype {labels.dtype}")
    outside = (labels < 0) | (labels >= proba.shape[1])
    if outside.any():
        first = int(np.argmax(outside))
        raise InputError(
            f"expected labels in 0..{proba.shape[1] - 1} (the model's {proba.shape[1]} classes), "
            f"got values from {labels.min()} to {labels.max()} (first outside: {labels[first]} in row {first})"
        )
    return proba, labels.astype(np.int64, copy=False)


def correctness_score(proba: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """1.0 where the predicted class equals the label, else 0.0."""
    return (proba.argmax(axis=1) == labels).astype(np.float64)


def confidence_score(proba: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The probability the model gives the true class, f(x)_y."""
    return proba[np.arange(len(labels)), labels]


def negative_entropy_score(proba: np.ndarray, labels: np.ndarray | None = None) -> np.ndarray:
    """sum_i f(x)_i log f(x)_i: 0 for a one-hot output, -log(C) for a uniform one."""
    return (proba * np.log(np.maximum(proba, LOG_FLOOR))).sum(axis=1)


def log_odds_score(proba: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """log f(x)_y - log sum_{i != y} f(x)_i: the confidence on a logit scale (Carlini et al. 2022).

    The denominator sums the other classes' probabilities instead of computing
    1 - f(x)_y, so it keeps resolving samples whose confidence rounds to 1.0: an overfit
    model gives most members and non-members a float32 confidence of exactly 1.0, and
    those ties would hide the tail where membership shows.
    """
    rows = np.arange(len(labels))
    others = proba.copy()
    others[rows, labels] = 0.0
    return np.log(np.maximum(proba[rows, labels], LOG_FLOOR)) - np.log(np.maximum(others.sum(axis=1), LOG_FLOOR))


def modified_entropy_score(proba: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Negated modified entropy of Song & Mittal (2020), which uses the label.

    Mentr = -(1 - p_y) log p_y - sum_{i != y} p_i log(1 - p_i); we return -Mentr so that
    higher is more member-like.
    """
    rows = np.arange(len(labels))
    p_true = proba[rows, labels]
    log_p = np.log(np.maximum(proba, LOG_FLOOR))
    log_1mp = np.log(np.maximum(1.0 - proba, LOG_FLOOR))
    others = proba * log_1mp
    others[rows, labels] = 0.0
    return (1.0 - p_true) * log_p[rows, labels] + others.sum(axis=1)


SignalFn = Callable[[np.ndarray, np.ndarray], np.ndarray]

#: The signals by name. The paper uses the first three (it calls them metrics).
SIGNALS: dict[str, SignalFn] = {
    "correctness": correctness_score,
    "confidence": confidence_score,
    "negative_entropy": negative_entropy_score,
    "modified_entropy": modified_entropy_score,
    "log_odds": log_odds_score,
}
PAPER_SIGNALS: tuple[str, ...] = ("correctness", "confidence", "negative_entropy")
#: What a label-only oracle allows.
LABEL_ONLY_SIGNALS: tuple[str, ...] = ("correctness",)


def check_signal_names(signals: Sequence[str]) -> tuple[str, ...]:
    """Return ``signals`` as a tuple, refusing unknown or repeated names."""
    unknown = [m for m in signals if m not in SIGNALS]
    if unknown or not signals or len(set(signals)) != len(signals):
        raise InputError(f"expected distinct signal names from {sorted(SIGNALS)}, got {list(signals)}")
    return tuple(signals)


def compute_scores(
    proba: np.ndarray, labels: np.ndarray, signals: Sequence[str] = PAPER_SIGNALS
) -> dict[str, np.ndarray]:
    """Validate inputs once and compute every named signal.

    Parameters
    ----------
    proba : ndarray of shape (n_samples, n_classes)
        Class probabilities from the model.
    labels : ndarray of shape (n_samples,)
        True labels, integers in 0..n_classes-1.
    signals : sequence of str
        Names from :data:`SIGNALS`.

    Returns
    -------
    dict of str to ndarray of shape (n_samples,)
    """
    names = check_signal_names(signals)
    proba, labels = check_probabilities(proba, labels)
    return {name: SIGNALS[name](proba, labels) for name in names}
