"""A model that takes its time, audited in-process: --timeout holds between its batches, and --progress says how far
each set's scoring is (a user's 20,000-row scikit-learn audit printed nothing for 20 s and overran --timeout by 4 s).

The model is a user's pyfunc that sleeps a fixed time a row and writes down the size of every batch it is handed,
logged to a real sqlite store.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import mlflow
import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient
from scipy.special import softmax

from ema import progress
from ema.data.files import write_set
from ema.data.presets import load_splits
from ema.oracle.batching import BATCH_SECONDS, MIN_BATCH
from ema.tracking import keys
from ema.workflows.audit import AuditConfig, audit
from ema_cli.cli import main
from tests.foreign.conftest import MLP_RECIPE

#: Seconds the slow model sleeps a row: 2,000 rows in one batch of the old 4,096 took 20 s.
SECONDS_PER_ROW = 0.01
#: The most rows a paced batch of that model holds: the largest power of two BATCH_SECONDS holds (sleep is no shorter).
MOST_PER_BATCH = max(MIN_BATCH, 1 << int(np.log2(BATCH_SECONDS / SECONDS_PER_ROW)))


class Sleeper(mlflow.pyfunc.PythonModel):
    """Probabilities from each image's own pixels, after ``seconds_per_row`` a row; each batch's size goes to a file."""

    def __init__(self, log: str, seconds_per_row: float) -> None:
        self.log, self.seconds_per_row = log, seconds_per_row

    def predict(self, context, model_input, params=None):
        x = np.asarray(model_input, dtype=np.float64).reshape(len(model_input), -1)
        time.sleep(self.seconds_per_row * len(x))
        with open(self.log, "a") as log:
            log.write(f"{len(x)}\n")
        return softmax(np.sin(x.sum(axis=1, keepdims=True) / 1000.0 + np.arange(10)), axis=1)


def logged_sleeper(folder: Path, seconds_per_row: float) -> tuple[str, Path]:
    """The registered model's URI, and the file its batch sizes go to."""
    log = folder / "batches.txt"
    mlflow.set_experiment("a user's models")  # the template store's Default experiment keeps its artifacts elsewhere
    with mlflow.start_run(run_name="a user's slow model"):
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=Sleeper(str(log), seconds_per_row),
            input_example=np.zeros((2, 28, 28), np.uint8),
            registered_model_name="slow",
        )
    return f"models:/slow/{info.registered_model_version}", log


def batches(log: Path) -> list[int]:
    return [int(line) for line in log.read_text().split()] if log.exists() else []


def newest_run():
    experiment = mlflow.get_experiment_by_name(keys.DEFAULT_EXPERIMENT)
    return MlflowClient().search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"])[0]


def test_the_timeout_stops_a_slow_model_within_one_paced_batch(store, tmp_path):
    """2,000 query rows at 0.01 s a row: one call of the old 4,096-row batches slept 20 s past a 5 s --timeout.
    Paced, no batch holds more than BATCH_SECONDS of rows, and none starts after the deadline: the rows scored
    before the last batch fit in the timeout (sleep is never shorter), and the last holds at most one batch."""
    uri, log = logged_sleeper(tmp_path, SECONDS_PER_ROW)
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps(MLP_RECIPE))
    options = ["--model", uri, "--recipe", str(recipe), "--query", "M6", "--timeout", "5", "--no-progress"]
    result = CliRunner().invoke(main, ["audit", *options])
    assert result.exit_code == 124 and "ran past it in step \"score model 'models:/slow/" in result.output
    scored = batches(log)
    assert scored and max(scored) <= MOST_PER_BATCH and sum(scored) < 2000, scored
    assert sum(scored[:-1]) * SECONDS_PER_ROW < 5.0, scored
    run = newest_run()
    assert run.info.status == "FAILED" and keys.TAG_VERDICT not in run.data.tags
    assert not MlflowClient().list_artifacts(run.info.run_id)


def sets_in(folder: Path) -> dict[str, str]:
    """A query, a member reference and a non-member reference of 200 images each, as files."""
    splits = load_splits()
    return {
        name: str(write_set(splits.query(fold).take(np.arange(200)), folder / f"{name}.npz"))
        for name, fold in (("query", "M1"), ("members", "M2"), ("reference", "M6"))
    }


def audit_against_references(uri: str, files: dict[str, str], recipe: Path, *, shown: bool) -> None:
    config = AuditConfig(
        model_uri=uri,
        query_file=files["query"],
        members_file=files["members"],
        reference_file=files["reference"],
        recipe_file=str(recipe),
        method="calibrated",
    )
    audit(config, progress=shown)


@pytest.mark.parametrize("shown", [True, False])
def test_progress_names_each_set_the_audit_scores_and_the_model_unless_no_progress(
    store, tmp_path, capsys, monkeypatch, shown
):
    """stderr is no terminal here: a line as a set's scoring passes SHOW_AFTER (here at once) with batches to go, one
    when it is done; with --no-progress, nothing. The model is fast: only the query, whose first batch finds its
    pace, takes more than one batch."""
    uri, _ = logged_sleeper(tmp_path, 0.0)
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps(MLP_RECIPE))
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.0)
    files = sets_in(tmp_path)
    capsys.readouterr()
    audit_against_references(uri, files, recipe, shown=shown)
    err = capsys.readouterr().err
    model = f"score model {uri!r} on"
    if not shown:
        assert model not in err
        return
    assert f"{model} query: {MIN_BATCH} of 200 samples after " in err, err  # the first set, its pace not yet known
    for name in ("query", "members without the query", "reference without the query"):
        assert f"{model} {name}: 200 samples in " in err, err
