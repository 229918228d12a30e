"""Query sets from data frames: pixels (one column per pixel, or one column of images), or named features.

What ``mlflow.models.evaluate`` hands an evaluator is a table; the audit reads
:class:`~ema.data.arrays.ArraySet` values. :func:`set_from_frame` checks the table at this
boundary and converts it, so that the rest of the audit sees what a query file gives.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ema.data.arrays import IMAGE_SHAPE, ArraySet
from ema.data.limits import DEFAULT_MAX_QUERY, check_set_size
from ema.data.tables import feature_matrix, whole_numbers
from ema.errors import InputError
from ema.validation import check_choice

#: Pixel values as query files store them.
PIXEL_MAX = 255
#: What lets an evaluation table's missing cells through, as a refusal names it.
EVALUATOR_ALLOW_MISSING = "evaluator_config={'ema': {'allow_missing': True}}"


#: What a frame's rows hold: images (pixel columns, or one column of image arrays), or named features.
FRAME_KINDS = ("image", "table")


def set_from_frame(
    features: pd.DataFrame | np.ndarray,
    labels: np.ndarray,
    *,
    name: str,
    max_images: int = DEFAULT_MAX_QUERY,
    kind: str = "image",
    allow_missing: bool = False,
) -> ArraySet:
    """The query set in a table and its labels.

    Parameters
    ----------
    features : DataFrame or ndarray
        One row per sample. ``kind="image"``: either 784 (28 x 28) numeric columns in row-major
        pixel order, or a single column whose cells are images (arrays of shape (H, W) or
        (H, W, C), any size; or 784 values); pixel values are integers 0-255, as query files store
        them. ``kind="table"``: one column per feature (numbers, or text), kept with its name.
    labels : array-like of shape (n,)
        Integer class labels.
    name : str
        The set's name.
    max_images : int
        The most rows accepted, checked before the table is converted (which copies it).
    kind : {"image", "table"}
        What the rows hold.
    allow_missing : bool
        A table's missing numbers are kept as NaN (for a model whose pipeline imputes them), not refused.

    Returns
    -------
    ArraySet
        Images (uint8 (n, H, W[, C])) or a table (n, d) with its column names; ``y`` int64; ``index`` 0..n-1.

    Raises
    ------
    InputError
        If the table has more than ``max_images`` rows, or no rows; for images, another number of
        pixel columns, cells of different shapes, non-numeric or fractional pixels, pixels outside
        0-255; for tables, an infinite value, a missing one (without ``allow_missing``) or a column of numbers and
        text mixed; labels that are not integers.

    Examples
    --------
    >>> frame = pd.DataFrame(np.zeros((2, 784), dtype=np.uint8))
    >>> set_from_frame(frame, np.array([3, 5]), name="q").x.shape
    (2, 28, 28)
    """
    check_choice("frame kind", kind, FRAME_KINDS)
    check_set_size(len(features), limit=max_images, where=f"evaluation table {name}")
    if len(features) == 0:
        raise InputError("expected at least one sample, got an empty table")
    if kind == "table":
        frame = features if isinstance(features, pd.DataFrame) else pd.DataFrame(np.asarray(features))
        where = f"evaluation table {name}"
        x = feature_matrix(frame, where=where, allow_missing=allow_missing, option=EVALUATOR_ALLOW_MISSING)
        y = _as_labels(labels, x.shape[0], f"evaluation table {name}")
        return ArraySet(name, x, y, np.arange(x.shape[0], dtype=np.int64), tuple(map(str, frame.columns)))
    x = _as_uint8(_images(features))
    y = _as_labels(labels, x.shape[0], f"evaluation table {name}")
    return ArraySet(name, x, y, np.arange(x.shape[0], dtype=np.int64))


def _images(features: pd.DataFrame | np.ndarray) -> np.ndarray:
    """The rows as images: a single column of image cells stacked as they are, else 784 pixel columns as 28 x 28."""
    if isinstance(features, pd.DataFrame) and features.shape[1] == 1:
        if pd.api.types.is_object_dtype(features.dtypes.iloc[0]):
            return _stacked_cells(features.iloc[:, 0].tolist())
    pixels = _numbers(features.to_numpy() if isinstance(features, pd.DataFrame) else features)
    n_pixels = IMAGE_SHAPE[0] * IMAGE_SHAPE[1]
    if pixels.ndim != 2 or pixels.shape[1] != n_pixels:
        raise InputError(
            f"expected {n_pixels} pixel columns (28 x 28, row-major) or one column of images, got a table of "
            f"shape {pixels.shape} (pass evaluator_config kind='table' for a table of features)"
        )
    return pixels.reshape(-1, *IMAGE_SHAPE)


def _stacked_cells(cells: list) -> np.ndarray:
    """A column of image cells as one array; flat cells of 784 values are 28 x 28 images."""
    try:
        arrays = [np.asarray(cell, dtype=float) for cell in cells]
    except (TypeError, ValueError) as exc:
        raise InputError(f"expected numeric pixel arrays in the image column, got {exc}") from exc
    shapes = sorted({a.shape for a in arrays})
    if len(shapes) > 1:
        raise InputError(f"expected every image cell to have the same shape, got shapes {shapes[:5]}")
    images = np.stack(arrays)
    if images.ndim == 2 and images.shape[1] == IMAGE_SHAPE[0] * IMAGE_SHAPE[1]:
        return images.reshape(-1, *IMAGE_SHAPE)
    return images


def _numbers(values: np.ndarray) -> np.ndarray:
    try:
        return np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"expected numeric pixel columns, got values that are not numbers ({exc}); for a table of features "
            "(numbers or text), pass evaluator_config={'ema': {'kind': 'table'}}"
        ) from exc


def _as_uint8(pixels: np.ndarray) -> np.ndarray:
    if not np.isfinite(pixels).all() or (pixels != np.round(pixels)).any():
        raise InputError(
            "expected integer pixel values 0-255, got fractional, NaN or infinite values; "
            f"scale [0, 1] pixels by {PIXEL_MAX} and round them"
        )
    low, high = float(pixels.min()), float(pixels.max())
    if low < 0 or high > PIXEL_MAX:
        raise InputError(f"expected pixel values 0-{PIXEL_MAX}, got values from {low:g} to {high:g}")
    return pixels.astype(np.uint8)


def _as_labels(labels: np.ndarray, n: int, where: str) -> np.ndarray:
    """The targets as class numbers, read as a table file's label column is (text labels refused with the codes a
    scikit-learn model fitted on them would use)."""
    values = np.asarray(labels).reshape(-1)
    if values.shape != (n,):
        raise InputError(f"expected {n} labels, one per image, got {values.size}")
    classes = whole_numbers(pd.Series(values), "targets", where, labels=True)
    if (classes < 0).any():
        raise InputError(f"{where}: expected non-negative integer class labels, got {classes.min()}")
    return classes
