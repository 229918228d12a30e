"""A model only reachable over HTTP (`mlflow models serve`): audited with `--model-url` and `--input-shape`.

Nothing is looked up in the registry (no `--model`); the calibration model comes from a recipe,
since over HTTP the target's architecture cannot be cloned.
"""

from __future__ import annotations

import mlflow
import mlflow.sklearn
import pytest
from mlflow.models import infer_signature
from sklearn.neural_network import MLPClassifier

from ema.tracking import keys
from tests.foreign.conftest import ema_audit, pixels, run_of
from tests.workflows.test_serving import free_port, serve, stop

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(store, members, mlp_recipe):
    """An MLP trained on M1, logged with a float64 (n, 784) signature, served on 127.0.0.1; its URL and a recipe."""
    x = pixels(members.x)
    estimator = MLPClassifier(hidden_layer_sizes=(64,), max_iter=200, random_state=0).fit(x, members.y)
    with mlflow.start_run(run_name="a served model"):
        info = mlflow.sklearn.log_model(
            estimator,
            name="model",
            signature=infer_signature(x[:5], estimator.predict_proba(x[:5])),
            pyfunc_predict_fn="predict_proba",
            serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_CLOUDPICKLE,
            pip_requirements=["scikit-learn"],
        )
    port = free_port()
    process = serve(info.model_uri, port)
    yield f"http://127.0.0.1:{port}/invocations", mlp_recipe
    stop(process)


def test_served_model_audited_with_model_url_and_input_shape_only(served):
    url, recipe = served
    options = ("--model-url", url, "--input-shape", "784", "--recipe", recipe)
    _, member = ema_audit(*options, "--query", "M1")
    output, held_out = ema_audit(*options, "--query", "M6")
    assert (member, held_out) == ("memorized", "not_memorized")
    run = run_of(output)
    assert run.data.params[keys.PARAM_MODEL_URI] == "" and run.data.params[keys.PARAM_MODEL_URL] == url
    assert run.data.params[keys.PARAM_INPUT_SHAPE] == "-1,784"
    assert run.data.tags[keys.TAG_CALIBRATION_SOURCE] == "recipe"


def test_served_model_without_input_shape_gets_the_servers_reason_on_one_line(served):
    url, recipe = served
    from click.testing import CliRunner

    from ema_cli.cli import main

    result = CliRunner().invoke(main, ["audit", "--model-url", url, "--recipe", recipe, "--query", "M6"])
    assert result.exit_code == 3  # the server refused the input (HTTP 400): an InputError, not a retry
    assert "HTTP 400" in result.output and len(result.output.strip().splitlines()) == 1
