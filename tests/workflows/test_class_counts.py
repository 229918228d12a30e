"""A target of fewer classes than the digits' ten: its network, its calibration model and the audit's chance level
follow its own classes (a two-class X-ray model is not a ten-class one)."""

from __future__ import annotations

import mlflow
import numpy as np
from click.testing import CliRunner

from ema.data.embedded import load_mnist_embedded
from ema.oracle import PyfuncOracle
from ema.workflows.audit import AuditConfig, audit
from ema_cli.cli import main


def test_a_two_class_target_and_its_calibration_model_have_two_outputs(store, tmp_path):
    data = load_mnist_embedded()
    keep = data.y < 2
    np.savez(tmp_path / "two.npz", x=data.x[keep], y=data.y[keep])
    trained = CliRunner().invoke(
        main,
        ["train", "--data-file", str(tmp_path / "two.npz"), "--epochs", "2", "--model-name", "two", "--no-progress"],
    )
    assert trained.exit_code == 0, trained.output
    images = data.x[keep][:3]
    assert PyfuncOracle("models:/two@target").predict_proba(images).shape == (3, 2)
    outcome = audit(AuditConfig(model_uri="models:/two@target", query="M1", method="ema+calibrated"), progress=False)
    calibration = mlflow.get_run(outcome.run_id).data.tags["ema.calibration_version"]
    assert PyfuncOracle(calibration).predict_proba(images).shape == (3, 2)
    assert not any("classes" in warning and "lack" in warning for warning in outcome.warnings)
