"""Joint draws of nested shares (Dirichlet laws over bins); for validated input."""

from __future__ import annotations

import numpy as np

#: Smallest Dirichlet parameter drawn through normalised gammas; below it gammas can underflow
#: to 0 and Generator.dirichlet's dedicated method is used.
_GAMMA_DIRICHLET_MIN_SHAPE = 0.1


def nested_dirichlet(
    rng: np.random.Generator, cumulative: np.ndarray, total: float, size: int, prior: float
) -> np.ndarray:
    """Joint draws of nested shares: Dirichlet over the bins between nondecreasing cumulative counts.

    Returns the cumulative shares, shape (size, len(cumulative)). Bins with no weight (after
    ``prior``) stay empty. For validated input.
    """
    cumulative = np.asarray(cumulative, dtype=np.float64)
    bins = np.diff(np.concatenate([[0.0], cumulative, [float(total)]])) + prior
    positive = bins > 0
    shares = np.zeros((size, bins.size))
    if bins[positive].min() >= _GAMMA_DIRICHLET_MIN_SHAPE:
        # Normalised gamma draws: the Dirichlet law, several times faster than Generator.dirichlet.
        gammas = rng.standard_gamma(bins[positive], (size, int(positive.sum())))
        shares[:, positive] = gammas / gammas.sum(axis=1, keepdims=True)
    else:
        shares[:, positive] = rng.dirichlet(bins[positive], size)
    return np.cumsum(shares, axis=1)[:, :-1]
