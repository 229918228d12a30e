"""ema.engines.batches: what Spark runs on each batch equals what the in-process oracle and auditor do."""

import numpy as np
import pandas as pd
import pytest

from ema.auditors.ema import EMAAuditor
from ema.data.arrays import MODEL_INPUT_SHAPE, ArraySet
from ema.engines.batches import FlagBatch, PrepareBatch
from ema.errors import InputError
from ema.inputs import InputSpec, InputTransform
from ema.oracle import Oracle, prepare_inputs


class Echo(Oracle):
    """The in-process oracle's input preparation, with a model that returns uniform probabilities."""

    def _predict_batch(self, inputs):
        return np.full((len(inputs), 2), 0.5)


def images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 28, 28), dtype=np.uint8)


@pytest.mark.parametrize(
    "spec, transform",
    [
        (InputSpec(MODEL_INPUT_SHAPE), InputTransform(scale=255.0, mean=0.1, std=0.3)),
        (InputSpec((-1, 28, 28), "uint8"), InputTransform()),  # our models: the pixel values 0-255, in float32
    ],
)
def test_prepare_batch_is_the_oracles_preparation_flattened(spec, transform):
    x = images(5)
    (prepared,) = PrepareBatch(transform, spec)(iter([pixels(x)]))
    expected = prepare_inputs(x, transform, spec).reshape(5, -1)
    np.testing.assert_array_equal(np.stack(prepared.to_numpy()), expected)
    assert prepared.iloc[0].dtype == np.float32


def pixels(x: np.ndarray) -> pd.DataFrame:
    """A batch of a query table's ``pixels`` as Spark hands it to the UDF (a struct: a frame)."""
    return pd.DataFrame({"pixels": [row.tobytes() for row in x]})


def test_prepare_batch_rejects_images_of_another_size():
    with pytest.raises(InputError, match="expected `pixels` of 784 bytes"):
        next(PrepareBatch(InputTransform(), InputSpec(MODEL_INPUT_SHAPE))(iter([pd.DataFrame({"pixels": [b"0"]})])))


def test_prepare_batch_of_colour_images_is_the_oracles_channels_first():
    x = np.random.default_rng(0).integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)
    spec = InputSpec((-1, 3, 32, 32))
    (prepared,) = PrepareBatch(InputTransform(), spec, image_shape=(32, 32, 3))(iter([pixels(x)]))
    np.testing.assert_array_equal(
        np.stack(prepared.to_numpy()), prepare_inputs(x, InputTransform(), spec).reshape(4, -1)
    )


def test_prepare_batch_refuses_images_that_do_not_fit_the_signature_as_in_process():
    x = np.zeros((2, 64, 64, 3), np.uint8)
    spec = InputSpec((-1, 3, 32, 32))
    with pytest.raises(InputError) as in_process:
        Echo(input_spec=spec).predict(x)
    with pytest.raises(InputError) as on_spark:
        next(PrepareBatch(InputTransform(), spec, image_shape=(64, 64, 3))(iter([pixels(x)])))
    assert str(on_spark.value) == str(in_process.value)
    assert "declared input shape (-1, 3, 32, 32), got images of shape (64, 64, 3)" in str(on_spark.value)


def features() -> ArraySet:
    rng = np.random.default_rng(4)
    x = np.column_stack([rng.normal(size=5), rng.integers(0, 9, 5), rng.normal(size=5)])
    return ArraySet("t", x, np.zeros(5, np.int64), np.arange(5, dtype=np.int64), ("a", "n", "extra"))


def test_prepare_batch_of_features_gives_a_tensor_signature_doubles():
    data, spec = features(), InputSpec((-1, 3), "float64")
    batch = pd.DataFrame(data.x, columns=list(data.features))
    prepare = PrepareBatch(InputTransform(), spec, features=data.features)
    (prepared,) = prepare(iter([batch]))
    np.testing.assert_array_equal(np.stack(prepared.to_numpy()), Echo(input_spec=spec).prepare(data.x))
    assert (prepare.input_columns, prepare.output_columns, prepare.array_dtype) == (data.features, None, "float64")


def test_prepare_batch_of_features_gives_a_column_signature_its_columns_and_types():
    data = features()
    spec = InputSpec(dtype="float64", columns=("n", "a"), column_dtypes=("int64", "float64"))
    batch = pd.DataFrame({"n": data.x[:, 1].astype(np.int64), "a": data.x[:, 0]})  # what the driver selects
    prepare = PrepareBatch(InputTransform(), spec, features=("n", "a"))
    (prepared,) = prepare(iter([batch]))
    expected = Echo(input_spec=spec).prepare(Echo(input_spec=spec)._inputs_of(data))  # in-process: aligned by name
    pd.testing.assert_frame_equal(prepared, expected)
    assert prepare.output_columns == (("n", "int64"), ("a", "float64"))
    assert list(prepared.dtypes.astype(str)) == ["int64", "float64"]


@pytest.fixture
def auditor() -> EMAAuditor:
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 10, 400)
    members, nonmembers = rng.dirichlet(np.full(10, 0.1), 400), rng.dirichlet(np.ones(10), 400)
    return EMAAuditor().calibrate(members, labels, nonmembers, labels)


def test_flag_batch_gives_the_in_process_membership_columns(auditor):
    rng = np.random.default_rng(2)
    proba, labels = rng.dirichlet(np.full(10, 0.3), 50).astype(np.float32), rng.integers(0, 10, 50)
    frame = pd.DataFrame({"index": np.arange(50), "label": labels, "outputs": list(proba)})
    (flagged,) = FlagBatch(auditor, "probabilities", 10)(iter([frame]))
    expected = auditor.audit(proba, labels).sample_columns()
    assert list(flagged.columns) == ["index", "label", *expected]
    for name, values in expected.items():
        np.testing.assert_array_equal(flagged[name].to_numpy(), values)


def test_flag_batch_reads_labels_one_hot_over_the_calibrations_classes(auditor):
    frame = pd.DataFrame({"index": [0, 1], "label": [3, 4], "outputs": [np.array([3.0]), np.array([1.0])]})
    (flagged,) = FlagBatch(auditor, "labels", 10)(iter([frame]))
    assert flagged["correctness"].tolist() == [1.0, 0.0]
