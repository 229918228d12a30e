"""Models that misbehave: a pyfunc whose predict raises or returns strings or objects; MLflow's own reply bytes."""

from __future__ import annotations

import io
import json

import mlflow.pyfunc
import numpy as np
import pandas as pd
import pytest
from mlflow.pyfunc.scoring_server import predictions_to_json

from ema.errors import InputError, ModelAccessError
from ema.oracle import PyfuncOracle, numeric_outputs, parse_reply

PROBA = np.array([[0.25, 0.75], [0.5, 0.5], [1.0, 0.0]])


class Misbehaving(mlflow.pyfunc.PythonModel):
    """Behaves as the first pixel (x 255) of the batch says."""

    def predict(self, context, model_input, params=None):
        n = len(model_input)
        proba = np.tile([0.25, 0.75], (n, 1))
        behaviour = round(float(np.asarray(model_input).reshape(n, -1)[0, 0]) * 255)
        return {
            0: lambda: proba,
            1: lambda: (_ for _ in ()).throw(RuntimeError("weights file missing\nsecond line")),
            2: lambda: np.array(["cat"] * n),
            3: lambda: [{"a": 1}] * n,
            4: lambda: None,
            5: lambda: pd.DataFrame({"p0": proba[:, 0], "p1": proba[:, 1]}),
            6: lambda: pd.DataFrame({"label": ["cat"] * n}),
            7: lambda: [[0.5, 0.5]] + [[1.0]] * (n - 1),
            8: lambda: {"probabilities": list(proba)},
            9: lambda: pd.Series(np.arange(n) % 2),
            10: lambda: np.arange(n) % 2 == 0,
            11: lambda: np.eye(2, dtype=bool)[np.arange(n) % 2],
            12: lambda: pd.DataFrame({"is_cat": np.arange(n) % 2 == 0}),
            13: lambda: (_ for _ in ()).throw(ValueError("X has 32 features, but StandardScaler is expecting 30")),
            14: lambda: (_ for _ in ()).throw(
                RuntimeError("Input type (double) and bias type (float) should be the same")
            ),
        }[behaviour]()


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("misbehaving") / "model"
    mlflow.pyfunc.save_model(path, python_model=Misbehaving(), pip_requirements=[])
    return str(path)


def images(behaviour: int, n: int = 3) -> np.ndarray:
    return np.full((n, 28, 28), behaviour, np.uint8)


@pytest.mark.parametrize(
    ("behaviour", "error", "match"),
    [
        (
            1,
            ModelAccessError,
            r"model '.*' failed on a batch of 3 inputs of shape \(1, 28, 28\): RuntimeError: weights file missing$",
        ),
        (  # refused inputs fail the same way again: exit 3, not the retryable 4
            13,
            InputError,
            r"failed on a batch of 3 inputs .*: ValueError: X has 32 features, but StandardScaler is expecting 30$",
        ),
        (  # torch refusing the inputs' dtype: the same again, whatever the exception's class
            14,
            InputError,
            r"failed on a batch of 3 inputs .*: RuntimeError: Input type \(double\) and bias type \(float\) should be",
        ),
        (2, InputError, r"expected model '.*' to return numbers .*got strings \(dtype <U3, shape \(3,\)\), e.g.*'cat'"),
        (3, InputError, r"expected model '.*' to return numbers .*got Python objects \(dtype object, shape \(3,\)\)"),
        (4, InputError, r"expected model '.*' to return numbers .*got Python objects \(dtype object, shape \(\)\)"),
        (6, InputError, r"expected model '.*' to return numbers .*got strings"),
        (7, InputError, r"expected model '.*' to return numbers .*do not form an array"),
        (10, InputError, r"expected model '.*' to return class probabilities or integer class labels, got booleans"),
        (11, InputError, r"got booleans \(shape \(3, 2\)\), which are neither"),
        (12, InputError, r"got booleans \(shape \(3,\)\), which are neither"),
    ],
)
def test_pyfunc_oracle_refuses_misbehaving_model_with_one_line(model_path, behaviour, error, match):
    oracle = PyfuncOracle(model_path)
    with pytest.raises(error) as excinfo:
        oracle.predict(images(behaviour))
    assert "\n" not in str(excinfo.value)
    assert excinfo.match(match)


@pytest.mark.parametrize("behaviour", [0, 5, 8])
def test_pyfunc_oracle_accepts_arrays_dataframes_and_columns(model_path, behaviour):
    np.testing.assert_allclose(PyfuncOracle(model_path).predict_proba(images(behaviour)), np.tile([0.25, 0.75], (3, 1)))


def test_pyfunc_oracle_reads_a_series_of_labels(model_path):
    predictions = PyfuncOracle(model_path).predict(images(9))
    assert predictions.access == "label-only"


@pytest.mark.parametrize(
    "raw",
    [
        PROBA,
        pd.DataFrame(PROBA),
        pd.DataFrame(PROBA, columns=["cat", "dog"]),
        pd.DataFrame({"probabilities": list(PROBA)}),
        {"0": PROBA[:, 0], "1": PROBA[:, 1]},
    ],
    ids=["ndarray", "DataFrame", "named columns", "vector column", "dict of columns"],
)
def test_parse_reply_reads_what_mlflow_scoring_server_writes(raw):
    """The bytes come from MLflow's own ``predictions_to_json``, as `mlflow models serve` sends them."""
    buffer = io.StringIO()
    predictions_to_json(raw, buffer)
    np.testing.assert_allclose(numeric_outputs(parse_reply(buffer.getvalue().encode())), PROBA)


def test_parse_reply_reads_mlflow_series_of_labels():
    buffer = io.StringIO()
    predictions_to_json(pd.Series([1, 0, 1]), buffer)
    assert json.loads(buffer.getvalue()) == {"predictions": [{"0": 1}, {"0": 0}, {"0": 1}]}
    np.testing.assert_array_equal(numeric_outputs(parse_reply(buffer.getvalue().encode())), [1, 0, 1])
