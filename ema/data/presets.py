"""Split presets: which pool each data source draws its splits from, at which sizes.

- ``mnist-embedded``: the 10,000 embedded MNIST images; S is 1,000 scikit-learn digits;
  :data:`~ema.data.splits.EMBEDDED_SIZES` (exactly :func:`~ema.data.splits.make_splits`).
- ``mnist``: the user's MNIST ``train`` split (60,000) at the paper's sizes
  (:data:`~ema.data.splits.PAPER_SIZES`); S is 2,000 SVHN ``test`` images when
  ``ROOT/test_32x32.mat`` sits beside ``ROOT/MNIST`` (torchvision's layout), else 1,000
  scikit-learn digits.
- ``fashion``: Fashion-MNIST ``train`` (60,000) at the paper's sizes; S is 2,000 embedded
  MNIST images; 10,000 of the 47,000 images the paper's sizes leave unused are the
  non-member reference (:data:`FASHION_SIZES`), ten times the calibration set.
- ``pneumoniamnist``, ``chest-xray``, ``covidx`` (binary): the source's ``train`` split;
  S is scikit-learn digits with labels folded into the binary range (``digit % 2``: an
  other-domain image has no true label among the target's classes, folding keeps the
  label-based signals defined). Sizes are the paper's scaled by
  ``min(1, pool / 13,000)``, rounded down: PneumoniaMNIST's 4,708 training images give
  five folds of 724, 362 calibration, 724 held out and 724 in S; the pediatric chest
  X-rays' 5,216 give 802 / 401 / 802 / 802; COVIDx (about 30,000) gets the paper's sizes
  with S capped at the 1,797 digits there are.
- ``breast-cancer``: scikit-learn's Breast Cancer Wisconsin table (569 x 30), split by
  :meth:`~ema.data.splits.SplitSizes.for_pool` (5 x 63, 126 calibration, 128 held out); no S.
- ``file`` (:data:`FILE_SOURCE`, not a ``--data`` choice: ``--data-file``): a user's set file
  (``.csv``, ``.parquet`` or ``.npz``; ``root`` is its path), split the same way.

Only the ``train`` split of a source is drawn from, so ``index`` is a position in that
split's file.

The binary sources read their images in an :class:`~ema.data.sources.ImageFormat`
(``--image-size``, ``--channels``; image folders default to the images' own size), and S is
made to match (resized, grey or colour); the MNIST-like sources stay 28x28 grey.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ema.data.arrays import ArraySet
from ema.data.embedded import load_breast_cancer_table, load_digits_28, load_mnist_embedded
from ema.data.files import read_set, resolved_if_present
from ema.data.sources import SVHN, ImageFormat, open_source
from ema.data.sources.images import resize_images, to_channels
from ema.data.splits import EMBEDDED_SIZES, PAPER_SIZES, Splits, SplitSizes, draw_splits
from ema.data.tables import DEFAULT_LABEL_COLUMN
from ema.errors import InputError
from ema.inputs import listed_names, numeric_columns
from ema.validation import check_choice

#: The split every preset draws its in-domain pool from.
POOL_SPLIT = "train"
#: The SVHN split used as MNIST's other domain.
SVHN_QUERY_SPLIT = "test"
#: Binary sources: the split sizes are scaled to their pool.
BINARY_SOURCES = ("pneumoniamnist", "chest-xray", "covidx")
#: The source of ``--data-file``: a user's set file, its path as the root.
FILE_SOURCE = "file"
#: Fashion-MNIST's sizes: the paper's, and a non-member reference of 10,000 unused images (the floor of the
#: certifiable margin, 1.645 / sqrt(n_ref I), falls by sqrt(10) against the 1,000 calibration images).
FASHION_SIZES = replace(PAPER_SIZES, reference=10_000)


@dataclass(frozen=True)
class SplitPlan:
    """What a preset draws from: the in-domain pool, the other-domain pool and the sizes."""

    pool: ArraySet
    other_pool: ArraySet | None
    sizes: SplitSizes


def _embedded_plan(root: Path | None, image: ImageFormat) -> SplitPlan:
    _check_28x28("mnist-embedded", image)
    if root is not None:
        raise InputError(f"mnist-embedded: expected no root (its images ship with the package), got {root}")
    return SplitPlan(load_mnist_embedded(), load_digits_28(), EMBEDDED_SIZES)


def _check_28x28(name: str, image: ImageFormat) -> None:
    if not image.is_default:
        raise InputError(
            f"{name}: expected no --image-size or --channels (its images are 28x28 grey), got {image.describe()}; "
            f"they apply to {', '.join(BINARY_SOURCES)}"
        )


def _mnist_plan(root: Path | None, image: ImageFormat) -> SplitPlan:
    _check_28x28("mnist", image)
    pool = open_source("mnist", root).load(POOL_SPLIT)
    svhn = SVHN(root)
    if svhn.available(SVHN_QUERY_SPLIT):
        return SplitPlan(pool, svhn.load(SVHN_QUERY_SPLIT), PAPER_SIZES)
    return SplitPlan(pool, load_digits_28(), replace(PAPER_SIZES, other_domain=EMBEDDED_SIZES.other_domain))


def _fashion_plan(root: Path | None, image: ImageFormat) -> SplitPlan:
    _check_28x28("fashion", image)
    return SplitPlan(open_source("fashion", root).load(POOL_SPLIT), load_mnist_embedded(), FASHION_SIZES)


def _binary_plan(name: str) -> Callable[[Path | None, ImageFormat], SplitPlan]:
    def plan(root: Path | None, image: ImageFormat) -> SplitPlan:
        source = open_source(name, root, image_size=image.size, channels=image.channels)
        pool = source.load(POOL_SPLIT)
        digits = load_digits_28()
        n_classes = len(source.classes)
        folded = ArraySet(f"{digits.name}-mod{n_classes}", digits.x, digits.y % n_classes, digits.index)
        other = _like(folded, pool.x)
        sizes = PAPER_SIZES.scaled(min(1.0, len(pool) / PAPER_SIZES.in_domain))
        return SplitPlan(pool, other, replace(sizes, other_domain=min(sizes.other_domain, len(other))))

    return plan


def _like(data: ArraySet, images: np.ndarray) -> ArraySet:
    """``data``'s images with the size and channels of ``images`` (S made to match the pool)."""
    channels = images.shape[3] if images.ndim == 4 else 1
    x = resize_images(to_channels(data.x, channels), images.shape[1:3])
    return ArraySet(data.name, x, data.y, data.index)


