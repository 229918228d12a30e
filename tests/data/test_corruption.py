import numpy as np
import pytest

from ema.data.arrays import ArraySet
from ema.data.corruption import TABLE_NOISE_STD, noise_and_rotation, noise_only, rotate_images
from ema.errors import InputError


def blank_set(n: int = 100) -> ArraySet:
    x = np.zeros((n, 28, 28), np.uint8)
    x[:, 10:18, 12:16] = 200
    return ArraySet("s", x, np.arange(n, dtype=np.int64) % 10, np.arange(n, dtype=np.int64))


@pytest.mark.parametrize(("k", "expected_changed"), [(100, 0), (80, 20), (50, 50)])
def test_corrupt_changes_100_minus_k_percent(k, expected_changed):
    data = blank_set()
    changed = (noise_and_rotation(data, k, seed=0).x != data.x).any(axis=(1, 2)).sum()
    assert changed == expected_changed


def test_corrupt_is_deterministic_under_seed_and_varies_with_it():
    data = blank_set()
    np.testing.assert_array_equal(noise_and_rotation(data, 60, seed=3).x, noise_and_rotation(data, 60, seed=3).x)
    assert (noise_and_rotation(data, 60, seed=3).x != noise_and_rotation(data, 60, seed=4).x).any()


def test_corrupt_keeps_labels_and_indices():
    data = blank_set()
    out = noise_and_rotation(data, 50, seed=0)
    np.testing.assert_array_equal(out.y, data.y)
    np.testing.assert_array_equal(out.index, data.index)


def test_rotate_images_by_zero_degrees_is_identity():
    data = blank_set(3)
    np.testing.assert_array_equal(rotate_images(data.x, np.random.default_rng(0), max_degrees=0.0), data.x)


def test_rotate_images_quarter_turn_matches_rot90():
    x = np.zeros((1, 28, 28), np.uint8)
    x[0, 2:6, 10:20] = 255

    class Fixed:
        def uniform(self, low, high, size):
            return np.full(size, 90.0)

    rotated = rotate_images(x, Fixed())
    assert np.array_equal(rotated[0], np.rot90(x[0], k=1)) or np.array_equal(rotated[0], np.rot90(x[0], k=-1))


def test_corrupt_rejects_k_out_of_range():
    with pytest.raises(InputError, match=r"k in 0..100.*got 120"):
        noise_and_rotation(blank_set(), 120)


def test_apply_corruption_by_name():
    from ema.data.corruption import apply_corruption, noise_only

    data = blank_set()
    np.testing.assert_array_equal(apply_corruption("noise", data, 60, 1).x, noise_only(data, 60, 1).x)
    np.testing.assert_array_equal(apply_corruption("noise+rotation", data, 60, 1).x, noise_and_rotation(data, 60, 1).x)
    with pytest.raises(InputError, match=r"expected corruption in .*, got .blur."):
        apply_corruption("blur", data, 60)


def test_rotate_images_turns_a_colour_images_channels_together():
    grey = np.random.default_rng(0).integers(0, 256, (3, 12, 12), dtype=np.uint8)
    colour = rotate_images(np.repeat(grey[..., None], 3, axis=3), np.random.default_rng(1))
    assert colour.shape == (3, 12, 12, 3)
    np.testing.assert_array_equal(colour[..., 0], rotate_images(grey, np.random.default_rng(1)))
    np.testing.assert_array_equal(colour[..., 0], colour[..., 2])


def table_set(n: int = 100) -> ArraySet:
    rng = np.random.default_rng(1)
    x = rng.normal([10.0, 1000.0, 0.5], [1.0, 300.0, 0.01], size=(n, 3))
    return ArraySet("t", x, np.arange(n, dtype=np.int64) % 2, np.arange(n, dtype=np.int64), ("a", "b", "c"))


@pytest.mark.parametrize("protocol", [noise_and_rotation, noise_only])
@pytest.mark.parametrize(("k", "expected_changed"), [(100, 0), (70, 30), (0, 100)])
def test_corrupt_table_noises_100_minus_k_percent_of_rows(protocol, k, expected_changed):
    data = table_set()
    corrupted = protocol(data, k, seed=3)
    assert (corrupted.x != data.x).any(axis=1).sum() == expected_changed
    assert corrupted.features == data.features
    np.testing.assert_array_equal(protocol(data, k, seed=3).x, corrupted.x)  # seeded


def test_corrupt_table_noise_is_on_the_standardised_scale():
    """Each feature's noise is TABLE_NOISE_STD of its own spread: a wide column gets proportionally wide noise."""
    data = table_set(4_000)
    shift = noise_only(data, 0, seed=0).x - data.x
    ratio = shift.std(axis=0) / data.x.std(axis=0)
    np.testing.assert_allclose(ratio, TABLE_NOISE_STD, rtol=0.05)


@pytest.mark.parametrize("protocol", [noise_and_rotation, noise_only])
def test_corrupt_table_leaves_missing_cells_missing_and_scales_the_rest_by_their_present_spread(protocol):
    """A missing cell (NaN, --allow-missing) stays NaN; the other cells get the noise they would without the gaps,
    scaled by their column's spread over its present cells; a column with none present gets no noise."""
    data = table_set()
    gaps = np.zeros(data.x.shape, dtype=bool)
    gaps[::7, 0] = True
    gaps[:, 2] = True
    holed = ArraySet("t", np.where(gaps, np.nan, data.x), data.y, data.index, data.features)
    clean, corrupted = protocol(data, 40, seed=5).x, protocol(holed, 40, seed=5).x
    np.testing.assert_array_equal(np.isnan(corrupted), gaps)
    np.testing.assert_array_equal(corrupted[:, 1], clean[:, 1])  # a column without gaps: as before
    present = ~gaps[:, 0]
    scale = np.std(data.x[present, 0]) / np.std(data.x[:, 0])  # the same draws, scaled by the present cells' spread
    np.testing.assert_allclose(corrupted[present, 0] - data.x[present, 0], (clean - data.x)[present, 0] * scale)
    assert (corrupted[present, 0] != data.x[present, 0]).sum() == (clean[present, 0] != data.x[present, 0]).sum() > 0
