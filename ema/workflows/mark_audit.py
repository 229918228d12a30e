"""One marks audit: the key's trigger stamped on the auditor's clean images, and its controls where it moved them.

Shared by ``ema audit --method marks`` (through any oracle) and the marks benchmarks (a model in
process), so that both query the same images in the same order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ema.auditors.marks import MarksAuditor
from ema.auditors.result import AuditResult
from ema.data.marks import MarkKey


def audit_key(
    auditor: MarksAuditor,
    key: MarkKey,
    x: np.ndarray,
    labels: np.ndarray,
    stamped_proba: np.ndarray,
    predict_classes: Callable[[np.ndarray], np.ndarray],
) -> AuditResult:
    """The calibrated ``auditor``'s result for ``key`` on the clean uint8 images ``x``.

    ``stamped_proba`` holds the target's probabilities on ``key.stamp(x)``; ``predict_classes``
    maps images to the target's predicted classes. A noise key's controls
    (:meth:`MarkKey.control`) are stamped only on the images the trigger moved to the target
    class, the only ones whose count they change: a removed mark costs a handful of extra
    queries, not ``n_controls`` times the query.
    """
    if not key.n_controls:
        return auditor.audit(stamped_proba, labels)
    moved = np.flatnonzero(auditor.moved_to_target(stamped_proba, labels))
    controls = np.zeros((key.n_controls, moved.size), dtype=np.int64)
    for index in range(key.n_controls if moved.size else 0):  # a handful of controls
        controls[index] = predict_classes(key.control(index).stamp(x[moved]))
    return auditor.audit(stamped_proba, labels, controls)