def _check_table(name: str, image: ImageFormat) -> None:
    if not image.is_default:
        raise InputError(f"{name}: expected no --image-size or --channels (it is a table), got {image.describe()}")


def _breast_cancer_plan(root: Path | None, image: ImageFormat) -> SplitPlan:
    _check_table("breast-cancer", image)
    if root is not None:
        raise InputError(f"breast-cancer: expected no root (its table ships with scikit-learn), got {root}")
    pool = load_breast_cancer_table()
    return SplitPlan(pool, None, SplitSizes.for_pool(len(pool)))


def _file_plan(root: Path | None, label_column: str) -> SplitPlan:
    """A user's set file (``root``), split with no other domain; a table's text columns left out (the workbench's
    recipes train on numbers, and an audit reads the target's splits back as they were trained on)."""
    if root is None:
        raise InputError(f"{FILE_SOURCE}: expected the path of a .csv, .parquet or .npz set file, got none")
    pool = read_set(root, role="training data file (ema train --data-file)", label_column=label_column)
    if pool.kind == "table":
        x, kept, left_out = numeric_columns(pool.x, pool.features, where=str(root), taker="the workbench's recipes")
        if left_out:
            logging.getLogger(__name__).warning(
                "%s: %d column(s) of text left out of the training data, as the workbench's recipes take numbers: %s",
                root, len(left_out), listed_names(left_out),
            )  # fmt: skip
            pool = ArraySet(pool.name, x, pool.y, pool.index, kept)
    return SplitPlan(pool, None, SplitSizes.for_pool(len(pool)))


