"""SVHN's cropped-digit MATLAB files, converted to grey and resized."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy.io import loadmat
from scipy.io.matlab import MatReadError

from ema.data.arrays import ArraySet
from ema.data.sources.base import ImageSource
from ema.errors import InputError

SVHN_FILES = {"train": "train_32x32.mat", "test": "test_32x32.mat"}
#: SVHN labels the digit 0 as 10.
SVHN_ZERO_LABEL = 10
#: Shape of ``X`` in the files: (height, width, channels, n).
SVHN_IMAGE_SHAPE = (32, 32, 3)


class SVHN(ImageSource):
    """SVHN (format 2, cropped digits) as torchvision lays it out (nothing is downloaded)::

        ROOT/train_32x32.mat
        ROOT/test_32x32.mat

    Each file holds ``X``, uint8 of shape (32, 32, 3, n), and ``y`` of shape (n, 1) with
    labels 1-10, where 10 means the digit 0: the loader maps 10 to 0, converts to grey
    (BT.601 luma) unless ``channels=3``, and resizes to ``image_size`` by area averaging.
    """

    name = "svhn"
    splits = ("train", "test")
    classes = tuple(str(digit) for digit in range(10))

    def _required(self, split: str) -> tuple[Path, ...]:
        return (self.root / SVHN_FILES[split],)

    def _load(self, split: str) -> ArraySet:
        (path,) = self._required(split)
        try:
            contents = loadmat(path, variable_names=("X", "y"))
        except (MatReadError, ValueError, OSError, NotImplementedError) as exc:
            raise InputError(f"{path}: expected a MATLAB v5 file with arrays X and y, got: {exc}") from exc
        missing = [key for key in ("X", "y") if key not in contents]
        if missing:
            raise InputError(f"{path}: expected arrays X and y, missing {missing}")
        x, y = contents["X"], contents["y"].reshape(-1)
        if x.dtype != np.uint8 or x.ndim != 4 or x.shape[:3] != SVHN_IMAGE_SHAPE or x.shape[3] != y.size:
            raise InputError(
                f"{path}: expected X as uint8 of shape (32, 32, 3, {y.size}) (one image per label), "
                f"got {x.dtype} of shape {x.shape}"
            )
        labels = y.astype(np.int64)
        if labels.size and (labels.min() < 1 or labels.max() > SVHN_ZERO_LABEL):
            raise InputError(f"{path}: expected labels 1-{SVHN_ZERO_LABEL}, got {labels.min()}-{labels.max()}")
        labels[labels == SVHN_ZERO_LABEL] = 0
        return self._array_set(split, np.moveaxis(x, 3, 0), labels)
