"""Query sets from tables: what mlflow.models.evaluate hands the ema evaluator, checked at the boundary."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ema.data.frames import set_from_frame
from ema.errors import InputError

RNG = np.random.default_rng(0)
IMAGES = RNG.integers(0, 256, size=(4, 28, 28), dtype=np.uint8)
LABELS = np.array([3, 1, 4, 1])


def pixel_frame(images=IMAGES) -> pd.DataFrame:
    return pd.DataFrame(images.reshape(len(images), -1)).add_prefix("pixel")


def test_set_from_frame_reads_pixel_columns_row_major():
    data = set_from_frame(pixel_frame(), LABELS, name="q")
    assert np.array_equal(data.x, IMAGES) and data.y.tolist() == [3, 1, 4, 1] and data.index.tolist() == [0, 1, 2, 3]
    assert data.x.dtype == np.uint8 and data.y.dtype == np.int64


@pytest.mark.parametrize("cell", [lambda image: image, lambda image: image.reshape(-1), lambda image: image.tolist()])
def test_set_from_frame_reads_a_column_of_images(cell):
    frame = pd.DataFrame({"image": [cell(image) for image in IMAGES]})
    assert (
        set_from_frame(frame, LABELS, name="q").fingerprint
        == set_from_frame(pixel_frame(), LABELS, name="q").fingerprint
    )


def test_set_from_frame_accepts_float_columns_holding_integers():
    assert np.array_equal(set_from_frame(pixel_frame().astype(float), LABELS.astype(float), name="q").x, IMAGES)


@pytest.mark.parametrize(
    ("features", "labels", "match"),
    [
        (pixel_frame().iloc[:, :783], LABELS, r"expected 784 pixel columns .* got a table of shape \(4, 783\)"),
        (pixel_frame() / 255.0, LABELS, r"integer pixel values 0-255.*scale \[0, 1\] pixels by 255"),
        (pixel_frame().astype(int) + 1, LABELS, "expected pixel values 0-255, got values from 1 to 256"),
        (pixel_frame().iloc[:0], LABELS[:0], "at least one sample"),
        (pixel_frame(), LABELS[:3], "expected 4 labels, one per image, got 3"),
        (pixel_frame(), LABELS + 0.5, "column 'targets', got fractional values such as 3.5"),
        (pixel_frame(), LABELS - 5, "expected non-negative integer class labels, got -4"),
        (
            pixel_frame(),
            np.array(["cat", "dog", "cat", "dog"]),
            r"got \w+ values such as 'cat'; encode classes as 0..k-1 in the order of the model's outputs \(a "
            r"scikit-learn model fitted on these labels sorts them: 'cat' = 0, 'dog' = 1\)",
        ),
        (
            pd.DataFrame({"image": [IMAGES[0], IMAGES[1][:5]]}),
            LABELS[:2],
            r"the same shape, got shapes \[\(5, 28\), \(28, 28\)\]",
        ),
        (pd.DataFrame({"image": ["a", "b"]}), LABELS[:2], "numeric"),
    ],
    ids=[
        "columns",
        "unit-scale",
        "range",
        "empty",
        "label-count",
        "label-fraction",
        "label-negative",
        "label-text",
        "ragged",
        "text",
    ],
)
def test_set_from_frame_refuses(features, labels, match):
    with pytest.raises(InputError, match=match):
        set_from_frame(features, labels, name="q")


def test_set_from_frame_keeps_image_cells_of_any_size_and_colour():
    colour = RNG.integers(0, 256, size=(3, 32, 32, 3), dtype=np.uint8)
    data = set_from_frame(pd.DataFrame({"image": list(colour)}), LABELS[:3], name="q")
    assert np.array_equal(data.x, colour) and data.kind == "image"


def test_set_from_frame_reads_a_table_with_its_column_names():
    frame = pd.DataFrame({"age": [61.0, 47.5], "dose": [2, 3]})
    data = set_from_frame(frame, np.array([0, 1]), name="q", kind="table")
    assert data.kind == "table" and data.features == ("age", "dose")
    np.testing.assert_array_equal(data.x, [[61.0, 2.0], [47.5, 3.0]])


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (pd.DataFrame({"age": [61.0, np.nan]}), r"finite number in every feature cell, got 1 missing .* column 'age'"),
        (pd.DataFrame({"site": ["a", 7]}), r"every cell of column 'site', got 1 not text \(first at data row 1"),
        (pd.DataFrame({"site": ["a", None]}), r"every cell of column 'site', got 1 missing \(first at data row 1"),
    ],
    ids=["missing", "number-among-text", "missing-text"],
)
def test_set_from_frame_refuses_tables_with_missing_values_or_numbers_among_text(frame, match):
    with pytest.raises(InputError, match=match):
        set_from_frame(frame, np.array([0, 1]), name="q", kind="table")


def test_set_from_frame_refuses_an_unknown_kind():
    with pytest.raises(InputError, match="frame kind"):
        set_from_frame(pixel_frame(), LABELS, name="q", kind="tensor")
