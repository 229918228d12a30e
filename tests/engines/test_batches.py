"""ema.engines.batches: what Spark runs on each batch equals what the in-process oracle and auditor do."""

import numpy as np
import pandas as pd
import pytest

from ema.auditors.ema import EMAAuditor
from ema.data.arrays import MODEL_INPUT_SHAPE, ArraySet
from ema.data.sources.images import resize_set
from ema.engines.batches import AuditBatch
from ema.errors import InputError
from ema.inputs import InputSpec, InputTransform
from ema.oracle import Oracle


class Linear(Oracle):
    """A model whose probabilities are a softmax of a fixed projection of exactly the inputs it is handed."""

    def _predict_batch(self, inputs):
        values = inputs.to_numpy(dtype=np.float64) if isinstance(inputs, pd.DataFrame) else inputs
        flat = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
        logits = flat @ np.random.default_rng(flat.shape[1]).normal(size=(flat.shape[1], 10)) / flat.shape[1]
        logits -= logits.max(axis=1, keepdims=True)
        return np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)


class FixedLabels(Oracle):
    def _predict_batch(self, inputs):
        return np.array([3, 5])[: len(inputs)]


@pytest.fixture
def auditor() -> EMAAuditor:
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 10, 400)
    members, nonmembers = rng.dirichlet(np.full(10, 0.1), 400), rng.dirichlet(np.ones(10), 400)
    return EMAAuditor().calibrate(members, labels, nonmembers, labels)


def images(n: int, shape=(28, 28), seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, *shape), dtype=np.uint8)


def image_rows(x: np.ndarray, labels: np.ndarray) -> pd.DataFrame:
    """A batch of an image table as Spark hands it to the job: index, label, the pixels' bytes."""
    return pd.DataFrame({"index": np.arange(len(x)) + 100, "label": labels, "pixels": [row.tobytes() for row in x]})


def assert_in_process_columns(flagged: pd.DataFrame, oracle: Oracle, auditor, inputs, labels):
    expected = auditor.audit(oracle.predict(inputs).with_classes(10).proba, labels).sample_columns()
    assert list(flagged.columns) == ["index", "label", *expected]
    for name, values in expected.items():
        np.testing.assert_array_equal(flagged[name].to_numpy(), values)


@pytest.mark.parametrize(
    ("spec", "transform", "shape"),
    [
        (InputSpec(MODEL_INPUT_SHAPE), InputTransform(scale=255.0, mean=0.1, std=0.3), (28, 28)),
        (InputSpec((-1, 28, 28), "uint8"), InputTransform(), (28, 28)),  # our models: the pixel values 0-255
        (InputSpec((-1, 3, 32, 32)), InputTransform(), (32, 32, 3)),  # colour, channels first
        (InputSpec((-1, 3072), pixel_order="hwc"), InputTransform(), (32, 32, 3)),  # colour, flattened pixel by pixel
    ],
)
def test_audit_batch_gives_the_in_process_membership_columns(auditor, spec, transform, shape):
    x, labels = images(40, shape), np.random.default_rng(2).integers(0, 10, 40)
    oracle = Linear(input_spec=spec, transform=transform, outputs="probabilities")
    image_shape = (*shape, 1)[:3]
    batch = AuditBatch(lambda: oracle, auditor, 10, image_shape=image_shape)
    (flagged,) = batch(iter([image_rows(x, labels)]))
    assert flagged["index"].tolist() == list(range(100, 140))
    assert_in_process_columns(flagged, oracle, auditor, x, labels)


def test_audit_batch_rejects_images_of_another_size(auditor):
    batch = AuditBatch(lambda: Linear(), auditor, 10)
    frame = pd.DataFrame({"index": [0], "label": [0], "pixels": [b"0"]})
    with pytest.raises(InputError, match="expected `pixels` of 784 bytes"):
        next(batch(iter([frame])))


