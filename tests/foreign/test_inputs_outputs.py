"""Inputs shaped and typed as a model declares them, outputs read in every form a flavor returns (no store needed)."""

from __future__ import annotations

import json
import re
import types

import mlflow.pyfunc
import numpy as np
import pandas as pd
import pytest
from mlflow.models import infer_signature

from ema.errors import InputError
from ema.image_shapes import parse_input_shape
from ema.input_transform import IMAGENET_NORMALIZE, parse_normalize
from ema.inputs import InputSpec, InputTransform
from ema.oracle import Oracle, numeric_outputs, parse_reply
from ema.oracle.model_info import input_spec_from
from ema.oracle.pyfunc import schema_reason
from ema.oracle.wire_format import server_message
from ema.workflows.input_scaling import scaling_suggestion

IMAGES = np.random.default_rng(0).integers(0, 256, (6, 28, 28), dtype=np.uint8)
PROBA = np.array([[0.2, 0.8], [0.6, 0.4]])


class Echo(Oracle):
    """Returns what it was given, so that the prepared inputs can be inspected."""

    def _predict_batch(self, inputs):
        self.seen = inputs
        return np.full((len(inputs), 2), 0.5)


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((-1, 784), "float64"), ((-1, 28, 28), "float32"), ((-1, 1, 28, 28), "float32"), ((-1, 28, 28, 1), "float64")],
)
def test_prepare_casts_and_reshapes_to_the_declared_tensor(shape, dtype):
    oracle = Echo(input_spec=InputSpec(shape, dtype))
    oracle.predict(IMAGES)
    assert oracle.seen.shape == (6, *shape[1:]) and oracle.seen.dtype == np.dtype(dtype)
    np.testing.assert_allclose(oracle.seen.reshape(6, -1), IMAGES.reshape(6, -1) / 255.0, rtol=1e-6)


def test_prepare_gives_integer_pixels_to_a_model_that_takes_uint8():
    oracle = Echo(input_spec=InputSpec((-1, 28, 28), "uint8"))
    oracle.predict(IMAGES)
    np.testing.assert_array_equal(oracle.seen, IMAGES)
    oracle.predict(IMAGES.astype(np.float32)[:, None] / 255)  # pixels in [0, 1] go back to 0-255
    np.testing.assert_array_equal(oracle.seen, IMAGES)
    with pytest.raises(InputError, match="no input scaling for a model that takes integer pixels"):
        Echo(input_spec=InputSpec((-1, 28, 28), "uint8"), transform=InputTransform(scale=255.0))


def test_prepare_builds_a_dataframe_of_the_signatures_columns():
    columns = tuple(f"pixel{i}" for i in range(784))
    oracle = Echo(input_spec=InputSpec(dtype="float64", columns=columns), transform=InputTransform(scale=255.0))
    oracle.predict(IMAGES)
    assert isinstance(oracle.seen, pd.DataFrame) and tuple(oracle.seen.columns) == columns
    assert (oracle.seen.dtypes == np.float64).all()
    np.testing.assert_allclose(oracle.seen.to_numpy(), IMAGES.reshape(6, -1), rtol=1e-6)


def test_prepare_refuses_a_shape_that_does_not_fit_with_the_fix():
    with pytest.raises(InputError, match=r"declared input shape \(-1, 3, 32, 32\).*3-channel.*--image-size"):
        Echo(input_spec=InputSpec((-1, 3, 32, 32))).predict(IMAGES)


def test_input_spec_from_tensor_and_column_signatures_and_examples():
    flat = np.zeros((2, 784))
    assert input_spec_from(infer_signature(flat).inputs) == InputSpec((-1, 784), "float64")
    frame = pd.DataFrame(flat, columns=[f"p{i}" for i in range(784)])
    spec = input_spec_from(infer_signature(frame).inputs)
    assert spec.columns[:2] == ("p0", "p1") and spec.dtype == "float64" and spec.shape == (-1, 784)
    assert input_spec_from(None, np.zeros((2, 28, 28), np.uint8)) == InputSpec((-1, 28, 28), "uint8")
    assert input_spec_from(None, None) is None
    mixed = input_spec_from(infer_signature(pd.DataFrame({"a": [1.5], "n": [2]})).inputs)
    assert (mixed.dtype, mixed.column_dtypes) == ("float64", ("float64", "int64"))
    text = input_spec_from(infer_signature(pd.DataFrame({"a": [1.0], "b": ["x"]})).inputs)
    assert (text.dtype, text.column_dtypes, text.declared_text().tolist()) == ("float64", ("float64", "str"), [0, 1])
    assert input_spec_from(None, pd.DataFrame({"b": ["x"]})).dtype == "str"  # an input example's text
    with pytest.raises(InputError, match=r"numeric or text columns .* got 1 of another type: 'when' \(datetime64"):
        input_spec_from(infer_signature(pd.DataFrame({"a": [1.0], "when": pd.to_datetime(["2026-01-01"])})).inputs)


