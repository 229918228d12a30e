"""Images into the shape a model declares: channels first or last, flattened, or reshaped to as many values.

:func:`ema.inputs.prepare_inputs` scales the pixels, then shapes them here. Nothing is resized:
images that do not fit are refused in one line that names both shapes and what to change
(their channels, their size, or the shape given with ``--input-shape``).

A model that takes images flat, a tensor of shape (-1, H*W*C) or H*W*C pixel columns, was
trained on them flattened one way or the other: channel by channel (``chw``), as torch's
``Flatten`` turns (n, C, H, W) tensors into rows, or pixel by pixel (``hwc``), as numpy's
``x.reshape(n, -1)`` turns (n, H, W, C) images into rows (what scikit-learn users do). The two
give a colour image's values in other orders; a model fed the other order sees scrambled
pixels (``--pixel-order``). Grey images flatten alike either way, and a declared (C, H, W) or
(H, W, C) shape places the channels itself.
"""

from __future__ import annotations

import numpy as np

from ema.errors import InputError

#: How a colour image's values are ordered when it is flattened: channel by channel, or pixel by pixel.
PIXEL_ORDERS = ("chw", "hwc")
#: Channel by channel, as torch's ``Flatten`` of (n, C, H, W) tensors (and the workbench's own models).
DEFAULT_PIXEL_ORDER = PIXEL_ORDERS[0]


def images_shape(
    x: np.ndarray, shape: tuple[int, ...] | None, channels_last: int | None = None
) -> tuple[int, ...] | None:
    """The shape images ``x`` (stored uint8 (n, H, W[, C]), or float pixels (n, C, H, W)) go to a model in.

    ``shape`` is the model's declared one (None: as they come); ``channels_last`` the channel count
    of a signature of variable height and width that puts channels last, (-1, -1, -1, C): the
    images then go as (-1, H, W, C) at their own height and width.

    Raises
    ------
    InputError
        If the images have another channel count than ``channels_last``, saying how to convert them.
    """
    if channels_last is None:
        return shape
    stored = x.shape[1:] if x.dtype == np.uint8 else _stored_shape(x)
    (height, width), channels = stored[:2], (stored[2] if len(stored) == 3 else 1)
    if channels != channels_last:
        raise InputError(
            f"expected images that fit the model's declared input shape (-1, -1, -1, {channels_last}), got "
            f"images of shape {stored}; {_shape_advice((channels, height, width), (height, width, channels_last))}"
        )
    return (-1, height, width, channels_last)


def integer_pixels(x: np.ndarray) -> np.ndarray:
    """Pixel values 0-255 as uint8 (n, C, H, W), from stored images or float pixels in [0, 1]."""
    if x.dtype != np.uint8:
        return np.rint(np.clip(x, 0, 1) * 255).astype(np.uint8)
    return x[:, None, :, :] if x.ndim == 3 else x.transpose(0, 3, 1, 2)


def fit_shape(chw: np.ndarray, shape: tuple[int, ...] | None, pixel_order: str = DEFAULT_PIXEL_ORDER) -> np.ndarray:
    """Channels-first images in the declared shape: as they are, channels last, or reshaped to as many values
    taken in ``pixel_order``."""
    if shape is None or chw.shape[1:] == shape[1:]:
        return chw
    if chw.ndim == 4 and tuple(shape[1:]) == (*chw.shape[2:], chw.shape[1]):
        return chw.transpose(0, 2, 3, 1)
    values = int(np.prod(chw.shape[1:]))
    if int(np.prod(shape[1:])) != values:
        raise InputError(
            f"expected images that fit the model's declared input shape {shape}, got images of shape "
            f"{_stored_shape(chw)} ({values} values); {_shape_advice(chw.shape[1:], tuple(shape[1:]))}"
        )
    return flatten_images(chw, pixel_order).reshape(len(chw), *shape[1:])


