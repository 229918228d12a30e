"""Parquet request bodies, read back by MLflow's own scoring-server code, and HttpOracle's choice of format."""

from __future__ import annotations

import json

import mlflow.pyfunc
import numpy as np
import pandas as pd
import pytest
from mlflow.models import ModelSignature
from mlflow.pyfunc.scoring_server import CONTENT_TYPE_JSON, CONTENT_TYPE_PARQUET, invocations
from mlflow.types import ColSpec, Schema, TensorSpec

from ema.errors import InputError
from ema.oracle import HttpOracle, encode_request
from ema.oracle.wire_format import CONTENT_TYPES

pytestmark = pytest.mark.filterwarnings("ignore:.*An input example was not provided")


class Echo(mlflow.pyfunc.PythonModel):
    """Returns what the server handed it, one flattened row per sample, with its dtype's name as the last column."""

    def predict(self, context, model_input, params=None):
        if isinstance(model_input, dict):
            (model_input,) = model_input.values()
        values = np.asarray(model_input)
        return pd.DataFrame(values.reshape(len(values), -1).astype(np.float64)).assign(dtype=values.dtype.name)


def served_reply(tmp_path, schema: Schema, body: bytes, content_type: str) -> pd.DataFrame:
    """What MLflow's scoring server answers ``body`` with, for a model declaring ``schema`` (no process, same code)."""
    path = tmp_path / "echo"
    mlflow.pyfunc.save_model(path, python_model=Echo(), signature=ModelSignature(inputs=schema))
    model = mlflow.pyfunc.load_model(str(path))
    response = invocations(body, content_type, model, model.metadata.get_input_schema())
    assert response.status == 200, response.response
    return pd.DataFrame(json.loads(response.response)["predictions"])


TENSORS = {
    "uint8 images": (np.arange(5 * 28 * 28).reshape(5, 28, 28) % 256).astype(np.uint8),
    "float32 pixels": np.random.default_rng(0).random((5, 1, 28, 28), dtype=np.float32),
    "float64 rows": np.random.default_rng(1).random((5, 784)),
}


@pytest.mark.parametrize("name", sorted(TENSORS))
@pytest.mark.parametrize("tensor_name", [None, "images"])
def test_a_parquet_body_reaches_the_model_as_the_same_tensor(tmp_path, name, tensor_name):
    inputs = TENSORS[name]
    schema = Schema([TensorSpec(inputs.dtype, (-1, *inputs.shape[1:]), name=tensor_name)])
    reply = served_reply(tmp_path, schema, encode_request(inputs, "parquet", tensor_name), CONTENT_TYPE_PARQUET)
    assert set(reply.pop("dtype")) == {inputs.dtype.name}
    np.testing.assert_array_equal(reply.to_numpy(), inputs.reshape(len(inputs), -1).astype(np.float64))


def test_a_parquet_body_reaches_a_column_signature_as_the_same_columns(tmp_path):
    frame = pd.DataFrame(TENSORS["float64 rows"][:, :6], columns=[f"px{i}" for i in range(6)])
    schema = Schema([ColSpec("double", column) for column in frame.columns])
    reply = served_reply(tmp_path, schema, encode_request(frame, "parquet"), CONTENT_TYPE_PARQUET)
    assert set(reply.pop("dtype")) == {"float64"}
    np.testing.assert_array_equal(reply.to_numpy(), frame.to_numpy())


def test_json_and_parquet_bodies_give_the_same_reply(tmp_path):
    inputs = TENSORS["uint8 images"]
    schema = Schema([TensorSpec(inputs.dtype, (-1, 28, 28))])
    replies = [
        served_reply(tmp_path / fmt, schema, encode_request(inputs, fmt), CONTENT_TYPES[fmt])
        for fmt in ("json", "parquet")
    ]
    assert CONTENT_TYPES == {"json": CONTENT_TYPE_JSON, "parquet": CONTENT_TYPE_PARQUET}
    pd.testing.assert_frame_equal(*replies)


@pytest.mark.parametrize("request_format", ["json", "parquet"])
def test_missing_cells_reach_the_model_as_nan_in_json_and_parquet_bodies(tmp_path, request_format):
    """JSON has no NaN: a missing cell goes as null, which MLflow's scoring server reads back as NaN in a double
    column; Parquet carries it as it is."""
    frame = pd.DataFrame({"a": [1.5, np.nan, 0.25], "b": [np.nan, np.nan, 2.0]})
    body = encode_request(frame, request_format)
    if request_format == "json":
        assert json.loads(body)["dataframe_split"]["data"] == [[1.5, None], [None, None], [0.25, 2.0]]
    schema = Schema([ColSpec("double", column) for column in frame.columns])
    reply = served_reply(tmp_path, schema, body, CONTENT_TYPES[request_format])
    assert set(reply.pop("dtype")) == {"float64"}
    np.testing.assert_array_equal(reply.to_numpy(dtype=np.float64), frame.to_numpy())


def test_request_format_must_be_known():
    with pytest.raises(InputError, match=r"expected request format in \('auto', 'json', 'parquet'\), got 'csv'"):
        HttpOracle("http://127.0.0.1:1/invocations", request_format="csv")


def test_an_audit_refuses_an_unknown_http_format_before_any_work():
    from ema.workflows.audit_config import AuditConfig

    with pytest.raises(InputError, match=r"expected HTTP format in \('auto', 'json', 'parquet'\), got 'xml'"):
        AuditConfig(model_url="http://127.0.0.1:1/invocations", query="M6", http_format="xml").validate()


def test_a_table_for_a_server_of_unknown_names_goes_by_its_own_names_integers_decided_per_set():
    from ema.data.arrays import ArraySet

    oracle = HttpOracle("http://127.0.0.1:9/invocations", table_names=True)
    x = np.array([[1.0, 0.5], [2.0, 1.5], [3.0, 2.0]])
    table = ArraySet("t", x, np.zeros(3, np.int64), np.arange(3), ("age", "dose"))
    frame = oracle.prepare(oracle._inputs_of(table))
    assert list(frame.columns) == ["age", "dose"] and list(frame.dtypes.astype(str)) == ["int64", "float64"]
    fractional = ArraySet("u", x + np.array([0.5, 0.0]), np.zeros(3, np.int64), np.arange(3), ("age", "dose"))
    assert list(oracle.prepare(oracle._inputs_of(fractional)).dtypes.astype(str)) == ["float64", "float64"]
    by_position = HttpOracle("http://127.0.0.1:9/invocations")
    assert isinstance(by_position.prepare(by_position._inputs_of(table)), np.ndarray)
