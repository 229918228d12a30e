"""Turning decoded pictures into uint8 grey squares: colour to grey, resizing, image files.

Array transforms are vectorised over the whole batch (resizing is two small matrix
products per batch); only image files are decoded one at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from ema.errors import InputError

#: ITU-R BT.601 luma weights for R, G, B: the grey that Pillow's mode "L" computes.
LUMA_WEIGHTS = np.array([0.299, 0.587, 0.114], dtype=np.float32)
#: Images resized per matrix product, to bound the float32 working memory.
RESIZE_BATCH = 8_192
#: File suffixes read as images in image folders (compared lower-case).
IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")
PIXEL_MAX = 255


def to_grey(x: np.ndarray) -> np.ndarray:
    """uint8 colour images of shape (n, height, width, 3) as uint8 grey (n, height, width)."""
    return np.rint(x.astype(np.float32) @ LUMA_WEIGHTS).clip(0, PIXEL_MAX).astype(np.uint8)


def _resampling_matrix(n_in: int, n_out: int) -> np.ndarray:
    """Weights (n_out, n_in) that resample a line of n_in pixels to n_out.

    Shrinking averages the input pixels each output pixel covers (area resampling, no
    aliasing); growing interpolates linearly between pixel centres.
    """
    if n_out < n_in:
        scale = n_in / n_out
        edges = np.arange(n_out + 1) * scale
        pixels = np.arange(n_in)[None, :]
        overlap = np.minimum(edges[1:, None], pixels + 1) - np.maximum(edges[:-1, None], pixels)
        return (np.clip(overlap, 0.0, None) / scale).astype(np.float32)
    centres = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
    low = np.floor(centres).astype(np.int64)
    high = np.minimum(low + 1, n_in - 1)
    weights = np.zeros((n_out, n_in), dtype=np.float32)
    rows = np.arange(n_out)
    np.add.at(weights, (rows, low), 1.0 - (centres - low))
    np.add.at(weights, (rows, high), centres - low)
    return weights


def resize_images(x: np.ndarray, side: int) -> np.ndarray:
    """uint8 images (n, height, width) resized to uint8 (n, side, side); returned as is when already that size."""
    n, height, width = x.shape
    if (height, width) == (side, side):
        return x
    rows, cols = _resampling_matrix(height, side), _resampling_matrix(width, side).T
    out = np.empty((n, side, side), dtype=np.uint8)
    for start in range(0, n, RESIZE_BATCH):
        batch = x[start : start + RESIZE_BATCH].astype(np.float32)
        out[start : start + RESIZE_BATCH] = np.rint(rows @ batch @ cols).clip(0, PIXEL_MAX).astype(np.uint8)
    return out


def read_image_files(paths: Sequence[Path], side: int) -> np.ndarray:
    """Decode image files as uint8 grey (n, side, side): centre-cropped to a square, then resized.

    JPEGs are decoded at the smallest scale that still covers ``side`` (Pillow's draft
    mode), which makes large X-rays quick to read.

    Raises
    ------
    InputError
        If a file is not an image Pillow can read.
    """
    out = np.empty((len(paths), side, side), dtype=np.uint8)
    for position, path in enumerate(paths):
        try:
            with Image.open(path) as image:
                image.draft("L", (side, side))
                square = ImageOps.fit(image.convert("L"), (side, side), method=Image.Resampling.BILINEAR)
        except OSError as exc:
            raise InputError(f"{path}: expected an image file Pillow can read, got: {exc}") from exc
        out[position] = np.asarray(square, dtype=np.uint8)
    return out


def list_image_files(folder: Path) -> list[Path]:
    """The image files directly in ``folder``, sorted by name."""
    return sorted(path for path in folder.iterdir() if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES)
