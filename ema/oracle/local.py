"""A model this process holds itself (one of the auditor's helper models), reached through the oracle interface."""

from __future__ import annotations

import numpy as np

from ema.oracle.base import Oracle


class LocalOracle(Oracle):
    """Scores images through a classifier object in this process (``predict_proba`` on float pixels).

    The auditor's helpers (calibration models, the KS ratio's models) are rebuilt from
    their weights by the auditor itself; this gives them the batching and output checks
    every oracle has. The classifier applies its own input transform, so the oracle hands it
    float32 pixels in [0, 1] of shape (n, 1, H, W).
    """

    owner_column_order = False

    def __init__(self, classifier: object, *, source: str, **options) -> None:
        super().__init__(outputs="probabilities", **options)
        self.classifier, self.source = classifier, source

    def _predict_batch(self, inputs: np.ndarray) -> np.ndarray:
        return self.classifier.predict_proba(inputs)
