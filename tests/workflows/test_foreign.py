"""A scikit-learn model registered by someone else, audited end to end through its pyfunc."""

from __future__ import annotations

import json

import mlflow
import mlflow.sklearn
import numpy as np
import pytest
from mlflow.models import infer_signature
from mlflow.tracking import MlflowClient
from sklearn.neural_network import MLPClassifier

from ema.data.presets import load_splits
from ema.errors import EMAError
from ema.tracking import keys
from ema.tracking.runs import configure
from ema.workflows.audit import AuditConfig, audit
from tests.conftest import open_store

RECIPE = {
    "framework": "sklearn",
    "estimator": "sklearn.neural_network.MLPClassifier",
    "params": {"hidden_layer_sizes": [128], "max_iter": 200, "random_state": 0},
}


def flat(pixels: np.ndarray) -> np.ndarray:
    return pixels.reshape(len(pixels), -1)


@pytest.fixture(scope="module")
def foreign(tmp_path_factory, template_db):
    """Register, as another team would, an MLP trained on fold M1 only: once with predict_proba, once labels-only."""
    directory = tmp_path_factory.mktemp("foreign")
    open_store(directory, template_db)
    configure()
    members = load_splits().query("M1")
    x = flat(members.model_inputs())
    estimator = MLPClassifier(**RECIPE["params"]).fit(x, members.y)
    with mlflow.start_run(run_name="someone else's training"):
        for name, predict_fn in (("foreign-proba", "predict_proba"), ("foreign-labels", "predict")):
            output = getattr(estimator, predict_fn)(x[:5])
            mlflow.sklearn.log_model(
                estimator,
                name=name,
                signature=infer_signature(x[:5], output),
                pyfunc_predict_fn=predict_fn,
                registered_model_name=name,
                serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_CLOUDPICKLE,
                pip_requirements=["scikit-learn"],
            )
    recipe = directory / "recipe.json"
    recipe.write_text(json.dumps(RECIPE))
    return directory, str(recipe)


def test_served_model_without_recipe_is_refused_before_scoring(foreign):
    with pytest.raises(EMAError, match="over HTTP, where its architecture cannot be cloned: pass --recipe FILE"):
        audit(AuditConfig(model_url="http://127.0.0.1:1/invocations", query="M1"), progress=False)


def test_foreign_sklearn_model_training_fold_memorized_held_out_not(foreign):
    _, recipe = foreign
    member = audit(AuditConfig(model_uri="models:/foreign-proba/1", query="M1", recipe_file=recipe), progress=False)
    held_out = audit(AuditConfig(model_uri="models:/foreign-proba/1", query="M6", recipe_file=recipe), progress=False)
    assert member.primary.verdict == "memorized"
    assert held_out.primary.verdict == "not_memorized"
    assert member.access == "probabilities"
    used = MlflowClient().get_run(member.run_id).data.tags[keys.TAG_CALIBRATION_VERSION]  # audits move no alias
    name, version = used.removeprefix("models:/").split("/")
    calibration = MlflowClient().get_model_version(name, version)
    assert json.loads(calibration.tags[keys.TAG_RECIPE])["estimator"] == RECIPE["estimator"]


def test_label_only_model_is_audited_on_correctness_alone(foreign):
    _, recipe = foreign
    outcome = audit(AuditConfig(model_uri="models:/foreign-labels/1", query="M6", recipe_file=recipe), progress=False)
    assert outcome.access == "label-only"
    assert set(outcome.primary.scores) == {"correctness"}
    run = MlflowClient().get_run(outcome.run_id)
    assert run.data.tags[keys.TAG_ACCESS] == "label-only"
    assert "labels" in run.data.tags[keys.TAG_OUTPUTS_DETECTED]


def test_audit_tags_model_version_with_history(foreign):
    _, recipe = foreign
    outcome = audit(AuditConfig(model_uri="models:/foreign-proba/1", query="S", recipe_file=recipe), progress=False)
    tags = MlflowClient().get_model_version("foreign-proba", "1").tags
    trail = [key for key in tags if key.startswith(f"{keys.TAG_AUDIT_PREFIX}S.")]
    assert len(trail) == 1 and trail[0].endswith(f".{outcome.run_id[:8]}")
    record = json.loads(tags[trail[0]])
    assert record["run_id"] == outcome.run_id
    assert record["verdict"] == outcome.primary.verdict
    assert record["rho_ema"] == pytest.approx(outcome.primary.metrics["rho_ema"])
    assert json.loads(tags[keys.TAG_LAST_AUDIT])["query"] == "S"


def test_history_lists_audits_newest_first_and_filters(foreign):
    from click.testing import CliRunner

    from ema_cli.cli import main

    _, recipe = foreign
    first = audit(AuditConfig(model_uri="models:/foreign-proba/1", query="M6", recipe_file=recipe), progress=False)
    second = audit(AuditConfig(model_uri="models:/foreign-proba/1", query="M1", recipe_file=recipe), progress=False)
    result = CliRunner().invoke(main, ["history", "--model", "foreign-proba"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if first.run_id in line or second.run_id in line]
    assert second.run_id in lines[0] and first.run_id in lines[1]
    filtered = CliRunner().invoke(
        main, ["history", "--model", "foreign-proba", "--query", "M1", "--verdict", "memorized"]
    )
    assert second.run_id in filtered.output and first.run_id not in filtered.output
    none = CliRunner().invoke(main, ["history", "--model", "foreign-proba", "--query", "M9", "--verdict", "memorized"])
    assert none.exit_code == 0 and none.output.strip() == (
        "no audits of 'foreign-proba' with query 'M9' and a method's verdict memorized found "
        "(finished ones; --all for every audit)"
    )
    compared = CliRunner().invoke(main, ["compare", first.run_id, second.run_id])
    assert compared.exit_code == 0
    assert "metric rho_ema" in compared.output and first.run_id[:8] in compared.output
    missing = CliRunner().invoke(main, ["compare", "0" * 32])
    assert missing.exit_code == 3 and "does not exist" in missing.output
