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


def test_models_trained_on_sets_missing_a_class_keep_every_output_of_the_target(store, tmp_path):
    """The KS ratio's query model on a query without class 9, and a retrain whose forget set is all of class 9,
    keep the target's ten outputs: their outputs are compared with the target's, and class 9 is audited."""
    from ema.data.files import write_set
    from ema.data.presets import DEFAULT_DATA, load_splits
    from ema.training.unlearn_spec import UnlearnSpec
    from ema.workflows.target import resolve_target
    from ema.workflows.unlearn import UnlearnConfig, unlearn

    trained = CliRunner().invoke(main, ["train", "--epochs", "2", "--no-progress"])
    assert trained.exit_code == 0, trained.output
    version = resolve_target("models:/ema-target@target").version
    m1 = load_splits(DEFAULT_DATA, 0).query("M1")
    no_nines = write_set(m1.take(np.flatnonzero(m1.y != 9)[:40], "no-nines"), tmp_path / "no-nines.npz")
    ks = audit(AuditConfig(model_uri=version.uri, query_file=str(no_nines), method="ks-ratio"), progress=False)
    assert ks.primary.verdict in ("memorized", "not_memorized")
    train = load_splits(DEFAULT_DATA, 0).train
    nines = write_set(train.take(np.flatnonzero(train.y == 9), "nines"), tmp_path / "nines.npz")  # the whole class
    spec = UnlearnSpec(method="retrain", seed=0)
    outcome = unlearn(UnlearnConfig(model_uri=version.uri, forget=str(nines), spec=spec), progress=False)
    assert PyfuncOracle(outcome.version.uri).predict_proba(m1.x[:3]).shape == (3, 10)
