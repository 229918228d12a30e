"""A labelled image set as arrays, with a content fingerprint."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ema.errors import InputError

#: Images are square, IMAGE_SIZE pixels a side: (n, 28, 28) uint8 as stored, (n, 1, 28, 28) as models take them.
IMAGE_SIZE = 28
IMAGE_SHAPE = (IMAGE_SIZE, IMAGE_SIZE)
#: The shape of float32 pixels as models take them (ours now take uint8 images (-1, 28, 28)).
MODEL_INPUT_SHAPE = (-1, 1, *IMAGE_SHAPE)

#: Number of hex digits of the sha256 kept in a fingerprint.
FINGERPRINT_LENGTH = 16


def fingerprint(*arrays: np.ndarray) -> str:
    """A short content hash of arrays (their dtype, shape and bytes), stable across runs."""
    digest = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.reshape(-1).view(np.uint8))  # the array's own bytes, not a copy
    return digest.hexdigest()[:FINGERPRINT_LENGTH]


@dataclass(frozen=True)
class ArraySet:
    """Images with labels.

    Attributes
    ----------
    name : str
        What the set is (``"M1"``, ``"calibration"``, a file name).
    x : ndarray of shape (n, 28, 28), uint8
        Grey images, pixel values 0-255.
    y : ndarray of shape (n,), int64
        Class labels.
    index : ndarray of shape (n,), int64
        Each image's position in the source it was drawn from.
    """

    name: str
    x: np.ndarray
    y: np.ndarray
    index: np.ndarray

    def __post_init__(self) -> None:
        check_images(self.x, self.y, self.index, where=self.name)

    def __len__(self) -> int:
        return int(self.y.size)

    @cached_property
    def fingerprint(self) -> str:
        return fingerprint(self.x, self.y)

    def take(self, positions: np.ndarray, name: str | None = None) -> ArraySet:
        """The subset at ``positions`` (positions within this set)."""
        return ArraySet(name or self.name, self.x[positions], self.y[positions], self.index[positions])

    def pixels(self) -> np.ndarray:
        """Images as float32 in [0, 1], shape (n, 1, 28, 28): what a model receives."""
        return to_pixels(self.x)


def to_pixels(images: np.ndarray) -> np.ndarray:
    """uint8 images (n, H, W), 0-255, as float32 pixels in [0, 1] of shape (n, 1, H, W), in one copy."""
    pixels = images.astype(np.float32)[:, None, :, :]
    pixels /= np.float32(255.0)
    return pixels


def check_images(x: np.ndarray, y: np.ndarray, index: np.ndarray, *, where: str) -> None:
    """Refuse arrays that are not uint8 (n, H, W) images with int64 labels and indices."""
    if not isinstance(x, np.ndarray) or x.dtype != np.uint8 or x.ndim != 3:
        raise InputError(
            f"{where}: expected `x` as uint8 images of shape (n, height, width), got "
            f"{getattr(x, 'dtype', type(x).__name__)} of shape {getattr(x, 'shape', None)}"
        )
    for name, array in (("y", y), ("index", index)):
        if not isinstance(array, np.ndarray) or array.dtype != np.int64 or array.shape != (x.shape[0],):
            raise InputError(
                f"{where}: expected `{name}` as int64 of shape ({x.shape[0]},), got "
                f"{getattr(array, 'dtype', type(array).__name__)} of shape {getattr(array, 'shape', None)}"
            )
