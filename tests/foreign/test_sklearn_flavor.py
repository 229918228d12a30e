"""A scikit-learn Pipeline(StandardScaler, MLPClassifier) logged with `mlflow.sklearn.log_model`, with no recipe.

Its calibration model is ``sklearn.base.clone`` of the loaded Pipeline. Logged twice: with a
float64 tensor signature (n, 784), and with a column-based one (a DataFrame of 784 pixel columns).
"""

from __future__ import annotations

import json

import mlflow
import mlflow.sklearn
import numpy as np
import pandas as pd
import pytest
from mlflow.models import infer_signature
from mlflow.tracking import MlflowClient
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from ema.tracking import keys
from ema.workflows.audit import AuditConfig, audit
from tests.foreign.conftest import ema_audit, pixels, register_sklearn

COLUMNS = [f"pixel{i}" for i in range(784)]


@pytest.fixture(scope="module")
def pipeline(store, members):
    """Fit on M1's pixels (float64, [0, 1]); register with a tensor signature and with a column signature."""
    x = pixels(members.x)
    model = Pipeline(
        [("scale", StandardScaler()), ("mlp", MLPClassifier(hidden_layer_sizes=(64,), max_iter=200, random_state=0))]
    ).fit(x, members.y)
    frame = pd.DataFrame(x[:5], columns=COLUMNS)
    with mlflow.start_run(run_name="a user's pipeline"):
        for name, example in (("user-pipeline", x[:5]), ("user-pipeline-columns", frame)):
            mlflow.sklearn.log_model(
                model,
                name=name,
                signature=infer_signature(example, model.predict_proba(example)),
                pyfunc_predict_fn="predict_proba",
                registered_model_name=name,
                serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_CLOUDPICKLE,
                pip_requirements=["scikit-learn"],
            )
    return model


def test_pipeline_with_float64_signature_audited_without_recipe(pipeline):
    _, member = ema_audit("--model", "models:/user-pipeline/1", "--query", "M1")
    _, held_out = ema_audit("--model", "models:/user-pipeline/1", "--query", "M6")
    assert (member, held_out) == ("memorized", "not_memorized")


def test_pipeline_calibration_model_is_a_clone_of_the_pipeline(pipeline):
    outcome = audit(AuditConfig(model_uri="models:/user-pipeline/1", query="M1"), progress=False)
    tags = MlflowClient().get_run(outcome.run_id).data.tags
    assert tags[keys.TAG_CALIBRATION_SOURCE] == "clone"
    name, version = tags[keys.TAG_CALIBRATION_VERSION].removeprefix("models:/").split("/")
    clone = mlflow.sklearn.load_model(f"models:/{name}/{version}")
    assert [step for step, _ in clone.steps] == ["scale", "mlp"]
    assert clone.get_params()["mlp__hidden_layer_sizes"] == (64,)
    assert json.loads(MlflowClient().get_model_version(name, version).tags[keys.TAG_RECIPE])["framework"] == (
        "sklearn-clone"
    )


def test_pipeline_with_column_signature_gets_a_dataframe_of_its_columns(pipeline):
    tensor = audit(AuditConfig(model_uri="models:/user-pipeline/1", query="M6"), progress=False)
    columns = audit(AuditConfig(model_uri="models:/user-pipeline-columns/1", query="M6"), progress=False)
    assert columns.primary.verdict == tensor.primary.verdict
    assert columns.primary.metrics["flag_rate"] == pytest.approx(tensor.primary.metrics["flag_rate"])


def test_model_trained_on_0_255_pixels_gets_the_scaling_suggested(store, members):
    """Poor accuracy under [0, 1] pixels: the warning names --input-scale 255, and the audit did not switch."""
    x = members.x.reshape(len(members), -1).astype(np.float64)
    model = MLPClassifier(hidden_layer_sizes=(32,), max_iter=50, random_state=0).fit(x, members.y)
    register_sklearn(model, "user-raw-pixels", x)
    outcome = audit(AuditConfig(model_uri="models:/user-raw-pixels/1", query="M6"), progress=False)
    suggestion = [w for w in outcome.warnings if "rerun with" in w]
    assert len(suggestion) == 1 and "rerun with --input-scale 255 if so (the audit did not switch)" in suggestion[0]
    assert outcome.withheld == tuple(suggestion)  # far better under 0-255: no verdict on a model fed other inputs
    assert outcome.primary.verdict == "inconclusive"
    tags = MlflowClient().get_run(outcome.run_id).data.tags
    assert tags[keys.TAG_WITHHELD] == suggestion[0] and tags[keys.TAG_VERDICT] == "inconclusive"
