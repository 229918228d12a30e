"""Split sizes as a value, and seeded disjoint draws from any pool."""

from __future__ import annotations

import numpy as np
import pytest

from ema.data.arrays import ArraySet
from ema.data.splits import EMBEDDED_SIZES, PAPER_SIZES, QUERY_NAMES, SplitSizes, draw_splits, make_splits
from ema.errors import InputError

#: Fingerprints of make_splits(0) before split sizes became a value: the embedded splits must not move.
EMBEDDED_SEED0_FINGERPRINTS = {
    "M1": "96210f357c7531fb",
    "calibration": "6577c6c7f78962e0",
    "M6": "8f51c5aa04e6e541",
    "S": "0a741521c5adc193",
}
SMALL = SplitSizes(fold=4, calibration=3, held_out=5, other_domain=6)


def pool(n: int, name: str = "pool", offset: int = 0) -> ArraySet:
    """n distinct images: image i is filled with (i + offset) % 256 and labelled i % 10."""
    values = (np.arange(n) + offset) % 256
    x = np.broadcast_to(values[:, None, None], (n, 28, 28)).astype(np.uint8)
    return ArraySet(name, x, np.arange(n, dtype=np.int64) % 10, np.arange(n, dtype=np.int64))


def in_domain_indices(splits) -> list[np.ndarray]:
    return [*(fold.index for fold in splits.folds), splits.calibration.index, splits.held_out.index]


def test_make_splits_is_unchanged_for_the_embedded_data():
    splits = make_splits(0)
    assert {name: splits.query(name).fingerprint for name in ("M1", "M6", "S")} | {
        "calibration": splits.calibration.fingerprint
    } == EMBEDDED_SEED0_FINGERPRINTS


def test_make_splits_has_the_embedded_sizes():
    splits = make_splits(1)
    assert [len(fold) for fold in splits.folds] == [EMBEDDED_SIZES.fold] * 5
    assert (len(splits.calibration), len(splits.held_out), len(splits.other_domain)) == (1_000, 2_000, 1_000)


def test_draw_splits_are_disjoint_and_of_the_stated_sizes():
    splits = draw_splits(pool(100), pool(10, "other", offset=200), SMALL, seed=3)
    parts = in_domain_indices(splits)
    assert [len(part) for part in parts] == [4] * 5 + [3, 5]
    together = np.concatenate(parts)
    assert len(np.unique(together)) == len(together) == SMALL.in_domain
    assert len(splits.other_domain) == 6 and len(np.unique(splits.other_domain.index)) == 6
    assert [fold.name for fold in splits.folds] == list(QUERY_NAMES[:5])
    assert splits.query("S").name == "S" and splits.seed == 3


def test_draw_splits_keep_images_with_their_labels_and_pool_positions():
    splits = draw_splits(pool(100), pool(10, "other", offset=200), SMALL, seed=0)
    for part in (*splits.folds, splits.calibration, splits.held_out):
        np.testing.assert_array_equal(part.x[:, 0, 0], part.index % 256)
        np.testing.assert_array_equal(part.y, part.index % 10)
    np.testing.assert_array_equal(splits.other_domain.x[:, 0, 0], splits.other_domain.index + 200)


def test_draw_splits_is_deterministic_under_the_seed():
    first, again = (draw_splits(pool(100), pool(10), SMALL, seed=5) for _ in range(2))
    other_seed = draw_splits(pool(100), pool(10), SMALL, seed=6)
    assert [s.fingerprint for s in first.as_dict().values()] == [s.fingerprint for s in again.as_dict().values()]
    assert first.folds[0].fingerprint != other_seed.folds[0].fingerprint
    assert first.train.fingerprint != other_seed.train.fingerprint


def test_draw_splits_refuses_a_pool_too_small():
    with pytest.raises(InputError, match=r"expected at least 28 in-domain images in 'pool' .*, got 27"):
        draw_splits(pool(27), pool(10), SMALL)
    with pytest.raises(InputError, match=r"expected at least 6 other-domain images in 'other' .*, got 5"):
        draw_splits(pool(28), pool(5, "other"), SMALL)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_split_sizes_refuse_non_positive_integers(bad):
    with pytest.raises(InputError, match=f"expected a positive integer number of calibration images, got {bad!r}"):
        SplitSizes(fold=1, calibration=bad, held_out=1, other_domain=1)


def test_split_sizes_scale_down_and_count_in_domain():
    assert PAPER_SIZES.in_domain == 13_000
    assert PAPER_SIZES.scaled(4_708 / 13_000) == SplitSizes(fold=724, calibration=362, held_out=724, other_domain=724)
    assert PAPER_SIZES.scaled(1e-6) == SplitSizes(1, 1, 1, 1)


def test_draw_splits_with_a_reference_leaves_the_other_splits_as_they_were():
    sizes = SplitSizes(fold=4, calibration=3, held_out=5, other_domain=6, reference=7)
    with_reference, without = (
        draw_splits(pool(60), pool(10, "other"), sizes, seed=3),
        draw_splits(pool(60), pool(10, "other"), SMALL, seed=3),
    )
    assert len(with_reference.reference) == 7 and without.reference is None
    for name, part in without.as_dict().items():
        np.testing.assert_array_equal(with_reference.as_dict()[name].index, part.index)
    used = np.concatenate(in_domain_indices(with_reference))
    assert np.intersect1d(used, with_reference.reference.index).size == 0
    assert sizes.in_domain == SMALL.in_domain + 7 and sizes.scaled(0.5).reference == 3
    assert SMALL.scaled(0.5).reference == 0


def test_load_splits_reads_a_source_once_and_hands_out_read_only_arrays():
    from ema.data.presets import load_splits

    first, again = load_splits("mnist-embedded", 0), load_splits("mnist-embedded", 0)
    assert again is first
    assert load_splits("mnist-embedded", 1) is not first
    with pytest.raises(ValueError, match="read-only"):
        first.held_out.x[0, 0, 0] = 1
