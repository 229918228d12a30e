"""The audit's gates (``ema.workflows.audit_gates.check_gates``), read from the methods' results."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ema.auditors.ema import EMAAuditor
from ema.data.arrays import ArraySet
from ema.workflows.audit_gates import check_gates


def _halves(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities and labels alike for members and non-members: signals that do not separate them."""
    labels = rng.integers(0, 2, n)
    return np.where(labels[:, None] == 0, rng.dirichlet([4.0, 1.0], n), rng.dirichlet([1.0, 4.0], n)), labels


def test_audit_warnings_gate_emas_separation_on_its_auc_not_its_in_sample_balanced_accuracy():
    """AUCs of 0.52 at best on 75 + 75 calibration samples, while the best threshold's balanced accuracy, picked on
    those same samples, read 0.553 and cleared the limit: no "barely separate" warning came (a review's bc-mlp)."""
    rng = np.random.default_rng(8)
    auditor = EMAAuditor().calibrate(*_halves(rng, 75), *_halves(rng, 75))
    signals = auditor.to_dict()["signals"].values()
    assert max(entry["balanced_accuracy"] for entry in signals) >= 0.55  # what the gate read alone
    best_auc = max(entry["attack"]["auc"] for entry in signals)
    assert best_auc < 0.55
    reference, reference_labels = rng.dirichlet([20.0, 1.0], 200), np.zeros(200, dtype=np.int64)
    session = SimpleNamespace(
        nonmember_proba=reference,
        nonmembers=SimpleNamespace(data=ArraySet("reference", np.zeros((200, 2)), reference_labels, np.arange(200))),
        target=SimpleNamespace(version=None),
        oracle=None,
    )
    warnings = check_gates(session, {EMAAuditor.method: auditor.audit(*_halves(rng, 40))}).warnings
    (separation,) = [warning for warning in warnings if "barely separate" in warning]
    assert separation.startswith(
        "members and non-members barely separate on the target (EMA's signals on its calibration halves: AUC 0.524 < "
        "0.55)"
    )