def test_a_variable_size_channels_last_signature_gets_images_channels_last_at_their_own_size():
    from mlflow.types.schema import Schema, TensorSpec

    spec = input_spec_from(Schema([TensorSpec(np.dtype("float32"), (-1, -1, -1, 3))]))
    assert (spec.shape, spec.channels_last, spec.describe()) == (None, 3, "float32 (-1, height, width, 3)")
    colour = np.random.default_rng(1).integers(0, 256, (2, 20, 24, 3), dtype=np.uint8)
    oracle = Echo(input_spec=spec)
    oracle.predict(colour)
    assert oracle.seen.shape == (2, 20, 24, 3) and oracle.seen.dtype == np.float32
    np.testing.assert_allclose(oracle.seen, colour / 255.0, rtol=1e-6)
    integers = input_spec_from(Schema([TensorSpec(np.dtype("uint8"), (-1, -1, -1, 1))]))
    np.testing.assert_array_equal(Echo(input_spec=integers).prepare(colour[..., 0]), colour[..., :1])
    with pytest.raises(InputError, match=r"shape \(-1, -1, -1, 3\), got images of shape \(20, 24\); .*np.repeat"):
        oracle.predict(colour[..., 0])
    assert input_spec_from(Schema([TensorSpec(np.dtype("float32"), (-1, -1, -1, 5))])).channels_last is None


def test_input_shape_overrides_a_variable_size_signature_and_is_refused_for_columns():
    from ema.workflows.target import with_declared

    given = with_declared(InputSpec(channels_last=3), (-1, 3, 20, 24), None)
    assert (given.shape, given.channels_last) == ((-1, 3, 20, 24), None)
    columns = InputSpec(dtype="float64", columns=("a", "b"))
    assert with_declared(columns, None, "float32").columns == ("a", "b")
    with pytest.raises(InputError, match=r"--input-shape only for a model that takes a tensor, got .* 2 float64 col"):
        with_declared(columns, (-1, 2), None)


def test_a_signature_of_binary_columns_is_refused_as_encoded_files_with_no_option_advised():
    from mlflow.types.schema import ColSpec, Schema

    with pytest.raises(InputError) as refused:
        input_spec_from(Schema([ColSpec("binary", "image")]))
    message = str(refused.value)
    assert "1 binary column(s) ('image')" in message and "encoded image files" in message
    assert "wrap the model in a pyfunc whose predict takes uint8 pixels" in message
    assert "--input-shape" not in message and "--image-size" not in message


def test_parse_input_shape_accepts_sizes_after_the_batch():
    assert parse_input_shape("784") == (-1, 784)
    assert parse_input_shape("-1,1,28,28") == (-1, 1, 28, 28)
    with pytest.raises(InputError, match="expected --input-shape as comma-separated sizes"):
        parse_input_shape("28x28")
    with pytest.raises(InputError, match="positive sizes"):
        parse_input_shape("0,28")


def test_named_outputs_pick_the_probability_like_one():
    outputs = {"label": np.array([1, 0]), "probabilities": PROBA.astype(np.float32)}
    np.testing.assert_allclose(numeric_outputs(outputs), PROBA, rtol=1e-6)
    np.testing.assert_array_equal(numeric_outputs(outputs, output_name="label"), [1, 0])
    logits = {"label": np.array([1, 0]), "logits": np.array([[0.0, 3.0], [2.0, -1.0]])}
    np.testing.assert_array_equal(numeric_outputs(logits), logits["logits"])


def test_zipmap_class_maps_become_rows_ordered_by_class():
    maps = [{1: 0.8, 0: 0.2}, {0: 0.6, 1: 0.4}]
    np.testing.assert_allclose(numeric_outputs({"output_label": [1, 0], "output_probability": maps}), PROBA)
    over_json = parse_reply(
        b'{"predictions": {"output_label": [1, 0], "output_probability": [{"0": 0.2, "1": 0.8}, {"0": 0.6, "1": 0.4}]}}'
    )
    np.testing.assert_allclose(numeric_outputs(over_json), PROBA)


