"""One-pixel shifts of images: nine views, the identity first, zero-filled, and the refusal of tables."""

from __future__ import annotations

import numpy as np
import pytest

from ema.data.arrays import ArraySet
from ema.data.shifts import N_SHIFT_VIEWS, SHIFT_OFFSETS, shift_views, shifted_set
from ema.errors import InputError


def images(n: int = 3, height: int = 5, width: int = 4, channels: int | None = None) -> np.ndarray:
    """Images with no zero pixel (1..255), so that a zero can only be fill."""
    shape = (n, height, width) if channels is None else (n, height, width, channels)
    return (np.arange(np.prod(shape)).reshape(shape) % 255 + 1).astype(np.uint8)


@pytest.mark.parametrize("channels", [None, 3])
def test_shift_views_shape_identity_first_and_every_offset_once(channels):
    x = images(channels=channels)
    views = shift_views(x)
    assert views.shape == (N_SHIFT_VIEWS, *x.shape) and views.dtype == x.dtype
    np.testing.assert_array_equal(views[0], x)
    assert SHIFT_OFFSETS[0] == (0, 0) and len(set(SHIFT_OFFSETS)) == N_SHIFT_VIEWS == 9
    assert {abs(dy) + abs(dx) > 0 for dy, dx in SHIFT_OFFSETS[1:]} == {True}


def test_shift_views_equal_a_roll_with_the_wrapped_pixels_zeroed():
    x = images()
    height, width = x.shape[1:]
    for view, (dy, dx) in zip(shift_views(x), SHIFT_OFFSETS, strict=True):
        expected = np.roll(x, (dy, dx), axis=(1, 2))
        wrapped = np.zeros((height, width), bool)
        wrapped[: max(dy, 0), :] = wrapped[height + min(dy, 0) :, :] = True
        wrapped[:, : max(dx, 0)] = wrapped[:, width + min(dx, 0) :] = True
        expected[:, wrapped] = 0
        np.testing.assert_array_equal(view, expected)
        # exactly the wrapped row and column are fill: one row and/or one column of zeros
        assert (view == 0).sum() == len(x) * wrapped.sum()


def test_shift_views_takes_other_offsets_in_their_order():
    x = images(height=6, width=6)
    views = shift_views(x, ((2, -2), (0, 0)))
    assert views.shape == (2, *x.shape)
    np.testing.assert_array_equal(views[1], x)
    np.testing.assert_array_equal(views[0, :, 2:, :4], x[:, :4, 2:])
    assert not views[0, :, :2].any() and not views[0, :, :, 4:].any()


def test_shift_views_refuses_an_offset_as_large_as_the_images():
    x = images(height=4, width=6)
    assert shift_views(x, ((3, -5),)).shape == (1, *x.shape)  # the farthest that keeps a pixel
    for offset in ((4, 0), (0, -6)):
        with pytest.raises(InputError, match=r"expected offsets within the images \(4 x 6: at most 3 rows and 5 "):
            shift_views(x, (offset,))


def test_shift_views_refuses_an_array_that_is_not_images():
    with pytest.raises(InputError, match=r"expected images of shape \(n, H, W\) or \(n, H, W, C\) to shift"):
        shift_views(np.zeros((4, 30)))


def test_shifted_set_holds_the_eight_shifts_view_major_with_labels_tiled():
    x = images(n=4)
    data = ArraySet("q", x, np.arange(4, dtype=np.int64), np.arange(10, 14, dtype=np.int64))
    shifted = shifted_set(data)
    assert len(shifted) == (N_SHIFT_VIEWS - 1) * 4
    np.testing.assert_array_equal(shifted.x.reshape(N_SHIFT_VIEWS - 1, *x.shape), shift_views(x)[1:])
    np.testing.assert_array_equal(shifted.y, np.tile(data.y, N_SHIFT_VIEWS - 1))
    np.testing.assert_array_equal(shifted.index, np.tile(data.index, N_SHIFT_VIEWS - 1))


def test_shifted_set_refuses_a_table_in_one_line():
    table = ArraySet("rows.csv", np.ones((5, 3)), np.zeros(5, dtype=np.int64), np.arange(5, dtype=np.int64))
    with pytest.raises(InputError, match=r"expected images with --augment shifts") as caught:
        shifted_set(table)
    assert "\n" not in str(caught.value) and "table of 3 features in rows.csv" in str(caught.value)
