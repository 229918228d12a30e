"""A model the workbench can neither clone nor retrain, audited by the calibrated auditor with the user's own
calibration model (`--calibration-model` with its members and non-members): no recipe is asked for, and the
transfer route reads member behaviour from that model.

The target is a `mlflow.pyfunc.PythonModel` around a logistic regression fitted on fold M1; the calibration
model is the same kind of model fitted on fold M2 (its members), with half of the held-out M6 as its
non-members and the other half as the held-out query.
"""

from __future__ import annotations

import json

import mlflow
import mlflow.pyfunc
import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient
from sklearn.linear_model import LogisticRegression

from ema.data.files import write_set
from ema.data.presets import load_splits
from ema.tracking import keys
from ema.workflows.audit_methods import ROUTE_TRANSFER
from ema_cli.cli import main
from tests.foreign.conftest import ema_audit, pixels, run_of


class WrappedClassifier(mlflow.pyfunc.PythonModel):
    """A user's pyfunc wrapper: rows of 784 pixels in [0, 1] in, class probabilities out."""

    def __init__(self, classifier: LogisticRegression) -> None:
        self.classifier = classifier

    def predict(self, context, model_input, params=None):
        return self.classifier.predict_proba(np.asarray(model_input, dtype=np.float64))


def register_wrapped(name: str, images: np.ndarray, labels: np.ndarray) -> str:
    """Fit a logistic regression on ``images`` and register it, wrapped, as version 1 of ``name``."""
    classifier = LogisticRegression(C=100.0, max_iter=300).fit(pixels(images), labels)
    with mlflow.start_run(run_name=f"a user's {name}"):
        mlflow.pyfunc.log_model(
            name="model",
            python_model=WrappedClassifier(classifier),
            input_example=pixels(images[:2]),
            registered_model_name=name,
            pip_requirements=["scikit-learn"],
        )
    return f"models:/{name}/1"


@pytest.fixture(scope="module")
def supplied(store, tmp_path_factory):
    """The target, the calibration model's options, and the held-out query file."""
    splits, folder = load_splits(), tmp_path_factory.mktemp("supplied")
    target, calibration = (
        register_wrapped(name, split.x, split.y)
        for name, split in (("wrapped-target", splits.query("M1")), ("wrapped-calibration", splits.query("M2")))
    )
    held_out = splits.query("M6")
    halves = {"non-members": np.arange(1000), "query": np.arange(1000, 2000)}
    files = {name: str(write_set(held_out.take(rows), folder / f"{name}.npz")) for name, rows in halves.items()}
    members = str(write_set(splits.query("M2"), folder / "calibration-members.npz"))
    options = (
        "--calibration-model",
        calibration,
        "--calibration-members",
        members,
        "--calibration-nonmembers",
        files["non-members"],
    )
    return target, calibration, options, files["query"]


def test_the_supplied_model_calibrates_the_transfer_route_without_a_recipe(supplied):
    target, calibration, options, _ = supplied
    output, ema_verdict = ema_audit("--model", target, "--query", "M1", "--method", "ema+calibrated", *options)
    tags = run_of(output).data.tags
    assert (ema_verdict, tags[f"{keys.TAG_VERDICT}.calibrated"]) == ("memorized", "memorized"), output
    assert tags[keys.TAG_CALIBRATED_ROUTE] == ROUTE_TRANSFER
    assert tags[keys.TAG_CALIBRATION_SOURCE] == "supplied" and tags[keys.TAG_CALIBRATION_VERSION] == calibration
    assert tags[keys.TAG_REFERENCE].startswith(f"file {options[-1]}: 1000 samples"), tags[keys.TAG_REFERENCE]
    assert not MlflowClient().search_registered_models(f"name = '{keys.CALIBRATION_MODEL_NAME}'")


def test_held_out_query_is_not_called_memorized_by_the_supplied_model(supplied):
    target, _, options, query = supplied
    output, ema_verdict = ema_audit("--model", target, "--query-file", query, "--method", "ema+calibrated", *options)
    run = run_of(output)
    assert ema_verdict == "not_memorized", output
    assert run.data.tags[f"{keys.TAG_VERDICT}.calibrated"] != "memorized", output
    assert run.data.metrics["p_removed"] > 0.1


def test_the_transfer_reference_leaves_the_query_out(supplied, tmp_path):
    """The non-member reference of the transfer route, as every other route's, holds none of the query's samples."""
    target, _, options, query = supplied
    whole = str(write_set(load_splits().query("M6"), tmp_path / "M6.npz"))
    output, _ = ema_audit(
        "--model", target, "--query-file", query, "--method", "ema+calibrated", "--reference", whole, *options
    )
    tags = run_of(output).data.tags
    assert tags[keys.TAG_REFERENCE].startswith(f"file {whole}: 1000 samples, 1000 of the query's left out")
    assert tags[keys.TAG_NONMEMBER_REFERENCE] == tags[keys.TAG_REFERENCE].removesuffix(", scored on the target")


