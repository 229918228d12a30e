"""Models trained, logged and registered in the tests the way each flavor's users do, in one store per module."""

from __future__ import annotations

import json

import mlflow
import mlflow.sklearn
import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.entities import Run
from mlflow.models import infer_signature
from mlflow.tracking import MlflowClient

from ema.data.presets import load_splits
from ema_cli.cli import main
from tests.conftest import module_store

#: MNIST's usual normalisation, as torchvision tutorials apply it.
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


#: A recipe for models the workbench cannot clone (ONNX, served): the estimator the users trained.
MLP_RECIPE = {
    "framework": "sklearn",
    "estimator": "MLPClassifier",
    "params": {"hidden_layer_sizes": [64], "max_iter": 200, "random_state": 0},
}


@pytest.fixture(scope="module")
def store(tmp_path_factory, template_db):
    """A store of its own for the module."""
    with module_store(tmp_path_factory, template_db, "foreign") as uri:
        yield uri


@pytest.fixture(scope="module")
def mlp_recipe(tmp_path_factory) -> str:
    """:data:`MLP_RECIPE` as a recipe file."""
    path = tmp_path_factory.mktemp("recipe") / "recipe.json"
    path.write_text(json.dumps(MLP_RECIPE))
    return str(path)


def run_of(output: str) -> Run:
    """The audit run `ema audit` printed the id of."""
    return MlflowClient().get_run(output.split("(")[1].split("run ")[1].split(")")[0])


@pytest.fixture(scope="module")
def members():
    """Fold M1 of the embedded MNIST splits: what the foreign models are trained on."""
    return load_splits().query("M1")


def pixels(images: np.ndarray) -> np.ndarray:
    """uint8 images as the users' models take them: floats in [0, 1], one row of 784 per image."""
    return images.reshape(len(images), -1).astype(np.float64) / 255.0


def register_sklearn(model, name: str, x: np.ndarray, *, predict_fn: str | None = "predict_proba") -> None:
    """Log and register ``model`` as its users do; ``predict_fn`` None logs the default ``predict``."""
    predicted = getattr(model, predict_fn or "predict")(x[:5])
    options = {"pyfunc_predict_fn": predict_fn} if predict_fn else {}
    with mlflow.start_run(run_name=f"a user's {name}"):
        mlflow.sklearn.log_model(
            model,
            name="model",
            signature=infer_signature(x[:5], predicted),
            registered_model_name=name,
            serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_CLOUDPICKLE,
            pip_requirements=["scikit-learn"],
            **options,
        )


def ema_audit(*options: str) -> tuple[str, str]:
    """Run `ema audit OPTIONS --no-progress`; its output and the verdict it printed for EMA."""
    result = CliRunner().invoke(main, ["audit", *options, "--no-progress"])
    assert result.exit_code == 0, result.output
    verdict = next(line for line in result.output.splitlines() if line.strip().startswith("ema:")).split("-> ")[-1]
    return result.output, verdict.strip()