def test_class_maps_of_named_classes_are_ordered_as_scikit_learn_sorts_them():
    maps = [{"dog": 0.1, "cat": 0.7, "bird": 0.2}, {"bird": 0.5, "dog": 0.5, "cat": 0.0}]
    outputs = numeric_outputs({"output_label": ["cat", "bird"], "output_probability": maps})
    np.testing.assert_allclose(outputs, [[0.2, 0.7, 0.1], [0.5, 0.0, 0.5]])
    with pytest.raises(InputError, match=r"classes \['bird', 'cat', 'dog'\], got another set"):
        numeric_outputs([maps[0], {"bird": 0.5, "cat": 0.5}])
    over_json = numeric_outputs([{"-1": 0.1, "-2": 0.9, "10": 0.0}, {"10": 1.0, "-2": 0.0, "-1": 0.0}])
    np.testing.assert_allclose(over_json, [[0.9, 0.1, 0.0], [0.0, 0.0, 1.0]])  # by value: -2, -1, 10
    for records in (
        [{"label": 0, "score": 0.93}, {"label": 1, "score": 0.61}],  # a pipeline's top class: no probabilities
        [{"label": 0, "score": 1.0}, {"label": 1, "score": 0.0}],  # the same, whose numbers sum to 1
    ):
        with pytest.raises(InputError, match="Python objects"):
            numeric_outputs(records)


def test_dataframe_outputs_in_records_and_columns():
    frame = pd.DataFrame(PROBA, columns=["class_0", "class_1"])
    np.testing.assert_allclose(numeric_outputs(frame), PROBA)
    np.testing.assert_allclose(
        numeric_outputs(parse_reply(frame.to_json(orient="records").join(['{"predictions":', "}"]).encode())), PROBA
    )
    np.testing.assert_array_equal(numeric_outputs(pd.DataFrame({"label": [1, 0]})), [1, 0])


def test_ambiguous_named_outputs_ask_for_output_name():
    outputs = {"a": PROBA, "b": PROBA[::-1], "label": np.array([1, 0])}
    with pytest.raises(
        InputError, match=r"one probability-like output among its outputs \['a', 'b', 'label'\].*--output-name"
    ):
        numeric_outputs(outputs)
    with pytest.raises(InputError, match="output named 'c'"):
        numeric_outputs(outputs, output_name="c")


def test_schema_reason_is_mlflows_whole_reason_on_one_line():
    from mlflow.exceptions import MlflowException

    data = "\n".join(["[[0.1 0.2 ... 0.3]"] * 50)
    exc = MlflowException(
        f"Failed to enforce schema of data '{data}' with schema '[Tensor('float64', (-1, 784))]'. Error: dtype of "
        "input float32 does not match\nexpected dtype float64"
    )
    assert schema_reason(exc) == "dtype of input float32 does not match expected dtype float64"


def test_a_scoring_servers_nested_schema_message_gives_its_reason_not_the_data():
    data = "[[" + " ".join(["1.374e+01"] * 400) + "]]"
    message = (
        f"Failed to predict data '{data}'. Error: Failed to enforce schema of data '{data}' with schema "
        "'['mean_radius': double (required)]'. Error: Model is missing inputs ['mean_radius']."
    )
    assert server_message(json.dumps({"message": message})) == "Model is missing inputs ['mean_radius']."
    assert server_message("plain text\nover lines") == "plain text over lines"


class ScaledModel(Oracle):
    """Knows every label when pixels come as 0-255 (as if trained on them), ``unscaled_accuracy`` of them otherwise."""

    labels = np.arange(500) % 10
    unscaled_accuracy = 0.0
    paced = False  # its answers go by a row's place in the batch: one batch holds the whole set

    def _predict_batch(self, inputs):
        known = (np.arange(len(inputs)) < self.unscaled_accuracy * len(inputs)) | (inputs.max() > 10)
        labels = np.where(known, self.labels[: len(inputs)], (self.labels[: len(inputs)] + 1) % 10)
        return np.eye(10)[labels]


class SlightlyScaledModel(ScaledModel):
    """Keeps 72% of the labels on [0, 1] pixels: worse, far from chance."""

    unscaled_accuracy = 0.72


