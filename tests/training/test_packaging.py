"""Our torch models as pyfunc models from code: exact round trip, no pickled code, weights-only loading."""

import ast
import pickle
import shutil
from pathlib import Path

import mlflow
import mlflow.pyfunc
import numpy as np
import pandas as pd
import pytest
import yaml
from mlflow.exceptions import MlflowException

from ema.inputs import InputTransform, to_model_inputs
from ema.tracking.registry import log_and_register
from ema.training import networks, pyfunc_code
from ema.training.fit import fit, predict_proba
from ema.training.packaging import WEIGHTS, package_torch_model
from ema.training.spec import TrainSpec


@pytest.fixture
def images():
    rng = np.random.default_rng(1)
    return rng.integers(0, 256, (40, 28, 28)).astype(np.uint8), rng.integers(0, 10, 40)


def _python_function_flavor(local: str) -> dict:
    return yaml.safe_load(Path(local, "MLmodel").read_text())["flavors"]["python_function"]


def _logged(spec, images, transform=InputTransform()):
    x, labels = images
    model = fit(spec, transform.apply(to_model_inputs(x)), labels, progress=False)
    mlflow.set_experiment("packaging")
    with mlflow.start_run(), package_torch_model(model, x, transform) as package:
        version = log_and_register(package, name="packed", alias="now", tags={})
    return model, version


@pytest.mark.parametrize(
    "spec",
    [
        TrainSpec(arch="mlp", hidden=(32,), epochs=2),
        TrainSpec(arch="cnn", epochs=1),
        TrainSpec(arch="resnet18", epochs=1, batch_size=32),
    ],
)
def test_logged_model_takes_raw_images_and_predicts_exactly_what_the_trained_model_does(store, images, spec):
    model, version = _logged(spec, images)
    loaded = mlflow.pyfunc.load_model(version.uri)
    x = images[0]
    np.testing.assert_array_equal(loaded.predict(x), predict_proba(model, to_model_inputs(x)))
    schema = loaded.metadata.get_input_schema().inputs[0]
    assert (tuple(schema.shape), schema.type) == ((-1, 28, 28), np.dtype(np.uint8))
    assert loaded.predict(x[:7]).shape == (7, 10)  # the batch dimension stays free
    as_spark_sends_them = pd.DataFrame({"inputs": list(x.reshape(len(x), -1).astype(np.float32))})
    np.testing.assert_array_equal(loaded.predict(as_spark_sends_them), loaded.predict(x))


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float64])
def test_image_inputs_are_the_training_pixels_and_leave_the_callers_array_alone(images, dtype):
    """Scaled in place, but in a copy: a float32 batch handed over as it is must not come back divided by 255."""
    batch = images[0].astype(dtype)
    batch.flags.writeable = dtype != np.float64  # read-only, as from Arrow buffers
    before = batch.copy()
    scaled = networks.image_inputs(batch)
    np.testing.assert_array_equal(scaled.numpy(), to_model_inputs(images[0]))
    np.testing.assert_array_equal(batch, before)


def test_a_recipe_that_scales_its_inputs_keeps_float_pixel_inputs(store, images):
    transform = InputTransform(mean=0.5, std=0.25)
    model, version = _logged(TrainSpec(hidden=(16,), epochs=1), images, transform)
    loaded = mlflow.pyfunc.load_model(version.uri)
    pixels = transform.apply(to_model_inputs(images[0]))
    np.testing.assert_array_equal(loaded.predict(pixels), predict_proba(model, pixels))
    assert loaded.metadata.get_input_schema().inputs[0].type == np.dtype(np.float32)


def test_model_code_and_networks_import_nothing_from_ema():
    for module in (pyfunc_code, networks):
        tree = ast.parse(Path(module.__file__).read_text())
        top_level = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
        names = [alias.name for node in top_level for alias in node.names] + [
            node.module for node in top_level if isinstance(node, ast.ImportFrom)
        ]
        assert not [name for name in names if name and name.split(".")[0] == "ema"], module.__name__


def test_logged_model_holds_no_pickled_code(store, images, tmp_path):
    _, version = _logged(TrainSpec(hidden=(16,), epochs=1), images)
    local = mlflow.artifacts.download_artifacts(version.uri, dst_path=str(tmp_path / "model"))
    flavor = _python_function_flavor(local)
    assert flavor["model_code_path"].endswith("pyfunc_code.py")
    assert "python_model" not in flavor  # no cloudpickled PythonModel
    assert sorted(p.name for p in (tmp_path / "model").rglob("*.pkl")) == []


class _Payload:
    """Unpickling this copies a file: code a state dict must never run."""

    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        return (shutil.copy, ("/dev/null", self.target))


def test_weights_that_carry_code_are_refused_unrun(store, images, tmp_path):
    _, version = _logged(TrainSpec(hidden=(16,), epochs=1), images)
    local = mlflow.artifacts.download_artifacts(version.uri, dst_path=str(tmp_path / "model"))
    flavor = _python_function_flavor(local)
    weights = tmp_path / "model" / flavor["artifacts"][WEIGHTS]["path"]
    marker = tmp_path / "payload-ran"
    weights.write_bytes(pickle.dumps({"network.0.weight": _Payload(marker)}, protocol=2))
    with pytest.raises((MlflowException, pickle.UnpicklingError)) as caught:
        mlflow.pyfunc.load_model(local)
    assert "weights_only" in str(caught.value)
    assert not marker.exists()
    control = tmp_path / "control"
    pickle.loads(pickle.dumps(_Payload(control)))
    assert control.exists()  # the payload is real: plain unpickling runs it
