"""Calibration quality k: keep k% of the images clean, corrupt the rest (paper, Sec. 3.1).

Two protocols, by name in :data:`CORRUPTIONS`: ``"noise+rotation"`` (the benchmark: of the
(100 - k)% corrupted images, half get additive Gaussian noise and half a random rotation)
and ``"noise"`` (the chest X-ray experiment: all of them get noise). Drawn with a seeded
generator, vectorised over the whole batch.

A table has no rotation: under either protocol, (100 - k)% of its rows get Gaussian noise on
standardised features (:func:`add_table_noise`), so ``k`` keeps one meaning for every kind of
data, the percent of samples left clean.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from scipy import ndimage

from ema.data.arrays import ArraySet
from ema.errors import InputError
from ema.inputs import text_columns
from ema.validation import check_choice

#: Standard deviation of the Gaussian noise, in units of the 0-255 pixel range.
NOISE_STD = 0.3
#: Standard deviation of a table's noise, in units of each feature's standard deviation over the set.
TABLE_NOISE_STD = 1.0
#: Rotations are drawn uniformly from [-MAX_ROTATION_DEGREES, MAX_ROTATION_DEGREES].
MAX_ROTATION_DEGREES = 45.0


def add_gaussian_noise(x: np.ndarray, rng: np.random.Generator, std: float = NOISE_STD) -> np.ndarray:
    """uint8 images plus N(0, std^2) noise on the [0, 1] scale, clipped back to 0-255."""
    noisy = x / 255.0 + rng.normal(0.0, std, size=x.shape)
    return np.rint(np.clip(noisy, 0.0, 1.0) * 255).astype(np.uint8)


def add_table_noise(
    x: np.ndarray, scale: np.ndarray, rng: np.random.Generator, std: float = TABLE_NOISE_STD
) -> np.ndarray:
    """Rows of a table plus N(0, std^2) noise on standardised features: ``x + std * scale * z``, z ~ N(0, 1).

    ``scale`` holds each feature's standard deviation (over the whole set, so that the
    noise is the same whichever rows are chosen: :func:`feature_scale`); a constant feature gets
    none. The result is float64: an integer feature becomes fractional, as noise on a measured
    quantity is. A missing cell (NaN) stays missing: there is no value to move.
    """
    return x + rng.normal(0.0, std, size=x.shape) * scale


def feature_scale(values: np.ndarray) -> np.ndarray:
    """Each column's standard deviation over its present cells, shape (d,): a missing cell (NaN, read with
    ``--allow-missing``) is left out of its column's spread, and a column with no present cell gets 0 (no noise).
    A table without missing cells gets exactly ``values.std(axis=0)``."""
    missing = np.isnan(values)
    if not missing.any():
        return values.std(axis=0)
    scale = np.zeros(values.shape[1])
    present = ~missing.all(axis=0)
    scale[present] = np.nanstd(values[:, present], axis=0)
    return scale


def corrupt_table_rows(data: ArraySet, k: int, seed: int, name: str) -> ArraySet:
    """The table with (100 - k)% of its rows, chosen with ``seed``, given :func:`add_table_noise` on their numbers (a
    text column, a category, is left as it is, and so is a missing number: NaN)."""
    rng = np.random.default_rng(seed)
    n = len(data)
    chosen = rng.permutation(n)[: round(n * (100 - k) / 100)]
    numbers = ~text_columns(data.x)
    values = data.x[:, numbers].astype(np.float64)
    values[chosen] = add_table_noise(values[chosen], feature_scale(values), rng)
    if numbers.all():
        return replace(data, name=name, x=values)
    x = data.x.copy()
    x[:, numbers] = values
    return replace(data, name=name, x=x)


def rotate_images(x: np.ndarray, rng: np.random.Generator, max_degrees: float = MAX_ROTATION_DEGREES) -> np.ndarray:
    """Rotate each image (n, H, W) or (n, H, W, C) about its centre by its own random angle (bilinear, zero fill);
    a colour image's channels turn together."""
    angles = np.deg2rad(rng.uniform(-max_degrees, max_degrees, size=len(x)))[:, None, None]
    if x.ndim == 3:
        return _rotate_planes(x, angles)
    return np.stack([_rotate_planes(x[..., channel], angles) for channel in range(x.shape[3])], axis=3)