def _shape_advice(chw: tuple[int, ...], declared: tuple[int, ...]) -> str:
    """What to change when images do not fit a declared shape: their channels, their size, or the shape itself.

    A declared image shape is (C, H, W) or (H, W, C) with 1-4 channels; images of another
    channel count need converting by the user (the audit scores the inputs it is given).
    """
    channels, *size = chw
    layouts = ((declared[0], declared[1:]), (declared[-1], declared[:-1])) if len(declared) == 3 else ()
    for wanted, side in layouts:
        if 1 <= wanted <= 4 and wanted != channels:
            how = {
                (1, 3): "a grey image repeated: np.repeat(x[..., None], 3, axis=-1)",
                (3, 1): "colour made grey by BT.601 luma, as the workbench's own folders are read: "
                "ema.data.sources.images.to_grey(x)",
            }.get((channels, wanted), "converted as the model was trained")
            resize = f", {side[0]}x{side[1]} (--image-size)" if tuple(side) != tuple(size) else ""
            return (
                f"the model takes {wanted}-channel images and these have {channels}: write the query, calibration "
                f"and reference files with {wanted} channel{'s' if wanted > 1 else ''} ({how}){resize}"
            )
    side = declared[1:] if len(declared) == 3 and declared[0] in (1, 3, 4) else declared[:2]
    size_words = f" {side[0]}" if len(declared) == 3 and side[0] == side[1] else " N"
    return f"give the model's shape with --input-shape, or resize the images with --image-size{size_words}"


def _stored_shape(chw: np.ndarray) -> tuple[int, ...]:
    """How a user sees the images: (H, W) for grey, (H, W, C) for colour."""
    channels, *size = chw.shape[1:]
    return tuple(size) if channels == 1 else (*size, channels)


def flatten_images(chw: np.ndarray, pixel_order: str) -> np.ndarray:
    """Images (n, C, H, W) as one row of values each, in ``pixel_order``; other arrays (a table) as rows.

    ``chw``: channel by channel; ``hwc``: pixel by pixel, as ``x.reshape(n, -1)`` of the
    (n, H, W, C) images. Colour pixels that are channels-last in memory (as
    :func:`ema.inputs.to_model_inputs` makes them) become ``hwc`` rows without a copy.
    """
    ordered = chw.transpose(0, 2, 3, 1) if pixel_order == "hwc" and chw.ndim == 4 else chw
    return ordered.reshape(len(ordered), -1)


def orders_pixels(shape: tuple[int, ...] | None, image_shape: tuple[int, ...]) -> bool:
    """Whether the pixel order changes what a model declaring ``shape`` (-1, ...) gets for images of ``image_shape``.

    True for colour images (H, W, C) flattened or reshaped to fit the shape; False for grey
    images, for a declared (C, H, W) or (H, W, C) shape, and for none (images go as they come).
    """
    if shape is None or len(image_shape) != 3 or image_shape[-1] == 1:
        return False
    height, width, channels = image_shape
    return tuple(shape[1:]) not in ((channels, height, width), (height, width, channels))


def parse_input_shape(text: str) -> tuple[int, ...]:
    """``--input-shape``: sizes after the batch, comma-separated (``784``, ``28,28``, ``1,28,28``, ``28,28,1``).

    A leading ``-1`` (the batch) is accepted. Returns ``(-1, ...)``.

    >>> parse_input_shape("28,28,1")
    (-1, 28, 28, 1)
    """
    try:
        sizes = [int(part) for part in str(text).replace(" ", "").split(",")]
    except ValueError as exc:
        raise InputError(
            f"expected --input-shape as comma-separated sizes after the batch (e.g. 784 or 1,28,28), got {text!r}"
        ) from exc
    if sizes and sizes[0] == -1:
        sizes = sizes[1:]
    if not sizes or any(size < 1 for size in sizes):
        raise InputError(
            f"expected --input-shape as positive sizes after the batch (e.g. 784 or 1,28,28), got {text!r}"
        )
    return (-1, *sizes)