class NearlyScaledModel(ScaledModel):
    """Keeps 90% of the labels on [0, 1] pixels: clearly worse, by less than a decisive gain."""

    unscaled_accuracy = 0.9


def _reference():
    from ema.data.arrays import ArraySet

    return ArraySet("reference", IMAGES[np.arange(500) % 6], ScaledModel.labels, np.arange(500))


@pytest.mark.parametrize(
    ("model", "decisive"), [(ScaledModel, True), (SlightlyScaledModel, True), (NearlyScaledModel, False)]
)
def test_scaling_suggestion_names_the_scaling_that_fits_without_switching(model, decisive):
    reference = _reference()
    oracle = model(outputs="probabilities")
    suggestion = scaling_suggestion(oracle, reference, oracle.predict_proba(reference))
    assert "rerun with --input-scale 255" in suggestion.warning and "did not switch" in suggestion.warning
    assert f"is {model.unscaled_accuracy:.3f} with pixels in [0, 1]" in suggestion.warning
    assert suggestion.gain == pytest.approx(1.0 - model.unscaled_accuracy)
    assert suggestion.decisive is decisive  # a gain of 0.2 or more, no accident: the audit withholds its verdicts
    assert oracle.transform.is_identity


def test_a_scaling_gain_on_a_few_reference_images_decides_nothing():
    """Five images all right under 0-255 and none as sent: a gain of 1, yet p = 1/32 on five, no evidence."""
    reference = _reference().take(np.arange(5))
    oracle = ScaledModel(outputs="probabilities")
    suggestion = scaling_suggestion(oracle, reference, oracle.predict_proba(reference))
    assert suggestion.gain == 1.0 and suggestion.pvalue == pytest.approx(1 / 32)
    assert not suggestion.decisive


def test_scaling_suggestion_is_none_when_the_default_scaling_fits_best():
    reference = _reference()
    oracle = ScaledModel(outputs="probabilities").with_transform(InputTransform(scale=255.0))
    assert scaling_suggestion(oracle, reference, oracle.predict_proba(reference)) is None
    perfect = np.eye(10)[reference.y]
    assert scaling_suggestion(ScaledModel(outputs="probabilities"), reference, perfect) is None


def test_scaling_suggestion_scores_nothing_again_when_no_scaling_could_beat_the_default_by_min_gain():
    reference = _reference()
    oracle = ScaledModel(outputs="probabilities").with_transform(InputTransform(scale=255.0))
    proba = oracle.predict_proba(reference)  # every label known

    class Counted(ScaledModel):
        calls = 0

        def _predict_batch(self, inputs):
            Counted.calls += 1
            return super()._predict_batch(inputs)

    assert scaling_suggestion(Counted(outputs="probabilities"), reference, proba) is None
    assert Counted.calls == 0


COLOUR = np.random.default_rng(1).integers(0, 256, (500, 8, 8, 3), dtype=np.uint8)


class ImageNetModel(Oracle):
    """Knows every label of :data:`COLOUR` when its pixels come normalised as torchvision's ImageNet models want."""

    def _predict_batch(self, inputs):
        mean, std = (np.reshape(values, (1, 3, 1, 1)) for values in IMAGENET_NORMALIZE)
        pixels = COLOUR[: len(inputs)].transpose(0, 3, 1, 2) / 255.0
        known = np.isclose(inputs * std + mean, pixels, atol=1e-5).all(axis=(1, 2, 3))
        labels = np.arange(len(inputs)) % 10
        return np.eye(10)[np.where(known, labels, (labels + 1) % 10)]


def test_scaling_suggestion_names_imagenets_normalisation_for_a_colour_model_that_takes_it():
    from ema.data.arrays import ArraySet

    reference = ArraySet("reference", COLOUR, np.arange(500) % 10, np.arange(500))
    oracle = ImageNetModel(outputs="probabilities", input_spec=InputSpec((-1, 3, 8, 8)))
    warning = scaling_suggestion(oracle, reference, oracle.predict_proba(reference)).warning
    assert "1.000 with --normalize imagenet" in warning and "rerun with --normalize imagenet" in warning
    per_channel = re.search(r"0\.000 with --normalize ((?:[0-9.]+,){5}[0-9.]+)[:,] ", warning)
    assert per_channel, warning  # the reference's own statistics, per channel, tried and named
    mean, std = parse_normalize(per_channel[1])
    assert len(mean) == len(std) == 3


