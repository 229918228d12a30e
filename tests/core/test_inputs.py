"""The input pipeline: any image size and colour, tables by column name, shaped as the model declares."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from ema.data.arrays import ArraySet
from ema.errors import InputError
from ema.image_shapes import orders_pixels
from ema.input_transform import IMAGENET_NORMALIZE, parse_normalize
from ema.inputs import (
    InputSpec,
    InputTransform,
    align_columns,
    input_kind,
    prepare_inputs,
    to_model_inputs,
)

RNG = np.random.default_rng(0)
COLOUR = RNG.integers(0, 256, size=(5, 32, 32, 3), dtype=np.uint8)
GREY = RNG.integers(0, 256, size=(5, 64, 64), dtype=np.uint8)
IDENTITY = InputTransform()


@pytest.mark.parametrize(
    ("x", "kind"),
    [(GREY, "image"), (COLOUR, "image"), (np.zeros((3, 12)), "table"), (np.zeros((3, 12), np.int64), "table")],
)
def test_input_kind(x, kind):
    assert input_kind(x) == kind


@pytest.mark.parametrize("x", [np.zeros((3, 8, 8), np.float32), np.zeros((3, 8, 8, 5), np.uint8), np.zeros(3)])
def test_input_kind_refuses_what_is_neither(x):
    with pytest.raises(InputError, match=r"expected `x` as uint8 images .* got .* of shape"):
        input_kind(x)


def test_colour_images_go_channels_first_in_unit_range():
    pixels = to_model_inputs(COLOUR)
    assert pixels.shape == (5, 3, 32, 32) and pixels.dtype == np.float32
    np.testing.assert_array_equal(pixels[1, 2, 4, 7], np.float32(COLOUR[1, 4, 7, 2]) / np.float32(255))


def test_prepare_inputs_gives_channels_first_float_pixels_channels_last_in_memory():
    inputs = prepare_inputs(COLOUR, IDENTITY, InputSpec((-1, 3, 32, 32)))
    assert inputs.strides[1] == inputs.itemsize, "channels adjacent in memory: no copy only to reorder"
    np.testing.assert_array_equal(inputs, to_model_inputs(COLOUR))


def test_a_model_declaring_channels_last_gets_them_last():
    inputs = prepare_inputs(COLOUR, IDENTITY, InputSpec((-1, 32, 32, 3)))
    np.testing.assert_array_equal(inputs, COLOUR.astype(np.float32) / np.float32(255))


def test_a_model_declaring_channels_first_integers_gets_the_stored_values_transposed():
    inputs = prepare_inputs(COLOUR, IDENTITY, InputSpec((-1, 3, 32, 32), "uint8"))
    np.testing.assert_array_equal(inputs, COLOUR.transpose(0, 3, 1, 2))


def test_a_flat_model_gets_the_channels_first_values_flattened():
    inputs = prepare_inputs(COLOUR, IDENTITY, InputSpec((-1, 3 * 32 * 32), "float64"))
    np.testing.assert_array_equal(inputs, to_model_inputs(COLOUR).reshape(5, -1).astype(np.float64))


@pytest.mark.parametrize("dtype", ["float64", "uint8"])
def test_a_flat_model_in_pixel_order_hwc_gets_the_values_as_numpy_flattens_the_stored_images(dtype):
    inputs = prepare_inputs(COLOUR, IDENTITY, InputSpec((-1, 32 * 32 * 3), dtype, pixel_order="hwc"))
    scale = 1 if dtype == "uint8" else 255
    np.testing.assert_allclose(inputs, COLOUR.reshape(5, -1).astype(np.float64) / scale, rtol=1e-6)


def test_pixel_columns_in_pixel_order_hwc_take_the_values_as_numpy_flattens_the_stored_images():
    columns = tuple(f"p{i}" for i in range(32 * 32 * 3))
    frame = prepare_inputs(COLOUR, IDENTITY, InputSpec(dtype="float64", columns=columns, pixel_order="hwc"))
    np.testing.assert_allclose(frame.to_numpy(), COLOUR.reshape(5, -1) / 255.0, rtol=1e-6)


@pytest.mark.parametrize("shape", [(-1, 3, 32, 32), (-1, 32, 32, 3)])
def test_pixel_order_changes_nothing_where_the_declared_shape_places_the_channels(shape):
    hwc, chw = (prepare_inputs(COLOUR, IDENTITY, InputSpec(shape, pixel_order=order)) for order in ("hwc", "chw"))
    np.testing.assert_array_equal(hwc, chw)
    assert not orders_pixels(shape, COLOUR.shape[1:]) and orders_pixels((-1, 3072), COLOUR.shape[1:])
    assert not orders_pixels((-1, 64 * 64), GREY.shape[1:]), "grey images flatten alike in either order"


def test_an_unknown_pixel_order_is_refused_naming_the_orders():
    with pytest.raises(InputError, match=r"expected pixel order in \('chw', 'hwc'\), got 'whc'"):
        InputSpec((-1, 3072), pixel_order="whc")


def test_images_of_another_size_are_refused_naming_both_shapes_and_never_resized():
    with pytest.raises(
        InputError, match=r"input shape \(-1, 1, 28, 28\), got images of shape \(64, 64\).*--image-size"
    ):
        prepare_inputs(GREY, IDENTITY, InputSpec((-1, 1, 28, 28)))


def test_28x28_grey_is_as_before():
    images = RNG.integers(0, 256, size=(3, 28, 28), dtype=np.uint8)
    expected = images.astype(np.float32)[:, None] / np.float32(255)
    np.testing.assert_array_equal(prepare_inputs(images, IDENTITY, InputSpec()), expected)
    np.testing.assert_array_equal(prepare_inputs(images, IDENTITY, InputSpec((-1, 28, 28), "uint8")), images)


def test_a_table_goes_as_its_numbers_in_the_declared_columns_and_dtypes():
    x = np.array([[1.5, 2.0], [3.0, 4.0]])
    spec = InputSpec(dtype="float64", columns=("a", "b"), column_dtypes=("float64", "int64"))
    frame = prepare_inputs(x, IDENTITY, spec)
    assert isinstance(frame, pd.DataFrame) and list(frame.columns) == ["a", "b"]
    assert frame["b"].dtype == np.int64 and frame["a"].tolist() == [1.5, 3.0]


def test_a_table_of_fractions_is_refused_for_a_model_of_whole_numbers():
    with pytest.raises(InputError, match="expected whole numbers for a model that takes"):
        prepare_inputs(np.array([[0.5, 1.0]]), IDENTITY, InputSpec((-1, 2), "int64"))


def test_a_fraction_in_a_column_the_signature_declares_integer_is_refused_not_cut_off():
    spec = InputSpec(dtype="float64", columns=("bmi", "age"), column_dtypes=("float64", "int64"))
    assert prepare_inputs(np.array([[22.5, 45.0]]), IDENTITY, spec)["age"].tolist() == [45]
    with pytest.raises(InputError, match=r"whole numbers in column 'age' \(the model's signature declares int64\), "
                       r"got values such as 45.6"):  # fmt: skip
        prepare_inputs(np.array([[22.5, 45.0], [1.5, 45.6]]), IDENTITY, spec)


def test_a_table_of_another_width_is_refused():
    with pytest.raises(InputError, match=r"expected 3 features for the model's declared inputs .* got a table of 2"):
        prepare_inputs(np.zeros((2, 2)), IDENTITY, InputSpec((-1, 3), "float64"))


def test_columns_are_matched_by_name_and_extra_ones_listed():
    x = np.array([[1.0, 2.0, 3.0]])
    aligned, extra = align_columns(x, ("c", "a", "b"), InputSpec(columns=("a", "b")), where="q.csv")
    np.testing.assert_array_equal(aligned, [[2.0, 3.0]])
    assert extra == ["c"]


def test_a_signature_of_integer_column_names_matches_a_files_header_and_keeps_its_names():
    """A model fitted on pd.DataFrame(X) names its columns 0, 1, 2; a CSV's header reads '0', '1', '2'."""
    x = np.array([[1.0, 2.0, 3.0]])
    spec = InputSpec(dtype="float64", columns=(1, 0))
    aligned, extra = align_columns(x, ("0", "1", "id"), spec, where="q.csv")
    np.testing.assert_array_equal(aligned, [[2.0, 1.0]])
    assert extra == ["id"]
    assert list(prepare_inputs(aligned, InputTransform(), spec).columns) == [1, 0]  # as MLflow's schema wants them


