"""benchmarks/marks_null.py: its triggers stamp what they say; its replace rule is the colour key `ema mark` drew."""

from __future__ import annotations

import numpy as np

from benchmarks.marks import UNTRAINED_KEY_BASE
from benchmarks.marks_null import noise, parse_args, patch, replace_rule
from ema.data.marks import REPLACE_RULE, MarkKey, draw_trigger

SHAPE = (32, 32, 3)


def images(n: int = 6) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, size=(n, *SHAPE), dtype=np.uint8)


def test_the_replace_rule_variant_is_a_replace_key_and_changes_a_5_by_5_window():
    seed = UNTRAINED_KEY_BASE + 3
    key = MarkKey(seed, SHAPE, *draw_trigger(seed, SHAPE, np.arange(10), REPLACE_RULE), "", 0, REPLACE_RULE)
    target, stamp = replace_rule(seed, SHAPE)
    x = images()
    assert target == key.target_class and np.array_equal(stamp(x), key.stamp(x))
    assert (stamp(x) != x).any(axis=(0, 3)).sum() <= 25


def test_a_patch_changes_its_window_only_to_its_two_levels():
    x = images()
    _, stamp = patch(3, (112, 144), band=False)(7, SHAPE)
    changed = (stamp(x) != x).any(axis=(0, 3))
    rows, cols = np.nonzero(changed)
    assert rows.max() - rows.min() < 3 and cols.max() - cols.min() < 3
    assert set(np.unique(stamp(x)[:, rows, cols])) <= {112, 144}


def test_the_noise_moves_every_pixel_by_its_levels_at_most_and_is_seeded():
    x = images()
    target, stamp = noise(12)(5, SHAPE)
    delta = stamp(x).astype(int) - x
    assert np.abs(delta).max() == 12 and (delta != 0).mean() > 0.9
    again = noise(12)(5, SHAPE)
    assert again[0] == target and np.array_equal(again[1](x), stamp(x))


def test_noise_amplitudes_are_read_from_the_command_line():
    assert parse_args(["--noise", "4,16"]).noise == (4, 16)
    assert parse_args([]).noise == (8, 12)
