"""ema.engines.batches: what Spark runs on each batch equals what the in-process oracle and auditor do."""

import numpy as np
import pandas as pd
import pytest

from ema.auditors.ema import EMAAuditor
from ema.data.arrays import MODEL_INPUT_SHAPE
from ema.engines.batches import FlagBatch, PrepareBatch
from ema.errors import InputError
from ema.inputs import InputSpec, InputTransform
from ema.oracle import prepare_inputs


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
    (prepared,) = PrepareBatch(transform, spec)(iter([pd.Series([row.tobytes() for row in x])]))
    expected = prepare_inputs(x, transform, spec).reshape(5, -1)
    np.testing.assert_array_equal(np.stack(prepared.to_numpy()), expected)
    assert prepared.iloc[0].dtype == np.float32


def test_prepare_batch_rejects_images_of_another_size():
    with pytest.raises(InputError, match="expected `pixels` of 784 bytes"):
        next(PrepareBatch(InputTransform(), InputSpec(MODEL_INPUT_SHAPE))(iter([pd.Series([b"\x00" * 100])])))


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
