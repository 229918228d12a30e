"""Fitting a recipe's scikit-learn estimator; a forest grown a chunk of trees at a time, so that it says how far it is.

A forest's ``fit`` is one call that says nothing until every tree is grown: the default table
recipe (200 extremely randomized trees) on 20,000 rows takes seconds, a random forest on images
minutes. With ``warm_start=True``, raising ``n_estimators`` and fitting again adds the trees
between; scikit-learn draws every tree's seed from ``random_state`` in one sequence and skips
the seeds of the trees already grown, so a forest grown in chunks is the forest grown at once:
the same trees, bitwise the same probabilities (tests/training/test_forest_growth.py holds both
forests to it, with bootstrap samples, out-of-bag scores and balanced class weights). Chunks are
sized to take about :data:`CHUNK_SECONDS` each at the pace of the trees grown so far, and the
progress counts trees as scoring counts samples (:mod:`ema.progress`): nothing for a forest grown
within a second, a bar on a terminal, lines in a log.
"""

from __future__ import annotations

import time
import warnings

from ema.limits import check_deadline
from ema.progress import Progress

#: Trees in the first chunk, grown before the forest's pace is known.
FIRST_CHUNK = 1
#: Seconds a later chunk should take at the pace of the trees grown before it.
CHUNK_SECONDS = 0.5
#: The warning a forest with balanced class-weight presets gives at every warm start: it is about data that differs
#: from one fit to the next, and here every chunk is fitted on the same rows.
WARM_START_WEIGHTS = 'class_weight presets "balanced" or "balanced_subsample" are not recommended for warm_start'


def fit_estimator(estimator, features, labels, *, what: str, progress: bool):
    """Fit a recipe's fresh, unfitted ``estimator`` on ``features`` and ``labels``; a forest (scikit-learn's random
    forest or extremely randomized trees) with ``progress`` in chunks, its trees counted on stderr as ``what``
    ("train ExtraTreesClassifier").

    Returns the fitted estimator, with the parameters it was given (``warm_start``, ``n_estimators`` and
    ``oob_score`` as they were, also when a chunk raises).

    Raises
    ------
    TimeLimitExceeded
        If the command's ``--timeout`` has passed before a chunk (the whole fit runs under the caller's
        :func:`ema.limits.interruptible` too).
    """
    from sklearn.ensemble import ExtraTreesClassifier, RandomForestClassifier

    if not progress or not isinstance(estimator, (RandomForestClassifier, ExtraTreesClassifier)):
        return estimator.fit(features, labels)
    given = estimator.get_params(deep=False)
    total, started, grown = given["n_estimators"], time.perf_counter(), 0
    try:
        with Progress(what, total, unit="tree", enabled=True) as shown, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=WARM_START_WEIGHTS, category=UserWarning)
            while grown < total:
                check_deadline(what)
                more = chunk_size(grown, total, time.perf_counter() - started)
                # out-of-bag scores once, with the last chunk: scoring them after each would cost a pass over the trees
                oob_score = given["oob_score"] if grown + more == total else False
                estimator.set_params(warm_start=True, n_estimators=grown + more, oob_score=oob_score)
                estimator.fit(features, labels)
                grown += more
                shown.advance(more)
    finally:  # the parameters it was given, whether it grew every tree or stopped (a deadline, a refusal) partway
        estimator.set_params(warm_start=given["warm_start"], n_estimators=total, oob_score=given["oob_score"])
    return estimator


def chunk_size(grown: int, total: int, seconds: float) -> int:
    """Trees to grow next, ``grown`` of ``total`` having taken ``seconds``: :data:`FIRST_CHUNK` first, then as many as
    take :data:`CHUNK_SECONDS` at their pace, at least one and at most those left."""
    left = total - grown
    if grown == 0:
        return min(FIRST_CHUNK, left)
    if seconds <= 0.0:  # a clock too coarse to time the trees so far: they were quick
        return left
    return max(1, min(left, int(CHUNK_SECONDS * grown / seconds)))
