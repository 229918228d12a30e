"""MedMNIST ``.npz`` files (PneumoniaMNIST), read without unpickling."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from ema.data.arrays import ArraySet
from ema.data.sources.base import ImageSource
from ema.errors import InputError


class PneumoniaMNIST(ImageSource):
    """PneumoniaMNIST in MedMNIST's layout (nothing is downloaded)::

        ROOT/pneumoniamnist.npz   arrays train_images, train_labels, val_images,
                                  val_labels, test_images, test_labels

    Images are uint8 of shape (n, 28, 28) (larger MedMNIST+ sizes are resized to
    ``image_size``), labels of shape (n, 1): 0 normal, 1 pneumonia. Splits ``train``
    (4,708 images in the release), ``val`` (524) and ``test`` (624). Object arrays are
    refused: the file is never unpickled.
    """

    name = "pneumoniamnist"
    splits = ("train", "val", "test")
    classes = ("normal", "pneumonia")
    filename = "pneumoniamnist.npz"

    def _required(self, split: str) -> tuple[Path, ...]:
        return (self.root / self.filename,)

    def _load(self, split: str) -> ArraySet:
        (path,) = self._required(split)
        wanted = (f"{split}_images", f"{split}_labels")
        try:
            with np.load(path, allow_pickle=False) as contents:
                found = contents.files
                arrays = {key: contents[key] for key in wanted if key in found}
        except (zipfile.BadZipFile, ValueError, OSError) as exc:
            raise InputError(
                f"{path}: expected an .npz file of numpy arrays without pickled objects, got: {exc}"
            ) from exc
        missing = [key for key in wanted if key not in arrays]
        if missing:
            raise InputError(f"{path}: expected arrays {list(wanted)}, missing {missing} (found {found})")
        x, y = arrays[wanted[0]], arrays[wanted[1]]
        if x.dtype != np.uint8 or x.ndim != 3:
            raise InputError(
                f"{path}: expected {wanted[0]} as uint8 of shape (n, height, width), got {x.dtype} of shape {x.shape}"
            )
        if y.size != x.shape[0] or y.shape not in ((x.shape[0],), (x.shape[0], 1)):
            raise InputError(f"{path}: expected {wanted[1]} of shape ({x.shape[0]}, 1), got {y.shape}")
        return self._array_set(split, x, y.reshape(-1))
