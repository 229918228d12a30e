"""`mlflow run` on this project: the MLproject entry points run the CLI and land in the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_mlflow_run_train_then_audit(store, tmp_path):
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    env = {**os.environ, "PATH": f"{mlflow_cli.parent}{os.pathsep}{os.environ['PATH']}"}
    for entry, params in (
        ("train", ["-P", "epochs=2"]),
        ("unlearn", ["-P", "method=finetune", "-P", "epochs=1", "-P", "forget=M2"]),
        # threshold_mode is no entry-point parameter: mlflow passes it as --threshold_mode, read as --threshold-mode
        ("audit", ["-P", "query=M6", "-P", "threshold_mode=per-class", "-P", "alpha=0.10"]),
    ):
        done = subprocess.run(
            [
                str(mlflow_cli),
                "run",
                str(REPO),
                "-e",
                entry,
                *params,
                "--env-manager",
                "local",
                "--experiment-name",
                "ema",
            ],
            check=True,
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        # the model's config logs as params beside the MLproject's own `device` (auto), without a collision
        assert "Failed to log model config as params" not in done.stderr, done.stderr[-2000:]
    client = MlflowClient()
    runs = client.search_runs([client.get_experiment_by_name("ema").experiment_id])
    for entry, name in (("train", "train mlp ema-target"), ("unlearn", "unlearn finetune M2 ema-target")):
        (run,) = [r for r in runs if r.data.tags.get("mlflow.project.entryPoint") == entry]
        assert run.info.run_name.startswith(name), run.info.run_name  # named as `ema train` names its run
        params = run.data.params
        assert params["device"] == "auto" and params["device_used"] == "cpu" and params["scoring_device"] == "cpu"
        assert params["spec/arch"] == "mlp" and params["n_classes"] == "10" and params["input_shape"] == "[1, 28, 28]"
    # the calibration run nested in the audit inherits its params: keep the audit run itself
    audits = [r for r in runs if r.data.params.get("query") == "M6" and r.data.tags.get("ema.run_kind") == "audit"]
    assert len(audits) == 1 and audits[0].info.status == "FINISHED"
    assert "rho_ema" in audits[0].data.metrics
    params = audits[0].data.params
    assert params["threshold_mode"] == "per-class"
    assert (params["alpha"], params["alpha.resolved"]) == ("0.10", "0.1")  # mlflow's text kept, the value beside it
    assert str(client.get_model_version_by_alias("ema-target", "target").version) == "1"
    unlearned = client.get_model_version_by_alias("ema-target", "unlearned")
    assert str(unlearned.version) == "2" and unlearned.tags["ema.unlearned_from"] == "1"
    assert unlearned.tags["ema.unlearn.method"] == "finetune" and unlearned.tags["ema.forget"] == "M2"
    assert json.loads(unlearned.tags["ema.unlearn.spec"])["epochs"] == 1


@pytest.mark.slow
def test_mlflow_run_grid_with_its_default_epochs_logs_them_as_given_and_as_trained(store, tmp_path):
    """MLflow logs the entry point's ``epochs`` (0: the paper's) before the grid runs; the grid logs the same value
    and the epochs it trained (50) under their own key, instead of failing on a changed param."""
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    env = {**os.environ, "PATH": f"{mlflow_cli.parent}{os.pathsep}{os.environ['PATH']}"}
    args = ["run", str(REPO), "-e", "grid", "-P", "k=100", "-P", "queries=M1", "--env-manager", "local"]
    done = subprocess.run(
        [str(mlflow_cli), *args, "--experiment-name", "ema"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    client = MlflowClient()
    runs = client.search_runs([client.get_experiment_by_name("ema").experiment_id])
    (parent,) = [
        run for run in runs if run.data.params.get("grid") == "benchmark" and "mlflow.parentRunId" not in run.data.tags
    ]
    assert parent.data.params["epochs"] == "0" and parent.data.params["target_epochs"] == "50"


@pytest.mark.slow
def test_mlflow_run_names_the_absolute_path_a_relative_file_was_looked_for_at(store, tmp_path):
    """MLflow runs an entry point in the project's folder and passes a string parameter as given: a relative path
    given from another folder is looked for there, and the error shows where and says to pass an absolute path."""
    (tmp_path / "splits").mkdir()
    (tmp_path / "splits" / "own.csv").write_text("a,label\n1,0\n")  # here, in the caller's folder
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    env = {**os.environ, "PATH": f"{mlflow_cli.parent}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    args = ["run", str(REPO), "-e", "train", "-P", "data_file=splits/own.csv", "--env-manager", "local"]
    done = subprocess.run([str(mlflow_cli), *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert (
        f"Error: training data file (ema train --data-file) splits/own.csv does not exist (looked for "
        f"{REPO / 'splits/own.csv'}; under `mlflow run` a relative path is read from the project's folder: pass an "
        "absolute path there)"
    ) in done.stderr, done.stderr[-2000:]
