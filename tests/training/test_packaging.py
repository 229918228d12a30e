"""Our torch models as pyfunc models from code: exact round trip, no pickled code, weights-only loading."""

import pickle
import shutil
from pathlib import Path

import mlflow
import mlflow.pyfunc
import numpy as np
import pytest
import yaml
from mlflow.exceptions import MlflowException

from ema.tracking.registry import log_and_register
from ema.training.fit import fit, predict_proba
from ema.training.packaging import WEIGHTS, package_torch_model
from ema.training.spec import TrainSpec


@pytest.fixture
def images():
    rng = np.random.default_rng(1)
    return rng.random((40, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 40)


def _python_function_flavor(local: str) -> dict:
    return yaml.safe_load(Path(local, "MLmodel").read_text())["flavors"]["python_function"]


def _logged(spec, images):
    pixels, labels = images
    model = fit(spec, pixels, labels, progress=False)
    mlflow.set_experiment("packaging")
    with mlflow.start_run(), package_torch_model(model, pixels[:2]) as package:
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
def test_logged_model_predicts_exactly_what_the_trained_model_does(store, images, spec):
    model, version = _logged(spec, images)
    loaded = mlflow.pyfunc.load_model(version.uri)
    pixels = images[0]
    np.testing.assert_array_equal(loaded.predict(pixels), predict_proba(model, pixels))
    assert tuple(loaded.metadata.get_input_schema().inputs[0].shape) == (-1, 1, 28, 28)
    assert loaded.predict(pixels[:7]).shape == (7, 10)  # the batch dimension stays free


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