def test_scaling_suggestion_names_the_standard_option_when_several_fit_alike():
    """A model that knows its labels for any normalised pixels: the reference's own numbers fit as well as ImageNet's,
    and the option named is the one a user would recognise."""
    from ema.data.arrays import ArraySet

    class AnyNormalised(Oracle):
        def _predict_batch(self, inputs):
            labels = np.arange(len(inputs)) % 10
            return np.eye(10)[np.where(np.asarray(inputs).min(axis=(1, 2, 3)) < 0, labels, (labels + 1) % 10)]

    reference = ArraySet("reference", COLOUR, np.arange(500) % 10, np.arange(500))
    oracle = AnyNormalised(outputs="probabilities", input_spec=InputSpec((-1, 3, 8, 8)))
    warning = scaling_suggestion(oracle, reference, oracle.predict_proba(reference)).warning
    assert warning.count("1.000 with") == 3 and "rerun with --normalize imagenet if so" in warning


def test_a_recipe_of_settings_alone_is_refused_for_a_model_scored_over_http(tmp_path):
    """In process such a recipe clones the target's architecture; over HTTP nothing is loaded to clone, and the
    default architecture (an MLP) was trained for a ResNet-18 target without a word."""
    from ema.workflows.target import resolve_target

    (tmp_path / "settings.json").write_text('{"framework": "torch", "epochs": 10, "lr": 0.001}')
    (tmp_path / "named.json").write_text('{"framework": "torch", "arch": "resnet18", "epochs": 10}')
    url = "http://127.0.0.1:1/invocations"
    with pytest.raises(InputError, match=r"settings.json with training settings alone: .*add 'arch', or give --calib"):
        resolve_target(model_url=url, recipe_file=str(tmp_path / "settings.json"))
    assert resolve_target(model_url=url, recipe_file=str(tmp_path / "named.json")).recipe.spec.arch == "resnet18"


def test_input_dtype_overrides_what_an_http_endpoint_without_a_registry_entry_is_sent(tmp_path):
    from ema.workflows.target import resolve_target

    target = resolve_target(model_url="http://127.0.0.1:1/invocations", input_shape=(-1, 28, 28), input_dtype="uint8")
    spec = target.oracle().input_spec
    assert (spec.shape, spec.dtype) == ((-1, 28, 28), "uint8")
    images = np.full((2, 28, 28), 200, np.uint8)
    np.testing.assert_array_equal(target.oracle().prepare(images), images)  # pixel values, not 0/1 floats


class Wrapped(mlflow.pyfunc.PythonModel):
    """A scikit-learn model behind a pyfunc of its own: MLflow cannot hand back the estimator."""

    def __init__(self, model) -> None:
        self.model = model

    def predict(self, context, model_input, params=None):
        return self.model.predict_proba(np.asarray(model_input))


class ColumnBlindModel(Oracle):
    """A table model whose signature names no columns (a tensor, or none): it takes columns by position."""

    def _predict_batch(self, inputs):
        return np.eye(2)[(np.asarray(inputs)[:, 0] > 0).astype(int)]


@pytest.mark.parametrize(("spec", "warned"), [(InputSpec((-1, 3)), True), (InputSpec(columns=("a", "b", "c")), False)])
def test_a_table_sent_by_position_is_warned_about_with_its_columns(caplog, spec, warned):
    from ema.data.arrays import ArraySet

    table = ArraySet("patients", np.ones((4, 3)), np.zeros(4, np.int64), np.arange(4), ("a", "b", "c"))
    with caplog.at_level("WARNING", logger="ema.oracle.base"):
        ColumnBlindModel(outputs="probabilities", input_spec=spec).predict(table)
    by_position = [r.getMessage() for r in caplog.records if "sent in the file's order" in r.getMessage()]
    assert by_position == (
        ["patients: the model's signature names no columns, so the table's 3 columns are sent in the file's order "
         "(a, b, c): they must be in the order the model was trained on"] if warned else []
    )  # fmt: skip