def test_a_missing_column_is_refused_in_one_line_naming_it():
    with pytest.raises(InputError, match=r"q.csv: .*missing 1: 'b' \(the file has 'a', 'c'\)") as error:
        align_columns(np.zeros((1, 2)), ("a", "c"), InputSpec(columns=("a", "b")), where="q.csv")
    assert "\n" not in str(error.value)


def test_array_sets_name_unnamed_table_columns_and_fingerprint_the_names():
    x, y, index = np.zeros((2, 3)), np.array([0, 1]), np.arange(2)
    plain = ArraySet("t", x, y, index)
    assert plain.features == ("x0", "x1", "x2") and plain.kind == "table"
    assert ArraySet("t", x, y, index, ("a", "b", "c")).fingerprint != plain.fingerprint
    with pytest.raises(InputError, match="expected 3 distinct feature names, got 2"):
        ArraySet("t", x, y, index, ("a", "b"))


@pytest.mark.parametrize(
    ("images", "declared", "advice"),
    [
        (np.zeros((2, 32, 32), np.uint8), (-1, 3, 32, 32), "takes 3-channel images and these have 1"),
        (np.zeros((2, 28, 28), np.uint8), (-1, 32, 32, 3), "3, axis=-1)), 32x32 (--image-size)"),
        (np.zeros((2, 32, 32, 3), np.uint8), (-1, 1, 32, 32), "1 channel (colour made grey by BT.601 luma"),
        (np.zeros((2, 28, 28), np.uint8), (-1, 1, 32, 32), "resize the images with --image-size 32"),
    ],
)
def test_images_that_do_not_fit_a_declared_shape_are_told_what_differs(images, declared, advice):
    with pytest.raises(InputError, match=re.escape(advice)):
        prepare_inputs(images, InputTransform(), InputSpec(declared))


