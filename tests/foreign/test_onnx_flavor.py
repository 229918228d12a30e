"""A scikit-learn model converted with skl2onnx and logged with `mlflow.onnx`: outputs by name, inputs from the example.

skl2onnx's classifiers return two named outputs, ``output_label`` and ``output_probability``
(a list of ``{class: probability}`` maps; with ``zipmap`` off, ``label`` and ``probabilities``).
The audit reads the probability-like one, or the one ``--output-name`` names.
"""

from __future__ import annotations

import mlflow
import mlflow.onnx
import numpy as np
import pytest
from skl2onnx import to_onnx
from sklearn.neural_network import MLPClassifier

from ema.errors import InputError
from ema.oracle import PyfuncOracle
from tests.foreign.conftest import ema_audit, pixels


@pytest.fixture(scope="module")
def onnx_models(store, members, mlp_recipe):
    """Fit on M1, convert to ONNX with and without zipmap, log with mlflow.onnx (no signature, an input example)."""
    x = pixels(members.x).astype(np.float32)
    estimator = MLPClassifier(hidden_layer_sizes=(64,), max_iter=200, random_state=0).fit(x, members.y)
    with mlflow.start_run(run_name="a user's ONNX export"):
        for name, options in (("user-onnx", None), ("user-onnx-nozipmap", {"zipmap": False})):
            mlflow.onnx.log_model(
                to_onnx(estimator, x[:1], options=options),
                name=name,
                input_example=x[:2],
                registered_model_name=name,
                pip_requirements=["onnxruntime"],
            )
    return estimator, mlp_recipe


def test_onnx_model_audited_through_its_probability_output(onnx_models):
    _, recipe = onnx_models
    _, member = ema_audit("--model", "models:/user-onnx/1", "--recipe", recipe, "--query", "M1")
    _, held_out = ema_audit("--model", "models:/user-onnx/1", "--recipe", recipe, "--query", "M6")
    assert (member, held_out) == ("memorized", "not_memorized")


def test_onnx_outputs_read_by_name_equal_the_estimator(onnx_models, members):
    estimator, _ = onnx_models
    expected = estimator.predict_proba(pixels(members.x[:50]).astype(np.float32))
    for uri in ("models:/user-onnx/1", "models:/user-onnx-nozipmap/1"):
        np.testing.assert_allclose(PyfuncOracle(uri).predict_proba(members.x[:50]), expected, atol=1e-5)
    named = PyfuncOracle("models:/user-onnx-nozipmap/1", output_name="probabilities")
    np.testing.assert_allclose(named.predict_proba(members.x[:50]), expected, atol=1e-5)
    labels = PyfuncOracle("models:/user-onnx-nozipmap/1", output_name="label").predict(members.x[:50])
    assert labels.access == "label-only"


def test_onnx_unknown_output_name_is_refused_naming_the_outputs(onnx_models, members):
    oracle = PyfuncOracle("models:/user-onnx/1", output_name="scores")
    expected = r"output named 'scores', got outputs \['output_label', 'output_probability'\]"
    with pytest.raises(InputError, match=expected):
        oracle.predict(members.x[:5])
