"""Turning decoded pictures into uint8 images: colour to grey, resizing, image files.

Array transforms are vectorised over the whole batch (resizing is two small matrix
products per batch); image files are decoded one at a time, with Pillow, and resized
(centre-cropped to a square, then bilinear) only when a size is asked for:
:func:`fit_square` is the one resizing both image folders and ``ema audit --image-size`` use.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from ema.data.arrays import ArraySet
from ema.errors import InputError

#: ITU-R BT.601 luma weights for R, G, B: the grey that Pillow's mode "L" computes.
LUMA_WEIGHTS = np.array([0.299, 0.587, 0.114], dtype=np.float32)
#: Images resized per matrix product, to bound the float32 working memory.
RESIZE_BATCH = 8_192
#: File suffixes read as images in image folders (compared lower-case).
IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")
PIXEL_MAX = 255
#: Pillow's mode for each channel count an image folder can be read with.
CHANNEL_MODES = {1: "L", 3: "RGB"}
#: Distinct image sizes named in a refusal before the rest are counted.
MAX_LISTED_SIZES = 4
#: Pillow's modes of grey images of more than 8 bits (16-bit PNGs, 32-bit integer TIFFs).
WIDE_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I")
#: The bit depths grey images of more than 8 bits are read at: the smallest that holds their values.
WIDE_DEPTHS = (8, 12, 16, 32)


def wide_depth(maximum: int) -> int:
    """The smallest of the usual bit depths (:data:`WIDE_DEPTHS`) that holds raw pixel value ``maximum``."""
    return next(depth for depth in WIDE_DEPTHS if maximum < 2**depth)


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


def resize_images(x: np.ndarray, size: int | tuple[int, int]) -> np.ndarray:
    """uint8 images (n, height, width[, channels]) resized to ``size`` (a side, or (height, width)) by area
    averaging or linear interpolation; returned as is when already that size."""
    out_height, out_width = (size, size) if isinstance(size, int) else size
    height, width = x.shape[1:3]
    if (height, width) == (out_height, out_width):
        return x
    planes = x if x.ndim == 3 else np.moveaxis(x, 3, 1)  # (n[, channels], height, width)
    rows, cols = _resampling_matrix(height, out_height), _resampling_matrix(width, out_width).T
    out = np.empty((*planes.shape[:-2], out_height, out_width), dtype=np.uint8)
    for start in range(0, len(planes), RESIZE_BATCH):
        batch = planes[start : start + RESIZE_BATCH].astype(np.float32)
        out[start : start + RESIZE_BATCH] = np.rint(rows @ batch @ cols).clip(0, PIXEL_MAX).astype(np.uint8)
    return out if x.ndim == 3 else np.moveaxis(out, 1, 3).copy()


def to_channels(x: np.ndarray, channels: int) -> np.ndarray:
    """uint8 images as ``channels`` (1: grey (n, H, W), 3: colour (n, H, W, 3)): grey by luma, colour by repeating."""
    colour = x.ndim == 4
    if channels == 1:
        return to_grey(x[..., :3]) if colour else x
    if colour:
        return x[..., :3] if x.shape[3] >= 3 else np.repeat(x[..., :1], 3, axis=3)
    return np.repeat(x[..., None], 3, axis=3)


def fit_square(image: Image.Image, side: int) -> Image.Image:
    """``image`` centre-cropped to a square and resized to ``side`` x ``side``, bilinear (Pillow's ``ImageOps.fit``)."""
    return ImageOps.fit(image, (side, side), method=Image.Resampling.BILINEAR)


def fit_square_images(x: np.ndarray, side: int) -> np.ndarray:
    """uint8 images (n, H, W[, C]) each centre-cropped to a square and resized to ``side`` by :func:`fit_square`."""
    if x.shape[1:3] == (side, side):
        return x
    return np.stack([np.asarray(fit_square(Image.fromarray(image), side), dtype=np.uint8) for image in x])


def resize_set(data: ArraySet, side: int) -> ArraySet:
    """A set's images each centre-cropped to a square and resized to ``side`` (``--image-size``); the same set when
    they already are.

    Raises
    ------
    InputError
        If the set is a table.
    """
    if data.kind != "image":
        raise InputError(f"{data.name}: expected images to resize with --image-size, got a {data.describe()}")
    resized = fit_square_images(data.x, side)
    return data if resized is data.x else ArraySet(data.name, resized, data.y, data.index)


@dataclass(frozen=True)
class DecodedImages:
    """Image files as decoded: uint8 images, or, for grey images of more than 8 bits, their raw values (int32) and
    the largest of them as the files hold it (before any resizing), which decides the depth they are scaled by."""

    values: np.ndarray
    channels: int
    raw_maximum: int | None = None

    def to_uint8(self, depth: int | None = None) -> np.ndarray:
        """uint8 (n, H, W) grey or (n, H, W, 3) colour: raw values of more than 8 bits scaled by 255 / (2**depth - 1).

        ``depth`` should be the whole data source's (see :class:`~ema.data.sources.base.ImageFileSource`), so that
        its splits share one scale; None takes these files' own (:func:`wide_depth` of :attr:`raw_maximum`).
        """
        if self.raw_maximum is None:
            return self.values
        bits = depth if depth is not None else wide_depth(self.raw_maximum)
        grey = np.rint(self.values * (PIXEL_MAX / (2**bits - 1))).clip(0, PIXEL_MAX).astype(np.uint8)
        return to_channels(grey, self.channels)


def decode_image_files(paths: Sequence[Path], side: int | None = None, *, channels: int = 1) -> DecodedImages:
    """Decode image files, at their own size or resized, as (n, H, W) grey or (n, H, W, 3) colour.

    With ``side``, each image is centre-cropped to a square and resized to ``side`` x ``side``
    (:func:`fit_square`); JPEGs are then decoded at the smallest scale that still covers
    ``side`` (Pillow's draft mode), which makes large X-rays quick to read. Without it, the
    images keep their own size, which must then be the same for all.

    Grey images of more than 8 bits (16-bit PNGs of 12-bit X-ray values, as exported from DICOM)
    keep their raw values, to be scaled to 0-255 by :meth:`DecodedImages.to_uint8` at the data
    source's bit depth: Pillow's own conversion to 8 bits would clip every value above 255 to white.

    Raises
    ------
    InputError
        If a file is not an image Pillow can read, (without ``side``) the images differ in size, or
        the folder mixes 8-bit images with wider ones.
    """
    sizes, wide = _headers(paths)
    height, width = (side, side) if side is not None else _common_size(paths, sizes)
    mode = "I" if wide else CHANNEL_MODES[channels]
    shape = (len(paths), height, width, *((channels,) if channels > 1 and not wide else ()))
    out = np.empty(shape, dtype=np.int32 if wide else np.uint8)
    maximum = 0
    for position, path in enumerate(paths):
        with _opened(path) as image:
            if side is not None:
                image.draft(mode, (side, side))
            decoded = image.convert(mode)
            if wide:
                maximum = max(maximum, int(decoded.getextrema()[1]))
            out[position] = np.asarray(fit_square(decoded, side) if side is not None else decoded)
    return DecodedImages(out, channels, maximum if wide else None)


def largest_wide_value(paths: Sequence[Path]) -> int | None:
    """The largest raw value of grey image files of more than 8 bits, as the files hold it; None for 8-bit images
    (then only their headers are read).

    Raises
    ------
    InputError
        If a file is not an image Pillow can read, or the files mix 8-bit images with wider ones.
    """
    if not _headers(paths)[1]:
        return None
    maximum = 0
    for path in paths:
        with _opened(path) as image:
            maximum = max(maximum, int(image.getextrema()[1]))
    return maximum


@contextmanager
def _opened(path: Path) -> Iterator[Image.Image]:
    """``path`` opened with Pillow; refused in one line naming the file when Pillow cannot read it."""
    try:
        with Image.open(path) as image:
            yield image
    except OSError as exc:
        raise InputError(f"{path}: expected an image file Pillow can read, got: {exc}") from exc


def _headers(paths: Sequence[Path]) -> tuple[dict[tuple[int, int], int], bool]:
    """What the files' headers say, read once: how many images of each (height, width), and whether they are grey
    images of more than 8 bits (refused when some are and some are not)."""
    sizes: dict[tuple[int, int], int] = {}
    wide = []
    for path in paths:
        with _opened(path) as image:
            width, height = image.size
            wide.append(image.mode in WIDE_MODES)
        sizes[(height, width)] = sizes.get((height, width), 0) + 1
    if any(wide) and not all(wide):
        first = paths[wide.index(True)]
        raise InputError(
            f"{Path(first).parent}: expected images of one bit depth, got {sum(wide)} grey images of more "
            f"than 8 bits (such as {first}) and {wide.count(False)} of 8 bits; convert them to one depth first"
        )
    return sizes, bool(wide) and all(wide)


def _common_size(paths: Sequence[Path], counts: dict[tuple[int, int], int]) -> tuple[int, int]:
    """The (height, width) every image has (``counts``: images per size); refused when they differ."""
    if len(counts) > 1:
        common = sorted(counts.items(), key=lambda item: -item[1])
        sizes = ", ".join(f"{w}x{h} ({n} files)" for (h, w), n in common[:MAX_LISTED_SIZES])
        more = f" and {len(common) - MAX_LISTED_SIZES} more sizes" if len(common) > MAX_LISTED_SIZES else ""
        folder = Path(paths[0]).parent.parent
        raise InputError(
            f"{folder}: expected images of one size to read them at their own size, got {len(common)} sizes "
            f"(width x height): {sizes}{more}; give --image-size N to resize them to N x N"
        )
    return next(iter(counts), (0, 0))


def list_image_files(folder: Path) -> list[Path]:
    """The image files directly in ``folder``, sorted by name."""
    return sorted(path for path in folder.iterdir() if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES)
