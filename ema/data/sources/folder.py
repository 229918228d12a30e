"""Image folders: one sub-folder of image files per class (the pediatric chest X-rays)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ema.data.sources.base import ImageFileSource
from ema.data.sources.images import IMAGE_SUFFIXES, list_image_files
from ema.errors import InputError


class ChestXRay(ImageFileSource):
    """The pediatric chest X-ray set (Kermany et al.) as an image folder tree::

        ROOT/chest_xray/train/NORMAL/*.jpeg
        ROOT/chest_xray/train/PNEUMONIA/*.jpeg
        ROOT/chest_xray/test/NORMAL/*.jpeg
        ROOT/chest_xray/test/PNEUMONIA/*.jpeg

    Labels: NORMAL 0, PNEUMONIA 1. Files ending in .jpeg, .jpg or .png are read (other
    files are ignored), converted to grey (or colour with ``channels=3``) and kept at their
    own size, which must be the same for all; with ``image_size``, centre-cropped to a
    square and resized to it (the archive's X-rays differ in size: give one). Grey images of
    more than 8 bits are scaled by one bit depth for both splits (:class:`ImageFileSource`).
    ``index`` is the position in the split's listing: class by class, files sorted by name.
    The archive's tiny ``val`` folder is not read.
    """

    name = "chest-xray"
    splits = ("train", "test")
    classes = ("NORMAL", "PNEUMONIA")
    #: Sub-folder of ``root`` holding the split folders.
    folder = "chest_xray"

    def _required(self, split: str) -> tuple[Path, ...]:
        return tuple(self.root / self.folder / split / label for label in self.classes)

    def _exists(self, path: Path) -> bool:
        return path.is_dir()

    def _listing(self, split: str) -> tuple[list[Path], np.ndarray]:
        folders = self._required(split)
        listings = [list_image_files(folder) for folder in folders]
        empty = [str(folder) for folder, listing in zip(folders, listings, strict=True) if not listing]
        if empty:
            suffixes = ", ".join(IMAGE_SUFFIXES)
            raise InputError(
                f"{self.name} ({split}): expected image files ({suffixes}) in {', '.join(empty)}, got none"
            )
        files = [path for listing in listings for path in listing]
        labels = np.repeat(np.arange(len(listings), dtype=np.int64), [len(listing) for listing in listings])
        return files, labels
