"""PyfuncOracle warns, as MLflow's own check would, of a model logged for other packages or another Python."""

from __future__ import annotations

import logging
import platform

import mlflow.pyfunc
import numpy as np
import pytest
import yaml
from mlflow.models import ModelSignature
from mlflow.types import Schema, TensorSpec

from ema.oracle import PyfuncOracle

pytestmark = pytest.mark.filterwarnings("ignore:.*An input example was not provided")


class Uniform(mlflow.pyfunc.PythonModel):
    def predict(self, context, model_input, params=None):
        return np.full((len(model_input), 2), 0.5)


def saved_model(path, requirements: list[str], python_version: str | None) -> str:
    """A pyfunc model at ``path`` pinning ``requirements``, its MLmodel claiming ``python_version`` (None: none)."""
    signature = ModelSignature(inputs=Schema([TensorSpec(np.dtype("uint8"), (-1, 28, 28))]))
    mlflow.pyfunc.save_model(path, python_model=Uniform(), signature=signature, pip_requirements=requirements)
    mlmodel = path / "MLmodel"
    meta = yaml.safe_load(mlmodel.read_text())
    if python_version is None:
        del meta["flavors"]["python_function"]["python_version"]
    else:
        meta["flavors"]["python_function"]["python_version"] = python_version
    mlmodel.write_text(yaml.safe_dump(meta))
    return str(path)


def warnings_on_load(caplog, path: str) -> list[str]:
    with caplog.at_level(logging.WARNING, logger="ema.oracle.pyfunc"):
        PyfuncOracle(path)
    return [r.getMessage() for r in caplog.records if r.name == "ema.oracle.pyfunc"]


def test_a_model_for_this_environment_loads_without_a_warning(tmp_path, caplog):
    numpy_pin = f"numpy=={np.__version__}"
    assert warnings_on_load(caplog, saved_model(tmp_path / "m", [numpy_pin], platform.python_version())) == []


@pytest.mark.parametrize(
    "requirements, python_version, named",
    [
        (["numpy==0.0.1"], None, ["numpy==0.0.1 (installed: ", "python unrecorded (running: "]),
        ([], "2.7.18", ["python 2.7.18 (running: "]),
        (["a-package-nobody-installed==1.0"], "same", ["a-package-nobody-installed==1.0 (installed: not installed)"]),
    ],
    ids=["numpy-and-no-python", "old-python", "missing-package"],
)
def test_a_model_for_another_environment_gets_one_warning_naming_each_difference(
    tmp_path, caplog, requirements, python_version, named
):
    python_version = platform.python_version() if python_version == "same" else python_version
    (message,) = warnings_on_load(caplog, saved_model(tmp_path / "m", requirements, python_version))
    assert "was logged for an environment that differs from this one" in message
    assert all(part in message for part in named), message
