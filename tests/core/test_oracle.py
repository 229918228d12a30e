"""Output interpretation, the HTTP payload and the failures of the oracles (no model needed)."""

import json

import numpy as np
import pandas as pd
import pytest

from ema.errors import InputError, ModelAccessError, TimeLimitExceeded
from ema.inputs import InputSpec, InputTransform, to_model_inputs
from ema.oracle import (
    ACCESS_LABEL_ONLY,
    ACCESS_PROBABILITIES,
    IMAGE_INPUT_SHAPE,
    Oracle,
    interpret_outputs,
    request_body,
)


def test_interpret_outputs_detects_labels_and_widens_to_calibration_classes():
    predictions = interpret_outputs(np.array([2, 0, 1]))
    assert predictions.access == ACCESS_LABEL_ONLY
    widened = predictions.with_classes(10)
    assert widened.proba.shape == (3, 10)
    np.testing.assert_array_equal(widened.proba.argmax(axis=1), [2, 0, 1])


def test_interpret_outputs_refuses_logits_with_advice_and_applies_softmax_when_declared():
    logits = np.array([[2.0, -1.0, 0.5], [0.1, 0.2, -3.0]])
    with pytest.raises(InputError, match="--outputs logits"):
        interpret_outputs(logits)
    predictions = interpret_outputs(logits, "logits")
    assert predictions.access == ACCESS_PROBABILITIES
    np.testing.assert_allclose(predictions.proba.sum(axis=1), 1.0)
    assert predictions.proba[0].argmax() == 0


def test_interpret_outputs_declared_labels_on_probabilities_names_the_way_out():
    probabilities = np.full((4, 10), 0.1)
    with pytest.raises(InputError, match=r"got outputs of shape \(4, 10\): .*give --outputs auto .*probabilities"):
        interpret_outputs(probabilities, "labels")
    assert interpret_outputs(probabilities, "auto").access == ACCESS_PROBABILITIES


def test_float32_rounding_below_zero_is_read_as_probabilities_and_declared_logits_on_them_warned(caplog):
    rounded = np.array([[1.0000001, -1.1920929e-07], [0.25, 0.75]], dtype=np.float32)
    predictions = interpret_outputs(rounded)
    assert predictions.access == ACCESS_PROBABILITIES
    assert predictions.proba.min() == 0.0

    class Fixed(Oracle):
        def _predict_batch(self, inputs):
            return rounded[: len(inputs)]

    oracle = Fixed(outputs="logits", batch_size=1)
    for _ in range(2):
        oracle.predict(to_model_inputs(np.zeros((2, 28, 28), dtype=np.uint8)))
    warned = [r for r in caplog.records if "declared logits" in r.getMessage()]
    assert len(warned) == 1 and "--outputs auto" in warned[0].getMessage()