def test_colour_for_a_grey_model_is_advised_the_workbenchs_own_grey_conversion():
    """The advised function is importable and makes the grey that colour folders read with --channels 1 get."""
    import importlib

    from ema.data.sources.images import to_channels

    colour = np.random.default_rng(0).integers(0, 256, (2, 4, 4, 3), dtype=np.uint8)
    with pytest.raises(InputError) as error:
        prepare_inputs(colour, InputTransform(), InputSpec((-1, 1, 4, 4)))
    dotted = re.search(r"(ema\.[\w.]+)\(x\)", str(error.value)).group(1)
    module, name = dotted.rsplit(".", 1)
    advised = getattr(importlib.import_module(module), name)
    np.testing.assert_array_equal(advised(colour), to_channels(colour, 1))


def test_a_per_channel_normalisation_is_torchvisions_normalize_on_every_declared_layout():
    import torch
    from torchvision.transforms.functional import normalize

    mean, std = IMAGENET_NORMALIZE
    expected = normalize(torch.from_numpy(COLOUR).permute(0, 3, 1, 2).float() / 255, list(mean), list(std)).numpy()
    transform = InputTransform(mean=mean, std=std)
    np.testing.assert_allclose(prepare_inputs(COLOUR, transform, InputSpec((-1, 3, 32, 32))), expected, rtol=1e-6)
    channels_last = prepare_inputs(COLOUR, transform, InputSpec((-1, 32, 32, 3)))
    np.testing.assert_allclose(channels_last, expected.transpose(0, 2, 3, 1), rtol=1e-6)


@pytest.mark.parametrize(
    ("text", "mean", "std"),
    [
        ("0.1307,0.3081", 0.1307, 0.3081),
        ("0.5,0.4,0.3,0.2,0.2,0.1", (0.5, 0.4, 0.3), (0.2, 0.2, 0.1)),
        ("ImageNet", *IMAGENET_NORMALIZE),
        ("0.5,0.5,0.25,0.25", (0.5, 0.5), (0.25, 0.25)),
    ],
)
def test_normalize_option_forms(text, mean, std):
    assert parse_normalize(text) == (mean, std)


