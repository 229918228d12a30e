"""The figures render to PNG without a display."""

from __future__ import annotations

import numpy as np

from ema.experiments.paper.figures import KSPanel, ks_output_distributions, signal_distributions
from ema.signals import compute_scores

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _proba(n: int, seed: int) -> np.ndarray:
    logits = np.random.default_rng(seed).normal(size=(n, 10)) * 3
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_signal_distributions_is_a_png():
    labels = np.arange(50) % 10
    scores = {name: compute_scores(_proba(50, seed), labels) for seed, name in enumerate(("M1", "M6", "S"))}
    assert signal_distributions(scores, title="fig 2").startswith(PNG_MAGIC)


def test_ks_output_distributions_is_a_png_and_reports_the_auditor_statistics():
    labels = np.arange(40) % 10
    panel = KSPanel(100, _proba(40, 0), _proba(40, 1), _proba(40, 0), labels)
    ks_target, ks_calibration = panel.statistics()
    assert ks_target == 0.0 and ks_calibration > 0
    assert ks_output_distributions([panel, panel], query_label="M1", title="fig 3").startswith(PNG_MAGIC)