def test_an_integer_pixel_model_refuses_input_scaling_naming_the_scaling_not_options_never_given():
    with pytest.raises(InputError, match=r"got pixels scaled x255 norm 0.5,0.2 \(from --input-scale, --normalize or"):
        Oracle(transform=InputTransform(scale=255.0, mean=0.5, std=0.2), input_spec=InputSpec(dtype="uint8"))
    with pytest.raises(InputError, match=r"got pixels scaled x1 norm 0.485,0.456,0.406,0.229,0.224,0.225 \(from"):
        Oracle(
            transform=InputTransform(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
            input_spec=InputSpec(dtype="uint8"),
        )


def test_with_classes_refuses_labels_beyond_the_calibration():
    with pytest.raises(InputError, match=r"labels in 0..2, got a label 4"):
        interpret_outputs(np.array([4, 0])).with_classes(3)


def test_request_body_writes_uint8_images_as_integers():
    images = np.random.default_rng(0).integers(0, 256, (3, 28, 28)).astype(np.uint8)
    text = request_body(images)
    np.testing.assert_array_equal(np.asarray(json.loads(text)["inputs"], dtype=np.uint8), images)
    assert "." not in text


def test_request_body_round_trips_float32_exactly():
    rng = np.random.default_rng(0)
    inputs = (rng.integers(0, 256, (3, 1, 4, 4)) / 255).astype(np.float32)
    decoded = np.asarray(json.loads(request_body(inputs))["inputs"], dtype=np.float32)
    assert decoded.shape == inputs.shape
    np.testing.assert_array_equal(decoded, inputs)


def test_request_body_round_trips_float64_exactly():
    """A float64 model's inputs (a table, or float32 pixels cast up) reach the server's float64 cast unchanged."""
    inputs = np.concatenate([np.random.default_rng(1).normal(size=(4, 3)), np.float32([[1 / 255, 0.1, 0.7]])])
    decoded = np.asarray(json.loads(request_body(inputs))["inputs"], dtype=np.float64)
    np.testing.assert_array_equal(decoded, inputs)


def test_request_body_of_a_frame_keeps_integer_columns_integers():
    """MLflow's schema enforcement refuses floats (3.0) for a ``long`` column: each column is written by its dtype."""
    frame = pd.DataFrame({"mean radius": [0.123456789012, 2.0], "nodes": np.array([3, 4], dtype=np.int64)})
    payload = json.loads(request_body(frame))["dataframe_split"]
    assert payload["columns"] == ["mean radius", "nodes"]
    assert payload["data"] == [[0.123456789012, 3], [2.0, 4]]
    assert all(isinstance(row[1], int) for row in payload["data"])


class _RecordingOracle(Oracle):
    """Returns each image's mean pixel as a two-class probability, and remembers every batch it was given."""

    def __init__(self, **options):
        super().__init__(**options)
        self.batches = []

    def _predict_batch(self, inputs):
        self.batches.append((inputs.dtype, inputs.shape))
        mean = inputs.reshape(len(inputs), -1).mean(axis=1)
        return np.stack([mean, 1 - mean], axis=1)


def test_uint8_images_are_scored_like_pixels_and_converted_one_batch_at_a_time():
    images = np.random.default_rng(0).integers(0, 256, (10, 28, 28), dtype=np.uint8)
    from_images = _RecordingOracle(batch_size=4, input_spec=InputSpec(IMAGE_INPUT_SHAPE))
    from_pixels = _RecordingOracle(batch_size=4, input_spec=InputSpec(IMAGE_INPUT_SHAPE))
    np.testing.assert_array_equal(from_images.predict_proba(images), from_pixels.predict_proba(to_model_inputs(images)))
    assert from_images.batches == [(np.float32, (4, 1, 28, 28))] * 2 + [(np.float32, (2, 1, 28, 28))]


class _WrongCountOracle(_RecordingOracle):
    def _predict_batch(self, inputs):
        return super()._predict_batch(inputs)[:-1]


def test_outputs_must_match_each_batch_and_an_empty_query_is_refused():
    images = np.zeros((5, 28, 28), dtype=np.uint8)
    with pytest.raises(
        InputError, match=r"expected model outputs of shape \(2, 2\) for a batch of 2 images, got \(1, 2\)"
    ):
        _WrongCountOracle(batch_size=2).predict(images)
    with pytest.raises(InputError, match="at least one image"):
        _RecordingOracle().predict(images[:0])


class _ScriptedOracle(Oracle):
    """Answers each batch with the next of the given outputs."""

    def __init__(self, answers, **options):
        super().__init__(**options)
        self.answers = iter(answers)

    def _predict_batch(self, inputs):
        return next(self.answers)


def test_a_later_batch_of_another_dtype_is_not_cast_to_the_first_batchs():
    oracle = _ScriptedOracle([np.array([[1, 0], [0, 1]]), np.array([[0.25, 0.75]])], batch_size=2)
    np.testing.assert_array_equal(
        oracle.predict_proba(np.zeros((3, 28, 28), dtype=np.uint8)), [[1, 0], [0, 1], [0.25, 0.75]]
    )


def test_uint8_images_must_have_a_known_shape_and_lists_are_accepted():
    with pytest.raises(InputError, match=r"expected `x` as uint8 images .* got uint8 of shape \(2, 28, 28, 7\)"):
        _RecordingOracle().predict(np.zeros((2, 28, 28, 7), dtype=np.uint8))
    assert _RecordingOracle().predict_proba(np.zeros((2, 1, 28, 28)).tolist()).shape == (2, 2)


class _NanRefusingOracle(Oracle):
    """A table model that fails, as an oracle reports a model's own failure, on any batch holding NaN (or on every
    batch: ``always``); it counts its calls."""

    paced = False

    def __init__(self, *, always: bool = False, error: type[Exception] = InputError, **options):
        super().__init__(input_spec=InputSpec(dtype="float64", columns=("a", "b", "c")), batch_size=4, **options)
        self.always, self.error, self.calls = always, error, 0

    def _predict_batch(self, inputs):
        self.calls += 1
        if self.always or inputs.isna().to_numpy().any():
            raise self.error("model 'm' failed: ValueError: Input X contains NaN.")
        return np.full((len(inputs), 2), 0.5)


def _table_with_gaps() -> np.ndarray:
    """Six rows of three numbers: rows 1 and 2 of the first batch of four hold three missing cells, the rest none."""
    x = np.arange(18, dtype=np.float64).reshape(6, 3)
    x[[1, 1, 2], [0, 2, 1]] = np.nan
    return x


def test_predict_says_a_models_failure_on_missing_cells_once_the_rows_without_them_score():
    oracle = _NanRefusingOracle()
    with pytest.raises(InputError) as error:
        oracle.predict(_table_with_gaps())
    assert str(error.value) == (
        "the model failed on rows with missing values: 2 of a batch of 4 rows had 3 missing cells, sent as NaN "
        "(--allow-missing), and the batch's 2 other rows scored; this model does not accept missing values: impute "
        "the table before the audit, or audit a model that accepts NaN (e.g. scikit-learn's "
        "HistGradientBoostingClassifier, or a pipeline that imputes them); its error: model 'm' failed: ValueError: "
        "Input X contains NaN."
    )
    assert isinstance(error.value.__cause__, InputError) and oracle.calls == 2
    every_row = _table_with_gaps()
    every_row[[0, 3], 0] = np.nan
    with pytest.raises(InputError, match=r"4 of a batch of 4 rows had 5 missing cells, .*, and every row of the batch"):
        _NanRefusingOracle(error=ModelAccessError).predict(every_row)


def test_predict_keeps_a_failure_that_is_not_the_missing_cells():
    """The rows without gaps fail as well, the batch had no missing cell, or the failure says nothing of its inputs."""
    fails_anyway = _NanRefusingOracle(always=True)
    with pytest.raises(InputError, match=r"^model 'm' failed: ValueError: Input X contains NaN\.$"):
        fails_anyway.predict(_table_with_gaps())
    assert fails_anyway.calls == 2
    with pytest.raises(ModelAccessError, match=r"^model 'm' failed"):
        _NanRefusingOracle(always=True, error=ModelAccessError).predict(_table_with_gaps()[3:])
    blind = _NanRefusingOracle(error=ModelAccessError)
    blind.input_blind_failures = (ModelAccessError,)
    with pytest.raises(ModelAccessError, match=r"^model 'm' failed"):
        blind.predict(_table_with_gaps())
    assert blind.calls == 1


def test_the_commands_deadline_passing_while_telling_a_failure_on_missing_cells_stops_the_command():
    """The re-score of the rows without gaps runs out the command's --timeout: that, not the model's error, is said."""

    class _Expiring(_NanRefusingOracle):
        def _predict_batch(self, inputs):
            if self.calls == 1:  # the second call, the re-score of the complete rows
                raise TimeLimitExceeded("expected the command to finish within --timeout 5 s")
            return super()._predict_batch(inputs)

    with pytest.raises(TimeLimitExceeded, match="--timeout 5 s"):
        _Expiring().predict(_table_with_gaps())