@pytest.mark.parametrize(
    ("text", "count"), [("0.5,0.5,0.5", "3 numbers"), ("1,2,3,4,5,6,7,8,9,10", "10 numbers"), ("0.5", "1 number")]
)
def test_normalize_option_of_another_count_names_the_forms_and_the_count(text, count):
    with pytest.raises(InputError, match=f"one mean per channel then one std per channel .*; got {count}"):
        parse_normalize(text)


def test_normalize_option_of_words_names_the_forms():
    with pytest.raises(InputError, match=r"or imagenet; got 'mean,std'"):
        parse_normalize("mean,std")
    with pytest.raises(InputError, match=r"or imagenet; got '1_0,5'$"):
        parse_normalize("1_0,5")  # float() would read 10
    with pytest.raises(InputError, match=r"got 2000 numbers in '(0.5,){20}'\.\.\.$"):
        parse_normalize(",".join(["0.5"] * 2000))  # the message stays one short line


def test_a_per_channel_normalisation_refuses_images_of_another_channel_count_naming_both():
    transform = InputTransform(mean=IMAGENET_NORMALIZE[0], std=IMAGENET_NORMALIZE[1])
    with pytest.raises(InputError, match=r"expected 3-channel images for --normalize 0.485,.*, got 1-channel images"):
        prepare_inputs(GREY, transform, InputSpec())
    with pytest.raises(InputError, match=r"the model takes 3-channel images and these have 1: .*np.repeat"):
        prepare_inputs(GREY, transform, InputSpec((-1, 3, 64, 64)))  # the model's channels first, with the fix
    with pytest.raises(InputError, match=r"expected 3-channel images .* got inputs of shape \(4,\)"):
        transform.apply(np.zeros((2, 4), np.float32))


@pytest.mark.parametrize(
    ("mean", "std"),
    [((0.5, 0.5, 0.5), 0.25), ((0.5, 0.5), (0.25, 0.25, 0.25)), ((), ()), ((0.5, 0.5), (0.25, 0.0))],
)
def test_a_per_channel_normalisation_needs_a_positive_std_per_mean(mean, std):
    with pytest.raises(InputError, match=r"expected the input mean and std as one number each|std > 0"):
        InputTransform(mean=mean, std=std)


def test_a_recipes_per_channel_input_round_trips_through_its_json():
    from ema.training.recipes import recipe_from_dict, recipe_from_json, recipe_to_json

    recipe = recipe_from_dict({"arch": "cnn", "input": {"mean": [0.5, 0.4, 0.3], "std": [0.2, 0.2, 0.1]}})
    assert recipe.transform == InputTransform(mean=(0.5, 0.4, 0.3), std=(0.2, 0.2, 0.1))
    assert recipe_from_json(recipe_to_json(recipe)).transform == recipe.transform
    assert recipe.transform.as_options() == ["--input-scale", "1.0", "--normalize", "0.5,0.4,0.3,0.2,0.2,0.1"]


def test_one_channels_normalisation_is_the_number_for_every_channel_and_options_keep_every_digit():
    """A recipe's ``"mean": [0.1307]`` is the scalar transform (one calibration cache key, any input shape)."""
    assert InputTransform(mean=[0.1307], std=(0.3081,)) == InputTransform(mean=0.1307, std=0.3081)
    precise = InputTransform(mean=0.123456789, std=0.987654321)
    assert precise.as_options()[-1] == "0.123456789,0.987654321"  # the report's command reruns this transform
    assert precise.describe() == "x1 norm 0.123457,0.987654"  # short, for tags and tables


@pytest.mark.parametrize(
    ("transform", "options"),
    [
        (InputTransform(mean=0.5, std=0.5), ["--normalize", "0.5,0.5"]),
        (InputTransform(scale=255.0), ["--input-scale", "255.0"]),
        (InputTransform(scale=255.0, mean=0.5, std=0.5), ["--input-scale", "255.0", "--normalize", "0.5,0.5"]),
        (InputTransform(), []),
    ],
)
def test_acting_options_leave_out_a_scale_of_one(transform, options):
    """A refusal named `--input-scale 1.0` beside --normalize where --input-scale was not given."""
    assert transform.acting_options() == options