def test_a_column_order_is_warned_about_once_per_model_and_never_for_the_auditors_own_helpers(caplog):
    """The target scores the query and both references (one column order): one warning. A helper model the
    auditor trained on the query's layout (a ``LocalOracle``) has no owner's order to keep: none."""
    from ema.data.arrays import ArraySet
    from ema.oracle.local import LocalOracle

    def table(name, columns):
        return ArraySet(name, np.ones((4, 3)), np.zeros(4, np.int64), np.arange(4), columns)

    target = ColumnBlindModel(outputs="probabilities", input_spec=InputSpec((-1, 3)))
    helper = LocalOracle(types.SimpleNamespace(predict_proba=lambda x: np.full((len(x), 2), 0.5)), source="helper")
    with caplog.at_level("WARNING", logger="ema.oracle.base"):
        for name in ("query", "members", "non-members"):
            target.predict(table(name, ("a", "b", "c")))
            helper.predict(table(name, ("a", "b", "c")))
        target.predict(table("reordered", ("c", "b", "a")))
    warned = [r.getMessage().split(":")[0] for r in caplog.records if "sent in the file's order" in r.getMessage()]
    assert warned == ["query", "reordered"]


def test_a_model_fitted_on_named_columns_without_a_signature_gets_them_by_name(tmp_path, caplog):
    """Its ``feature_names_in_`` say the columns: a file with them in another order scores the same, with neither
    our by-position warning nor scikit-learn's (it scored such a file as other features, silently)."""
    import warnings

    import mlflow.sklearn
    from sklearn.linear_model import LogisticRegression

    from ema.data.arrays import ArraySet
    from ema.oracle.pyfunc import PyfuncOracle

    x = np.random.default_rng(0).normal(size=(40, 3))
    y = (x[:, 0] > 0).astype(np.int64)
    model = LogisticRegression().fit(pd.DataFrame(x, columns=["a", "b", "c"]), y)
    mlflow.sklearn.save_model(model, tmp_path / "model", pyfunc_predict_fn="predict_proba")
    oracle = PyfuncOracle(str(tmp_path / "model"))
    with warnings.catch_warnings(record=True) as caught, caplog.at_level("WARNING", logger="ema.oracle.base"):
        warnings.simplefilter("always")
        in_order = oracle.predict_proba(ArraySet("rows", x, y, np.arange(40), ("a", "b", "c")))
        reversed_columns = oracle.predict_proba(ArraySet("rows", x[:, ::-1], y, np.arange(40), ("c", "b", "a")))
    np.testing.assert_allclose(reversed_columns, in_order)
    np.testing.assert_allclose(in_order, model.predict_proba(pd.DataFrame(x, columns=["a", "b", "c"])))
    assert [str(w.message) for w in caught if "feature names" in str(w.message)] == []
    assert not any("sent in the file's order" in r.getMessage() for r in caplog.records)


def test_scikit_learns_own_warning_for_columns_by_position_is_not_repeated_to_the_user(tmp_path, caplog):
    """A model fitted on named columns, wrapped so that its names cannot be read: our warning says it, not sklearn's."""
    import warnings

    import mlflow.pyfunc
    from sklearn.linear_model import LogisticRegression

    from ema.data.arrays import ArraySet
    from ema.oracle.pyfunc import PyfuncOracle

    x = np.random.default_rng(0).normal(size=(40, 3))
    y = (x[:, 0] > 0).astype(np.int64)
    model = LogisticRegression().fit(pd.DataFrame(x, columns=["a", "b", "c"]), y)
    mlflow.pyfunc.save_model(tmp_path / "model", python_model=Wrapped(model))
    with warnings.catch_warnings(record=True) as caught, caplog.at_level("WARNING", logger="ema.oracle.base"):
        warnings.simplefilter("always")
        PyfuncOracle(str(tmp_path / "model")).predict(ArraySet("rows", x, y, np.arange(40), ("a", "b", "c")))
    assert [str(w.message) for w in caught if "feature names" in str(w.message)] == []
    assert any("sent in the file's order" in r.getMessage() for r in caplog.records)


def test_an_oracle_warns_once_per_audit_and_again_for_the_next_one_it_scores(caplog):
    """A grid scores every cell through one oracle: each cell's record must hold what its scoring found."""

    class Probabilities(Oracle):
        def _predict_batch(self, inputs):
            return np.full((len(inputs), 2), 0.5)

    oracle = Probabilities(outputs="logits")
    with caplog.at_level("WARNING", logger="ema.oracle.base"):
        oracle.predict(IMAGES)
        oracle.predict(IMAGES)
        oracle.forget_warnings()
        oracle.predict(IMAGES)
    assert sum("declared logits (--outputs logits)" in r.getMessage() for r in caplog.records) == 2
