"""What a data source holds, split by split: counts per class, image shape, dtype, pixel range."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ema.data.arrays import ArraySet
from ema.data.embedded import load_digits_28, load_mnist_embedded
from ema.data.sources import LOADERS, ImageFormat, open_source
from ema.errors import InputError
from ema.validation import check_choice

DIGIT_CLASSES = tuple(str(digit) for digit in range(10))
#: Sets that ship with the package or scikit-learn: one split, no root.
BUILTIN_SETS = {"mnist-embedded": load_mnist_embedded, "sklearn-digits": load_digits_28}
BUILTIN_SPLIT = "all"
#: Every source a user can inspect.
SOURCE_NAMES = (*BUILTIN_SETS, *LOADERS)


@dataclass(frozen=True)
class SetSummary:
    """One split of a source, described.

    Attributes
    ----------
    split : str
        The split's name (``train``, ``test``, ...; ``all`` for a built-in set).
    n_images : int
        Number of images.
    image_shape : tuple of int
        (height, width) of each image, and its channels for colour.
    dtype : str
        The images' dtype.
    pixel_min, pixel_max : int
        The smallest and largest pixel value.
    class_counts : tuple of int
        Images per label, label 0 first.
    fingerprint : str
        The set's content fingerprint.
    """

    split: str
    n_images: int
    image_shape: tuple[int, ...]
    dtype: str
    pixel_min: int
    pixel_max: int
    class_counts: tuple[int, ...]
    fingerprint: str


@dataclass(frozen=True)
class SourceDescription:
    """A data source and each of its splits."""

    name: str
    root: str | None
    classes: tuple[str, ...]
    splits: tuple[SetSummary, ...]


def summarize(data: ArraySet, split: str, n_classes: int) -> SetSummary:
    """Describe one set; labels are counted from 0 to ``n_classes - 1`` (and beyond, if present)."""
    return SetSummary(
        split=split,
        n_images=len(data),
        image_shape=tuple(int(d) for d in data.x.shape[1:]),
        dtype=str(data.x.dtype),
        pixel_min=int(data.x.min()) if len(data) else 0,
        pixel_max=int(data.x.max()) if len(data) else 0,
        class_counts=tuple(int(c) for c in np.bincount(data.y, minlength=n_classes)),
        fingerprint=data.fingerprint,
    )


def describe_source(name: str, root: str | Path | None = None, image: ImageFormat = ImageFormat()) -> SourceDescription:
    """Read every split of source ``name`` and describe it.

    Parameters
    ----------
    name : str
        One of :data:`SOURCE_NAMES`.
    root : str or Path, optional
        The folder holding the source's files; not given for a built-in set.

    Raises
    ------
    InputError
        If ``name`` is unknown, a root (or an image format) is given for a built-in set, or files are missing.
    """
    if name in BUILTIN_SETS:
        if not image.is_default:
            raise InputError(f"{name}: expected no --image-size or --channels (its images are 28x28 grey)")
        if root is not None:
            raise InputError(f"{name}: expected no root (its images ship with the package or scikit-learn), got {root}")
        summary = summarize(BUILTIN_SETS[name](), BUILTIN_SPLIT, len(DIGIT_CLASSES))
        return SourceDescription(name, None, DIGIT_CLASSES, (summary,))
    check_choice("data source", name, SOURCE_NAMES)
    source = open_source(name, root, image_size=image.size, channels=image.channels)
    summaries = tuple(summarize(source.load(split), split, len(source.classes)) for split in source.splits)
    return SourceDescription(name, str(source.root), source.classes, summaries)
