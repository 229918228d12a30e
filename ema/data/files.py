"""Split and query files: ``.npz`` with arrays ``x`` (uint8, N x 28 x 28), ``y`` (int64), ``index`` (int64)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from ema.data.arrays import ArraySet
from ema.errors import InputError

REQUIRED_ARRAYS = ("x", "y", "index")


def write_set(data: ArraySet, path: Path) -> Path:
    """Write one set as a compressed ``.npz``; the file appears whole or not at all."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as handle:
        np.savez_compressed(handle, x=data.x, y=data.y, index=data.index)
    partial.replace(path)
    return path


def read_set(path: Path, *, image_shape: tuple[int, int] = (28, 28)) -> ArraySet:
    """Read and validate a query file written by :func:`write_set` or by a user.

    Never unpickles: object arrays are refused.

    Raises
    ------
    InputError
        If the file is missing, not an ``.npz``, lacks an array, or an array has the wrong
        dtype or shape, or the set is empty.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"query file {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [name for name in REQUIRED_ARRAYS if name not in data.files]
            if missing:
                raise InputError(
                    f"{path}: expected arrays {list(REQUIRED_ARRAYS)}, missing {missing} (found {data.files})"
                )
            arrays = {name: data[name] for name in REQUIRED_ARRAYS}
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{path}: expected an .npz file of numpy arrays without pickled objects, got: {exc}") from exc
    x = arrays["x"]
    if x.ndim != 3 or x.shape[1:] != image_shape:
        raise InputError(f"{path}: expected `x` of shape (n, {image_shape[0]}, {image_shape[1]}), got {x.shape}")
    if x.shape[0] == 0:
        raise InputError(f"{path}: expected at least one image, got an empty query set")
    return ArraySet(path.stem, x, arrays["y"], arrays["index"])
