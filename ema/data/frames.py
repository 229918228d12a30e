"""Query sets from tables: a DataFrame of pixels (one column per pixel, or one column of images) and labels.

What ``mlflow.models.evaluate`` hands an evaluator is a table; the audit reads
:class:`~ema.data.arrays.ArraySet` values. :func:`set_from_frame` checks the table at this
boundary and converts it, so that the rest of the audit sees what a query file gives.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ema.data.arrays import IMAGE_SHAPE, ArraySet
from ema.data.limits import DEFAULT_MAX_QUERY, check_set_size
from ema.errors import InputError

#: Pixel values as query files store them.
PIXEL_MAX = 255


def set_from_frame(
    features: pd.DataFrame | np.ndarray, labels: np.ndarray, *, name: str, max_images: int = DEFAULT_MAX_QUERY
) -> ArraySet:
    """The query set in a table of pixels and its labels.

    Parameters
    ----------
    features : DataFrame or ndarray
        One row per image: either 784 (28 x 28) numeric columns in row-major pixel order, or
        a single column whose cells are arrays of 784 values or of shape (28, 28). Pixel
        values are integers 0-255, as query files store them.
    labels : array-like of shape (n,)
        Integer class labels.
    name : str
        The set's name.
    max_images : int
        The most rows accepted, checked before the table is converted (which copies it as floats).

    Returns
    -------
    ArraySet
        ``x`` uint8 of shape (n, 28, 28), ``y`` int64, ``index`` 0..n-1.

    Raises
    ------
    InputError
        If the table has more than ``max_images`` rows, another number of pixel columns, cells of
        another size, non-numeric or fractional pixels, pixels outside 0-255, labels that are not
        integers, or no rows.

    Examples
    --------
    >>> frame = pd.DataFrame(np.zeros((2, 784), dtype=np.uint8))
    >>> set_from_frame(frame, np.array([3, 5]), name="q").x.shape
    (2, 28, 28)
    """
    check_set_size(len(features), limit=max_images, where=f"evaluation table {name}")
    pixels = _pixel_matrix(features)
    n_pixels = IMAGE_SHAPE[0] * IMAGE_SHAPE[1]
    if pixels.shape[0] == 0:
        raise InputError("expected at least one image, got an empty table")
    if pixels.ndim != 2 or pixels.shape[1] != n_pixels:
        raise InputError(
            f"expected {n_pixels} pixel columns (28 x 28, row-major) or one column of images, got a table of "
            f"shape {pixels.shape}"
        )
    x = _as_uint8(pixels).reshape(-1, *IMAGE_SHAPE)
    y = _as_labels(labels, x.shape[0])
    return ArraySet(name, x, y, np.arange(x.shape[0], dtype=np.int64))


def _pixel_matrix(features: pd.DataFrame | np.ndarray) -> np.ndarray:
    """The features as an (n, pixels) array; a single column of arrays is stacked."""
    if isinstance(features, pd.DataFrame):
        if features.shape[1] == 1 and pd.api.types.is_object_dtype(features.dtypes.iloc[0]):
            cells = features.iloc[:, 0].tolist()
            sizes = {np.size(cell) for cell in cells}
            if len(sizes) > 1:
                raise InputError(
                    f"expected every image cell to hold the same number of pixels, got sizes {sorted(sizes)}"
                )
            try:
                return (
                    np.stack([np.asarray(cell, dtype=float).reshape(-1) for cell in cells])
                    if cells
                    else np.zeros((0, 0))
                )
            except (TypeError, ValueError) as exc:
                raise InputError(f"expected numeric pixel arrays in the image column, got {exc}") from exc
        features = features.to_numpy()
    try:
        return np.asarray(features, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InputError(f"expected numeric pixel columns, got values that are not numbers ({exc})") from exc


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


def _as_labels(labels: np.ndarray, n: int) -> np.ndarray:
    try:
        values = np.asarray(labels, dtype=float).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InputError(f"expected integer class labels, got values that are not numbers ({exc})") from exc
    if values.shape != (n,):
        raise InputError(f"expected {n} labels, one per image, got {values.size}")
    if not np.isfinite(values).all() or (values != np.round(values)).any() or (values < 0).any():
        raise InputError("expected non-negative integer class labels, got fractional, negative, NaN or infinite values")
    return values.astype(np.int64)