def test_power_plans_by_transfer_with_the_supplied_model(supplied):
    target, calibration, options, _ = supplied
    result = CliRunner().invoke(main, ["power", "--model", target, *options, "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "separates members from non-members" in result.output and "transfer route" in result.output
    runs = MlflowClient().search_runs(
        [mlflow.get_experiment_by_name(keys.DEFAULT_EXPERIMENT).experiment_id],
        f"tags.`mlflow.runName` = 'power {target}'",
    )
    assert runs[0].data.tags[keys.TAG_CALIBRATION_VERSION] == calibration


@pytest.mark.parametrize(
    "arguments",
    [
        ["power", "--certify", "--margin", "0.3"],
        ["audit", "--query", "M1", "--calibration-members", "members.npz"],
    ],
    ids=["power --certify", "audit, model missing"],
)
def test_calibration_options_refused_where_they_cannot_apply(supplied, arguments):
    target, _, options, _ = supplied
    extra = options if arguments[0] == "power" else ("--calibration-model", options[1])
    result = CliRunner().invoke(main, [*arguments, "--model", target, *extra, "--no-progress"])
    assert result.exit_code == 2, result.output
    assert "--calibration-model" in result.output


def test_calibration_set_options_are_warned_unread_with_a_supplied_model(supplied):
    """--k and --cal-seed shape the calibration set the workbench's own model trains on: with the user's model
    neither EMA nor the calibrated auditor reads them, and the run says so once."""
    target, _, options, _ = supplied
    output, _ = ema_audit(
        "--model", target, "--query", "M1", "--method", "ema+calibrated", "--k", "50", "--cal-seed", "3", *options
    )
    warnings = [w for w in json.loads(run_of(output).data.tags[keys.TAG_WARNINGS]) if "changed nothing" in w]
    assert len(warnings) == 1 and warnings[0].startswith("--k 50 --cal-seed 3 changed nothing"), warnings
    assert options[1] in warnings[0]


def test_a_member_reference_needs_no_recipe(supplied, tmp_path):
    """The calibrated auditor with a member reference file scores both references on the target itself: no
    calibration model is trained, so a model with no recipe and no clone is audited without one."""
    target, _, options, _ = supplied
    members = load_splits().query("M1")
    files = {
        name: str(write_set(members.take(rows), tmp_path / f"{name}.npz"))
        for name, rows in (("members", np.arange(500)), ("query", np.arange(500, 1000)))
    }
    nonmembers = options[options.index("--calibration-nonmembers") + 1]
    arguments = ("--model", target, "--query-file", files["query"], "--reference", nonmembers)
    refused = CliRunner().invoke(main, ["audit", *arguments, "--method", "ema", "--no-progress"])
    assert refused.exit_code != 0 and "expected a training recipe" in refused.output, refused.output
    result = CliRunner().invoke(
        main, ["audit", *arguments, "--members", files["members"], "--method", "calibrated", "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    tags = run_of(result.output).data.tags
    assert tags[keys.TAG_MEMBER_REFERENCE].startswith(f"file {files['members']}: 500 samples")
    assert keys.TAG_CALIBRATION_SOURCE not in tags


def test_small_classes_of_the_supplied_sets_are_warned(supplied, tmp_path):
    """EMA's thresholds are picked on the supplied members and non-members: a class of a few rows there is said,
    for each set that has one, with the options that would give more."""
    target, _, options, _ = supplied
    members = load_splits().query("M2")
    few = [np.flatnonzero(members.y == c)[:3] for c in (0, 1)]
    rows = np.concatenate([np.flatnonzero((members.y != 0) & (members.y != 1)), *few])
    sparse = str(write_set(members.take(np.sort(rows)), tmp_path / "sparse-members.npz"))
    output, _ = ema_audit("--model", target, "--query", "M1", "--method", "ema", *options[:3], sparse, *options[4:])
    warned = [w for w in json.loads(run_of(output).data.tags[keys.TAG_WARNINGS]) if "rows of each class" in w]
    assert len(warned) == 1, warned
    assert warned[0].startswith(f"calibration set {sparse}: expected at least 10 rows of each class, got fewer in 2")
    assert "(class 0: 3, class 1: 3)" in warned[0] and "--calibration-members and --calibration-nonmembers" in warned[0]


def test_unlearn_of_such_a_model_says_what_it_retrains_and_names_no_option_it_lacks(supplied, tmp_path):
    target, _, options, _ = supplied
    forget = str(write_set(load_splits().query("M1"), tmp_path / "forget.npz"))
    result = CliRunner().invoke(
        main,
        [
            "unlearn",
            "--model",
            target,
            "--method",
            "retrain",
            "--forget",
            forget,
            "--retain",
            options[3],
            "--no-progress",
        ],
    )
    assert result.exit_code == 3, result.output
    assert "expected a training recipe to retrain wrapped-target v1 without the forget set" in result.output
    assert "--recipe" not in result.output and "--calibration-model" not in result.output