def test_audit_batch_refuses_images_that_do_not_fit_the_signature_as_in_process(auditor):
    x, oracle = np.zeros((2, 64, 64, 3), np.uint8), Linear(input_spec=InputSpec((-1, 3, 32, 32)))
    with pytest.raises(InputError) as in_process:
        oracle.predict(x)
    with pytest.raises(InputError) as on_spark:
        next(AuditBatch(lambda: oracle, auditor, 10, image_shape=(64, 64, 3))(iter([image_rows(x, [0, 1])])))
    assert str(on_spark.value) == str(in_process.value)
    assert "declared input shape (-1, 3, 32, 32), got images of shape (64, 64, 3)" in str(on_spark.value)


def features() -> ArraySet:
    rng = np.random.default_rng(4)
    x = np.column_stack([rng.normal(size=5), rng.integers(0, 9, 5), rng.normal(size=5)])
    return ArraySet("t", x, np.arange(5, dtype=np.int64), np.arange(5, dtype=np.int64), ("a", "n", "extra"))


@pytest.mark.parametrize(
    ("spec", "selected"),
    [
        (InputSpec((-1, 3), "float64"), ("a", "n", "extra")),  # a tensor signature: every feature, in order
        (InputSpec(dtype="float64", columns=("n", "a"), column_dtypes=("int64", "float64")), ("n", "a")),
    ],
)
def test_audit_batch_of_features_gives_the_model_the_in_process_inputs(auditor, spec, selected):
    data = features()
    frame = pd.DataFrame(data.x, columns=list(data.features)).assign(index=data.index, label=data.y)
    oracle = Linear(input_spec=spec, outputs="probabilities")
    batch = AuditBatch(lambda: oracle, auditor, 10, features=selected)
    (flagged,) = batch(iter([frame[["index", "label", *selected]]]))
    assert_in_process_columns(flagged, oracle, auditor, data, data.y)  # in-process: the set, aligned by name


def test_audit_batch_of_features_sends_missing_cells_as_nan_only_where_allowed(auditor):
    """On Spark as in-process: a batch's missing numbers are refused, unless ``--allow-missing`` lets them through."""
    data = features()
    x = data.x.copy()
    x[1, 0] = np.nan
    frame = pd.DataFrame(x, columns=list(data.features)).assign(index=data.index, label=data.y)
    oracle = Imputing(input_spec=InputSpec((-1, 3), "float64"), outputs="probabilities")
    with pytest.raises(InputError, match=r"got 1 missing .*pass --allow-missing"):
        next(AuditBatch(lambda: oracle, auditor, 10, features=data.features)(iter([frame])))
    (flagged,) = AuditBatch(lambda: oracle, auditor, 10, features=data.features, allow_missing=True)(iter([frame]))
    holed = ArraySet("t", x, data.y, data.index, data.features)
    assert_in_process_columns(flagged, oracle, auditor, holed, data.y)


class Imputing(Linear):
    """:class:`Linear` of its inputs with each missing cell replaced by 0, as a pipeline's imputer would."""

    def _predict_batch(self, inputs):
        return super()._predict_batch(np.nan_to_num(np.asarray(inputs, dtype=np.float64)))


def test_audit_batch_reads_labels_one_hot_over_the_calibrations_classes(auditor):
    batch = AuditBatch(lambda: FixedLabels(outputs="labels"), auditor, 10)
    (flagged,) = batch(iter([image_rows(images(2), np.array([3, 4]))]))
    assert flagged["correctness"].tolist() == [1.0, 0.0]


def test_audit_batch_resizes_images_as_image_size_does_in_process(auditor):
    x, labels = images(6, (32, 32)), np.arange(6)
    oracle = Linear(outputs="probabilities")
    batch = AuditBatch(lambda: oracle, auditor, 10, image_shape=(32, 32, 1), image_size=28)
    (flagged,) = batch(iter([image_rows(x, labels)]))
    resized = resize_set(ArraySet("q", x, labels, np.arange(6, dtype=np.int64)), 28)
    assert_in_process_columns(flagged, oracle, auditor, resized.x, labels)
