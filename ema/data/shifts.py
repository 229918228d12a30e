"""One-pixel shifts of images: each sample seen as itself and its 8 neighbours (``ema audit --augment shifts``).

A trained image model has seen each of its training images in one position; a member's
neighbours one pixel away keep more of its memorization than a non-member's do. Querying the
black box on all nine views (the identity first, then the 8 one-pixel shifts, zero-filled)
gives the auditor a vector per sample instead of one number (LiRA's augmented queries,
Carlini et al. 2022). Pure numpy: the shifts are whole-array slices, never a loop over samples.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ema.data.arrays import ArraySet
from ema.errors import InputError

#: ``--augment`` values: no augmentation, or the identity and the 8 one-pixel shifts.
AUGMENT_NONE = "none"
AUGMENT_SHIFTS = "shifts"
AUGMENTATIONS = (AUGMENT_NONE, AUGMENT_SHIFTS)
#: (rows, columns) each view moves the image by; the identity first.
SHIFT_OFFSETS: tuple[tuple[int, int], ...] = (
    (0, 0),
    *((dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)),
)
#: Views per sample under ``--augment shifts`` (the query cost multiplies by it).
N_SHIFT_VIEWS = len(SHIFT_OFFSETS)


def shift_views(x: np.ndarray, offsets: Sequence[tuple[int, int]] = SHIFT_OFFSETS) -> np.ndarray:
    """Every image moved by each of ``offsets`` (the audit's :data:`SHIFT_OFFSETS`), the pixels moved in being 0.

    Parameters
    ----------
    x : ndarray of shape (n, H, W) or (n, H, W, C)
        Images (any dtype; the workbench's are uint8).
    offsets : sequence of (rows, columns)
        The moves, in views' order; other offsets than the audit's serve the study of which views
        carry information (:mod:`ema.experiments.errors.view_families`).

    Returns
    -------
    ndarray of shape (len(offsets), n, H, W[, C])
        ``out[v][:, i, j] == x[:, i - dy, j - dx]`` for the v-th offset ``(dy, dx)`` where that
        pixel exists, else 0 (``np.roll`` without the wrap-around); with the default offsets
        ``out[0]`` is ``x``.

    Raises
    ------
    InputError
        If ``x`` has not 3 or 4 dimensions, or an offset moves the images out of their frame.

    Examples
    --------
    >>> shift_views(np.arange(4, dtype=np.uint8).reshape(1, 2, 2))[1, 0].tolist()
    [[3, 0], [0, 0]]
    """
    if x.ndim not in (3, 4):
        raise InputError(f"expected images of shape (n, H, W) or (n, H, W, C) to shift, got shape {x.shape}")
    height, width = x.shape[1:3]
    for dy, dx in offsets:
        if abs(dy) >= height or abs(dx) >= width:
            raise InputError(
                f"expected offsets within the images ({height} x {width}: at most {height - 1} rows and "
                f"{width - 1} columns), got ({dy}, {dx})"
            )
    out = np.zeros((len(offsets), *x.shape), dtype=x.dtype)
    for view, (dy, dx) in enumerate(offsets):  # one whole-array copy a view
        out[view, :, max(dy, 0) : height + min(dy, 0), max(dx, 0) : width + min(dx, 0)] = x[
            :, max(-dy, 0) : height + min(-dy, 0), max(-dx, 0) : width + min(-dx, 0)
        ]
    return out


def shifted_set(data: ArraySet) -> ArraySet:
    """``data``'s 8 shifted views (:func:`shift_views` without the identity) as one set of ``8 n`` images, view-major.

    The identity is left out: an audit has scored ``data`` itself already.

    Raises
    ------
    InputError
        If ``data`` is a table: ``--augment shifts`` moves pixels, and a table has none.
    """
    if data.kind != "image":
        raise InputError(
            f"expected images with --augment shifts (it moves pixels), got {data.describe()} in {data.name}; "
            f"use --augment {AUGMENT_NONE} for tables"
        )
    shifted = shift_views(data.x)[1:]
    return ArraySet(
        f"{data.name} shifted",
        shifted.reshape(-1, *data.x.shape[1:]),
        np.tile(data.y, N_SHIFT_VIEWS - 1),
        np.tile(data.index, N_SHIFT_VIEWS - 1),
    )
