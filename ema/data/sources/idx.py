"""IDX files (MNIST, Fashion-MNIST), read with numpy; plain or gzip-compressed.

The IDX format: two zero bytes, a type code, the number of dimensions, each dimension
as a big-endian int32, then the values in big-endian order.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import ClassVar

import numpy as np

from ema.data.arrays import ArraySet
from ema.data.sources.base import ImageSource
from ema.errors import InputError

#: IDX type codes and the big-endian numpy dtype of each.
IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
IDX_HEADER_BYTES = 4
IDX_DIMENSION_BYTES = 4
GZIP_SUFFIX = ".gz"
#: File stems of each split: (images, labels).
IDX_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def read_idx(path: str | Path) -> np.ndarray:
    """The array stored in an IDX file (``.gz`` files are decompressed).

    Raises
    ------
    InputError
        If the header is not an IDX header or the data does not fill the dimensions it states.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == GZIP_SUFFIX else open
    try:
        with opener(path, "rb") as handle:
            raw = handle.read()
    except (OSError, EOFError) as exc:
        raise InputError(f"{path}: expected a readable IDX file, got: {exc}") from exc
    if len(raw) < IDX_HEADER_BYTES or raw[:2] != b"\x00\x00" or raw[2] not in IDX_DTYPES:
        raise InputError(
            f"{path}: expected an IDX header (two zero bytes, a type code from "
            f"{sorted(IDX_DTYPES)}, the number of dimensions), got {raw[:IDX_HEADER_BYTES]!r}"
        )
    dtype, ndim = np.dtype(IDX_DTYPES[raw[2]]), raw[3]
    data_start = IDX_HEADER_BYTES + IDX_DIMENSION_BYTES * ndim
    if len(raw) < data_start:
        raise InputError(f"{path}: expected {ndim} dimension sizes after the header, got a file of {len(raw)} bytes")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">i4", count=ndim, offset=IDX_HEADER_BYTES))
    expected_bytes = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - data_start != expected_bytes:
        raise InputError(f"{path}: expected {expected_bytes} data bytes for shape {shape}, got {len(raw) - data_start}")
    return np.frombuffer(raw, dtype=dtype, offset=data_start).reshape(shape).astype(dtype.newbyteorder("="))


class IDXImages(ImageSource):
    """Images and labels in IDX files named as MNIST names them, under :attr:`folder` of ``root``.

    Each file may be stored plain or gzip-compressed (``name`` or ``name.gz``); the plain
    file is read when both are there.
    """

    splits = ("train", "test")
    #: Sub-folder of ``root`` that holds the files.
    folder: ClassVar[str] = "."

    def _required(self, split: str) -> tuple[Path, ...]:
        return tuple(self.root / self.folder / stem for stem in IDX_FILES[split])

    def _exists(self, path: Path) -> bool:
        return self._resolve(path) is not None

    def _describe(self, paths: list[Path] | tuple[Path, ...]) -> str:
        return ", ".join(f"{path.relative_to(self.root)}[{GZIP_SUFFIX}]" for path in paths)

    @staticmethod
    def _resolve(path: Path) -> Path | None:
        """``path`` itself, else its ``.gz``, else None."""
        for candidate in (path, path.with_name(path.name + GZIP_SUFFIX)):
            if candidate.is_file():
                return candidate
        return None

    def _load(self, split: str) -> ArraySet:
        image_path, label_path = (self._resolve(path) for path in self._required(split))
        x, y = read_idx(image_path), read_idx(label_path)
        if x.dtype != np.uint8 or x.ndim != 3:
            raise InputError(
                f"{image_path}: expected uint8 images of shape (n, height, width), got {x.dtype} of shape {x.shape}"
            )
        if y.ndim != 1 or y.shape[0] != x.shape[0]:
            raise InputError(
                f"{label_path}: expected {x.shape[0]} labels (one per image in {image_path.name}), got shape {y.shape}"
            )
        return self._array_set(split, x, y)


class MNIST(IDXImages):
    """MNIST in torchvision's layout (nothing is downloaded)::

        ROOT/MNIST/raw/train-images-idx3-ubyte[.gz]
        ROOT/MNIST/raw/train-labels-idx1-ubyte[.gz]
        ROOT/MNIST/raw/t10k-images-idx3-ubyte[.gz]
        ROOT/MNIST/raw/t10k-labels-idx1-ubyte[.gz]

    Splits ``train`` (60,000 images) and ``test`` (10,000), labels 0-9.
    """

    name = "mnist"
    classes = tuple(str(digit) for digit in range(10))
    folder = "MNIST/raw"


class FashionMNIST(IDXImages):
    """Fashion-MNIST's IDX files directly under ``root``; by default where the Debian
    package ``dataset-fashion-mnist`` installs them::

        /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
        /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz
        /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz
        /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz

    Splits ``train`` (60,000 images) and ``test`` (10,000), ten classes of clothing.
    """

    name = "fashion"
    classes = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
    default_root = Path("/usr/share/datasets/fashion-mnist")
