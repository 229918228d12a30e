"""Several views of each sample (the identity and its one-pixel shifts) reduced to one membership score.

Under ``ema audit --augment shifts`` every sample reaches the target as 9 images (the identity
first, then its 8 one-pixel shifts; :mod:`ema.data.shifts`), so an auditor receives
probabilities of shape (n_views, n_samples, n_classes). A member was memorized in its own
position: its identity view scores higher than its shifted views by more than a non-member's
does, while the shifted views tell how easy the sample is for any model (a per-sample
difficulty calibration from the black box alone, without reference models). The score is the
identity's signal minus :data:`SHIFT_CONTRAST` times the mean of the other views'.

The reduction is fixed, not fitted, so the cross-fitted information of the score
(:func:`ema.stats.information.cross_fitted_information`) stays honest. Measured on the validity
targets (docs/VALIDITY.md, "Shifted queries"): a contrast of 0.5 gave the most information
among fixed contrasts 0.25-1 and beat fitted directions (LDA, logistic regression, gradient
boosting on the 9 log-odds, each fitted on half of the references); the mean of all views
alone loses most of the information.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ema.errors import InputError
from ema.signals import check_probabilities

#: Weight of the shifted views' mean score subtracted from the identity's.
SHIFT_CONTRAST = 0.5
#: Fewest views a multi-view array holds (the identity and at least one other).
MIN_VIEWS = 2
#: Appended to the signal's name for the score of several views (``log_odds_view_contrast``): it is no signal
#: of :data:`ema.signals.SIGNALS`, so nothing compares it with a single view's scores.
VIEW_SCORE_SUFFIX = "_view_contrast"


def check_view_probabilities(proba: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate probabilities of one view (n, C) or of several (n_views, n, C), the identity first.

    Returns
    -------
    proba : ndarray of shape (n, C) or (n_views, n, C)
    labels : ndarray of shape (n,)

    Raises
    ------
    InputError
        On a 3-D array with fewer than :data:`MIN_VIEWS` views, or on any view that
        :func:`ema.signals.check_probabilities` refuses.
    """
    array = np.asarray(proba)
    if array.ndim != 3:
        return check_probabilities(proba, labels)
    if array.shape[0] < MIN_VIEWS:
        raise InputError(
            f"expected probabilities of shape (n_views, n_samples, n_classes) with at least {MIN_VIEWS} views, "
            f"got shape {array.shape}"
        )
    n_views, n_samples, n_classes = array.shape
    labels_array = np.asarray(labels)
    flat, _ = check_probabilities(array.reshape(-1, n_classes), np.tile(labels_array, n_views))
    return flat.reshape(n_views, n_samples, n_classes), check_probabilities(array[0], labels_array)[1]


def view_score(
    score: Callable[[np.ndarray, np.ndarray], np.ndarray], proba: np.ndarray, labels: np.ndarray
) -> np.ndarray:
    """The membership score of validated views: ``score`` of the identity minus the contrast times the others' mean.

    Parameters
    ----------
    score : callable
        A membership signal, (n, C) probabilities and (n,) labels -> (n,) (:data:`ema.signals.SIGNALS`).
    proba : ndarray of shape (n, C) or (n_views, n, C)
        From :func:`check_view_probabilities`; a single view is scored as it is.
    labels : ndarray of shape (n,)

    Returns
    -------
    ndarray of shape (n,)
    """
    if proba.ndim == 2:
        return score(proba, labels)
    n_views, n_samples, n_classes = proba.shape
    per_view = score(proba.reshape(-1, n_classes), np.tile(labels, n_views)).reshape(n_views, n_samples)
    return per_view[0] - SHIFT_CONTRAST * per_view[1:].mean(axis=0)


def view_score_name(signal: str, views: int) -> str:
    """The name of the score :func:`view_score` gives from ``views`` views: the signal's own for one view."""
    return signal if views == 1 else f"{signal}{VIEW_SCORE_SUFFIX}"


def identity_view(proba: np.ndarray) -> np.ndarray:
    """The identity's probabilities, (n, C), of validated single- or multi-view probabilities."""
    return proba if proba.ndim == 2 else proba[0]


def n_views(proba: np.ndarray) -> int:
    """How many views validated probabilities hold (1 for a 2-D array)."""
    return 1 if proba.ndim == 2 else int(proba.shape[0])