#: Every preset, by data source name.
PRESETS: dict[str, Callable[[Path | None, ImageFormat], SplitPlan]] = {
    "mnist-embedded": _embedded_plan,
    "mnist": _mnist_plan,
    "fashion": _fashion_plan,
    **{name: _binary_plan(name) for name in BINARY_SOURCES},
    "breast-cancer": _breast_cancer_plan,
}


def split_plan(
    name: str,
    root: str | Path | None = None,
    image: ImageFormat = ImageFormat(),
    *,
    label_column: str = DEFAULT_LABEL_COLUMN,
) -> SplitPlan:
    """The pools and sizes the preset ``name`` draws its splits from.

    Parameters
    ----------
    name : str
        A preset from :data:`PRESETS`, or :data:`FILE_SOURCE`.
    root : str or Path, optional
        The folder holding the source's files (see :mod:`ema.data.sources`); not given
        for ``mnist-embedded`` and ``breast-cancer``, optional for ``fashion`` (the Debian
        package's folder); the set file itself for :data:`FILE_SOURCE`.
    image : ImageFormat, optional
        The binary sources' image size and channels (the others refuse any but the default).
    label_column : str, default "label"
        A table file's label column (:data:`FILE_SOURCE` only).

    Raises
    ------
    InputError
        If ``name`` is unknown, or the source's files are missing or malformed.
    """
    root = None if root is None else Path(root)
    if name == FILE_SOURCE:
        return _file_plan(root, label_column)
    return PRESETS[check_choice("data source", name, (*PRESETS, FILE_SOURCE))](root, image)


def preset_splits(
    name: str,
    seed: int = 0,
    root: str | Path | None = None,
    image: ImageFormat = ImageFormat(),
    *,
    label_column: str = DEFAULT_LABEL_COLUMN,
) -> Splits:
    """The splits of preset ``name`` under ``seed``: :func:`draw_splits` over its :func:`split_plan`."""
    plan = split_plan(name, root, image, label_column=label_column)
    return draw_splits(plan.pool, plan.other_pool, plan.sizes, seed=seed)


#: Every data source a run can draw its splits from.
DATA_SOURCES = tuple(PRESETS)
DEFAULT_DATA = "mnist-embedded"


def load_splits(
    data: str = DEFAULT_DATA,
    seed: int = 0,
    root: str | Path | None = None,
    image: ImageFormat = ImageFormat(),
    *,
    label_column: str = DEFAULT_LABEL_COLUMN,
) -> Splits:
    """The splits of a data source under a split seed.

    Parameters
    ----------
    data : str
        One of :data:`DATA_SOURCES`, or :data:`FILE_SOURCE`.
    seed : int, default 0
        Seed of the split draw.
    root : str or Path, optional
        The folder holding the source's files (the file itself for :data:`FILE_SOURCE`); not
        given for ``mnist-embedded`` and ``breast-cancer``.
    image : ImageFormat, optional
        The image size and channels of a binary source (see :func:`split_plan`).
    label_column : str, default "label"
        The label column of a table file (:data:`FILE_SOURCE`).

    Raises
    ------
    InputError
        If ``data`` is unknown, or its files are missing or malformed.

    Notes
    -----
    A source is read once per process and (data, seed, root): a grid audits dozens of cells
    from the same splits. Their arrays are read-only, so no caller can change them for the next.
    """
    return _read_splits(data, seed, resolved_if_present(root) if root is not None else None, image, label_column)


@functools.lru_cache(maxsize=4)
def _read_splits(data: str, seed: int, root: str | None, image: ImageFormat, label_column: str) -> Splits:
    splits = preset_splits(data, seed, root, image, label_column=label_column)
    for part in splits.as_dict().values():
        for array in (part.x, part.y, part.index):
            array.flags.writeable = False
    return splits
