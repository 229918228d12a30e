"""An audit of a workbench target logs attack strength where membership is known, and draws its ROC in report.html."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ema.auditors.attack import LOW_FPRS
from ema.signals import PAPER_SIGNALS
from ema.tracking import keys
from ema.workflows.audit import AuditConfig, audit

pytestmark = pytest.mark.slow  # trains a target and a calibration model (~2.5 min on two shared cores)

ATTACK_NAMES = ("mia_auc", "tpr_at_fpr_1pct", "tpr_at_fpr_0_1pct")


@pytest.fixture(scope="module")
def audited(trained):
    """An ``ema+calibrated`` audit of M1 (members known: the target's other training folds)."""
    _, outcome = trained
    return audit(AuditConfig(model_uri=outcome.version.uri, query="M1", method="ema+calibrated"), progress=False)


def test_audit_logs_attack_strength_per_signal_and_for_the_calibrated_score(audited):
    metrics = MlflowClient().get_run(audited.run_id).data.metrics
    for suffix in (*PAPER_SIGNALS, "calibrated"):
        n_nonmembers = metrics[f"mia_n_nonmembers.{suffix}"]
        assert n_nonmembers > 0
        # a TPR at an FPR its non-members cannot resolve (fewer than 1 / FPR) is not logged
        resolved = [name for name in ATTACK_NAMES if name == "mia_auc" or n_nonmembers >= round(1 / LOW_FPRS[name])]
        assert {name for name in ATTACK_NAMES if f"{name}.{suffix}" in metrics} == set(resolved), suffix
        for name in resolved:
            assert 0.0 <= metrics[f"{name}.{suffix}"] <= 1.0, (name, suffix)
        if f"tpr_at_fpr_0_1pct.{suffix}" in metrics:
            assert metrics[f"tpr_at_fpr_0_1pct.{suffix}"] <= metrics[f"tpr_at_fpr_1pct.{suffix}"]
    assert metrics["mia_auc.confidence"] > 0.5  # an overfit calibration model: members score higher
    assert metrics["mia_auc.calibrated"] > 0.5


def test_audit_report_draws_the_roc_figure(audited, tmp_path):
    client = MlflowClient()
    figures = {f.path for f in client.list_artifacts(audited.run_id, keys.ARTIFACT_FIGURES_DIR)}
    assert f"{keys.ARTIFACT_FIGURES_DIR}/attack_roc.svg" in figures
    page = Path(client.download_artifacts(audited.run_id, keys.ARTIFACT_REPORT, str(tmp_path))).read_text()
    section = page.split('id="attack"')[1].split("</section>")[0]
    assert "ema: confidence (calibration model&#x27;s halves)" in section
    assert "calibrated: its score (member and non-member references)" in section
    assert "figures/attack_roc.svg" in section