def _rotate_planes(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Grey images (n, H, W) each rotated by its angle (radians, shape (n, 1, 1))."""
    n, height, width = x.shape
    rows, cols = np.mgrid[0:height, 0:width].astype(np.float64)
    cy, cx = (height - 1) / 2.0, (width - 1) / 2.0
    cos, sin = np.cos(angles), np.sin(angles)
    src_rows = cy + cos * (rows - cy) - sin * (cols - cx)
    src_cols = cx + sin * (rows - cy) + cos * (cols - cx)
    image_ids = np.broadcast_to(np.arange(n, dtype=np.float64)[:, None, None], src_rows.shape)
    coords = np.stack([image_ids, src_rows, src_cols])
    rotated = ndimage.map_coordinates(x.astype(np.float64), coords, order=1, mode="constant", cval=0.0)
    return np.rint(np.clip(rotated, 0, 255)).astype(np.uint8)


def check_quality(k: int) -> None:
    if not 0 <= k <= 100:
        raise InputError(f"expected calibration quality k in 0..100 (percent clean), got {k}")


def noise_and_rotation(data: ArraySet, k: int, seed: int = 0) -> ArraySet:
    """The set at calibration quality ``k`` (percent clean).

    Parameters
    ----------
    data : ArraySet
        Clean images, or a table.
    k : int
        Percent of samples left clean, 0..100; of images, ``(100 - k) / 2`` percent get noise
        and as many a rotation; of a table's rows, ``100 - k`` percent get noise.
    seed : int
        Seeds which images are corrupted and how.
    """
    check_quality(k)
    if data.kind == "table":
        return corrupt_table_rows(data, k, seed, f"{data.name}@k{k}")
    rng = np.random.default_rng(seed)
    n = len(data)
    n_corrupt = round(n * (100 - k) / 100)
    chosen = rng.permutation(n)[:n_corrupt]
    noisy, rotated = chosen[: n_corrupt // 2], chosen[n_corrupt // 2 :]
    x = data.x.copy()
    x[noisy] = add_gaussian_noise(x[noisy], rng)
    x[rotated] = rotate_images(x[rotated], rng)
    return ArraySet(f"{data.name}@k{k}", x, data.y, data.index)


def noise_only(data: ArraySet, k: int, seed: int = 0) -> ArraySet:
    """The set at the medical protocol's quality ``k``: (100 - k)% of the images (a table's rows) get Gaussian noise."""
    check_quality(k)
    if data.kind == "table":
        return corrupt_table_rows(data, k, seed, f"{data.name}@noise-k{k}")
    rng = np.random.default_rng(seed)
    n = len(data)
    chosen = rng.permutation(n)[: round(n * (100 - k) / 100)]
    x = data.x.copy()
    x[chosen] = add_gaussian_noise(x[chosen], rng)
    return ArraySet(f"{data.name}@noise-k{k}", x, data.y, data.index)


#: Calibration corruption protocols by name.
CORRUPTIONS = {"noise+rotation": noise_and_rotation, "noise": noise_only}
DEFAULT_CORRUPTION = "noise+rotation"


def corruption_as_applied(name: str, kind: str) -> str:
    """What the protocol ``name`` does to a set of ``kind``: a table's rows get noise only, whatever its name."""
    return "noise" if kind == "table" else name


def apply_corruption(name: str, data: ArraySet, k: int, seed: int = 0) -> ArraySet:
    """The set at quality ``k`` under the named protocol."""
    return CORRUPTIONS[check_choice("corruption", name, CORRUPTIONS)](data, k, seed)
