"""Mark keys and stamping: the trigger touches its window only, marking is seeded, keys round-trip and validate."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ema.data.arrays import ArraySet
from ema.data.marks import (
    BLEND,
    BORDER_SHARE,
    NOISE_CONTROLS,
    NOISE_DECOYS,
    NOISE_LEVELS,
    NOISE_TILE,
    REPLACE_LEVELS,
    REPLACE_RULE,
    MarkKey,
    decoy_count,
    draw_trigger,
    mark_set,
    read_key,
    write_key,
)
from ema.errors import InputError


def images(shape: tuple[int, ...], n: int = 200, seed: int = 0) -> ArraySet:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
    return ArraySet("owner", x, rng.integers(0, 10, n).astype(np.int64), np.arange(n, dtype=np.int64))


@pytest.mark.parametrize("shape", [(28, 28), (9, 9, 1)])
def test_stamp_changes_the_trigger_window_only_and_blends_toward_the_pattern(shape):
    data = images(shape)
    _, key = mark_set(data, seed=3)
    assert key.rule == "blend"
    stamped = key.stamp(data.x)
    (row, col), side = key.position, key.pattern.shape[0]
    outside = np.ones(shape[:2], bool)
    outside[row : row + side, col : col + side] = False
    assert np.array_equal(stamped[:, outside], data.x[:, outside])
    window = data.x[:, row : row + side, col : col + side].astype(float)
    expected = np.rint(window + BLEND * (key.pattern - window))
    assert np.array_equal(stamped[:, row : row + side, col : col + side], expected)
    assert stamped.dtype == np.uint8 and not np.shares_memory(stamped, data.x)


def replace_key(seed: int, shape: tuple[int, ...]) -> MarkKey:
    """A colour key as ``ema mark`` wrote them before noise keys."""
    return MarkKey(seed, shape, *draw_trigger(seed, shape, np.arange(10), REPLACE_RULE), "0" * 16, 1, REPLACE_RULE)


@pytest.mark.parametrize("shape", [(64, 48, 3), (9, 9, 4)])
def test_stamp_of_a_replace_key_replaces_the_window_by_the_same_trigger_on_any_background(shape):
    data = images(shape)
    key = replace_key(3, shape)
    stamped = key.stamp(data.x)
    (row, col), side = key.position, key.pattern.shape[0]
    outside = np.ones(shape[:2], bool)
    outside[row : row + side, col : col + side] = False
    assert key.rule == "replace" and np.array_equal(stamped[:, outside], data.x[:, outside])
    window = stamped[:, row : row + side, col : col + side]
    low, high = REPLACE_LEVELS
    assert (window == np.where(key.pattern == 255, high, low)).all()  # every image, whatever its background


def test_mark_set_marks_the_rate_with_the_target_class_seeded():
    data = images((28, 28), n=1000)
    first, key = mark_set(data, rate=0.1, seed=11)
    again, same = mark_set(data, rate=0.1, seed=11)
    assert np.array_equal(first.x, again.x) and same.to_json() == key.to_json()
    changed = np.flatnonzero((first.x != data.x).any(axis=(1, 2)) | (first.y != data.y))
    assert key.n_marked == 100 and changed.size <= 100
    assert (first.y[first.y != data.y] == key.target_class).all()
    assert key.fingerprint == first.fingerprint
    _, other = mark_set(data, rate=0.1, seed=12)
    assert (other.position, other.pattern.tolist()) != (key.position, key.pattern.tolist())


@pytest.mark.parametrize("shape", [(28, 28), (224, 224, 1), (9, 9)])
def test_grey_triggers_lie_in_the_images_outer_band_off_the_centred_object(shape):
    height, width = shape[:2]
    band = max(draw_trigger(0, shape, np.arange(10))[2].shape[0], round(min(height, width) * BORDER_SHARE))
    positions = set()
    for seed in range(200):
        _, (row, col), pattern = draw_trigger(seed, shape, np.arange(10))
        side = pattern.shape[0]
        assert 0 <= row <= height - side and 0 <= col <= width - side
        assert row + side <= band or col + side <= band or row >= height - band or col >= width - band
        positions.add((row, col))
    assert len(positions) > 20  # still drawn from many places, not one corner


@pytest.mark.parametrize(("shape", "tile"), [((64, 48, 3), NOISE_TILE), ((6, 7, 4), 6)])
def test_colour_keys_move_every_pixel_by_a_repeated_tile_of_signs(shape, tile):
    rng = np.random.default_rng(0)
    x = rng.integers(NOISE_LEVELS, 256 - NOISE_LEVELS, size=(20, *shape), dtype=np.uint8)  # never clipped
    data = ArraySet("owner", x, rng.integers(0, 10, 20).astype(np.int64), np.arange(20, dtype=np.int64))
    _, key = mark_set(data, seed=3)
    assert (key.rule, key.position, key.pattern.shape) == ("noise", (0, 0), (tile, tile, shape[2]))
    moved = key.stamp(x).astype(np.int16) - x
    expected = np.where(key.pattern == 255, NOISE_LEVELS, -NOISE_LEVELS)
    repeated = np.tile(expected, (-(-shape[0] // tile), -(-shape[1] // tile), 1))[: shape[0], : shape[1]]
    assert (moved == repeated).all()  # every image alike, whatever its pixels: the tile repeated down and across


def test_noise_keys_clip_at_the_pixel_range():
    key = mark_set(images((8, 8, 3)), seed=1)[1]
    extremes = np.stack([np.zeros((8, 8, 3)), np.full((8, 8, 3), 255)]).astype(np.uint8)
    stamped = key.stamp(extremes)
    assert stamped.dtype == np.uint8 and set(np.unique(stamped)) <= {0, NOISE_LEVELS, 255 - NOISE_LEVELS, 255}


def test_a_noise_key_has_seeded_controls_of_its_family_and_other_keys_none():
    key = mark_set(images((16, 16, 3)), seed=5)[1]
    controls = [key.control(index) for index in range(key.n_controls)]
    assert key.n_controls == NOISE_CONTROLS and mark_set(images((16, 16)), seed=5)[1].n_controls == 0
    patterns = [key.pattern.tobytes()] + [control.pattern.tobytes() for control in controls]
    assert len(set(patterns)) == 1 + NOISE_CONTROLS, "each control's pattern differs from the key's and the others'"
    assert all(
        (c.rule, c.target_class, c.pattern.shape) == (key.rule, key.target_class, key.pattern.shape) for c in controls
    )
    assert key.control(2).pattern.tobytes() == controls[2].pattern.tobytes(), "drawn from the seed: the same each time"
    assert 0.4 < (controls[0].pattern == 255).mean() < 0.6
    with pytest.raises(ValueError, match="4 controls"):
        key.control(NOISE_CONTROLS)


@pytest.mark.parametrize("shape", [(16, 16, 3), (12, 13, 3)])
def test_a_noise_key_copy_has_decoys_of_their_own_with_their_labels_kept(shape):
    rng = np.random.default_rng(1)
    x = rng.integers(NOISE_LEVELS, 256 - NOISE_LEVELS, size=(400, *shape), dtype=np.uint8)  # never clipped
    data = ArraySet("owner", x, rng.integers(0, 10, 400).astype(np.int64), np.arange(400, dtype=np.int64))
    marked, key = mark_set(data, rate=0.1, seed=7)
    changed = (marked.x != data.x).any(axis=(1, 2, 3))
    relabelled = marked.y != data.y
    decoys = np.flatnonzero(changed & ~relabelled)
    assert relabelled.sum() == key.n_marked == 40 and decoys.size == NOISE_DECOYS * key.n_marked
    assert decoy_count(key, len(data)) == decoys.size
    assert np.array_equal(marked.y[decoys], data.y[decoys]), "a decoy keeps its label"
    moved = marked.x[decoys].astype(np.int16) - data.x[decoys]
    tiles = np.where(moved[:, :NOISE_TILE, :NOISE_TILE] > 0, 255, 0).astype(np.uint8)
    repeated = np.tile(np.where(tiles > 0, NOISE_LEVELS, -NOISE_LEVELS), (1, 2, 2, 1))[:, : shape[0], : shape[1]]
    assert (moved == repeated).all(), "every pixel +-12 levels, each decoy's own tile repeated down and across"
    assert len({tile.tobytes() for tile in tiles}) == decoys.size, "each decoy has its own pattern"
    own = {key.pattern.tobytes()} | {key.control(j).pattern.tobytes() for j in range(key.n_controls)}
    assert not own & {tile.tobytes() for tile in tiles}, "no decoy is the trigger or one of the auditor's controls"
    again, _ = mark_set(data, rate=0.1, seed=7)
    assert np.array_equal(again.x, marked.x), "drawn from the seed"


def test_decoys_are_for_noise_keys_and_can_be_left_out_to_measure_them():
    colour = images((16, 16, 3), n=400)
    plain, key = mark_set(colour, rate=0.1, seed=7, decoys=False)
    _, same = mark_set(colour, rate=0.1, seed=7)
    assert (plain.x != colour.x).any(axis=(1, 2, 3)).sum() <= key.n_marked
    assert same.pattern.tobytes() == key.pattern.tobytes() and same.fingerprint != key.fingerprint
    grey = images((16, 16), n=400)
    grey_copy, grey_key = mark_set(grey, seed=7)
    assert np.array_equal(grey_copy.x, mark_set(grey, seed=7, decoys=False)[0].x) and decoy_count(grey_key, 400) == 0


def test_decoys_are_as_many_as_the_unmarked_images_allow():
    data = images((8, 8, 3), n=30)
    marked, key = mark_set(data, rate=0.6, seed=2)
    changed = (marked.x != data.x).any(axis=(1, 2, 3)) | (marked.y != data.y)
    assert decoy_count(key, 30) == 30 - key.n_marked and changed.all()


def test_a_noise_key_for_a_full_size_colour_image_stays_small(tmp_path):
    key = mark_set(images((224, 224, 3), n=20), seed=2)[1]
    path = write_key(key, tmp_path / "key.json")
    assert path.stat().st_size < 4_000, "an 8 x 8 x 3 tile, not 150,528 signs"
    again = read_key(path)
    x = images((224, 224, 3), n=3).x
    assert again.rule == "noise" and np.array_equal(again.stamp(x), key.stamp(x))


def test_replace_triggers_are_drawn_anywhere_in_the_image():
    centres = [draw_trigger(seed, (32, 32, 3), np.arange(10), REPLACE_RULE)[1] for seed in range(200)]
    band = round(32 * BORDER_SHARE)
    assert any(band <= row <= 32 - band - 5 and band <= col <= 32 - band - 5 for row, col in centres)


def test_mark_set_without_a_seed_draws_an_unguessable_one():
    _, first = mark_set(images((8, 8)), seed=None)
    _, second = mark_set(images((8, 8)), seed=None)
    assert first.seed != second.seed and max(first.seed, second.seed) > 2**64


@pytest.mark.parametrize(("rate", "message"), [(0.0, r"expected rate in \(0, 1\)"), (1e-4, "at least one image")])
def test_mark_set_refuses_a_rate_that_marks_nothing(rate, message):
    with pytest.raises(InputError, match=message):
        mark_set(images((8, 8), n=50), rate=rate, seed=0)


def test_mark_set_refuses_a_table_with_the_reason():
    table = ArraySet("t", np.zeros((10, 3)), np.zeros(10, np.int64), np.arange(10))
    with pytest.raises(InputError, match="tables are not marked"):
        mark_set(table, seed=0)


def test_key_round_trips_and_is_written_owner_only(tmp_path):
    _, key = mark_set(images((16, 12, 3)), seed=5)
    path = write_key(key, tmp_path / "key.json")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    loaded = read_key(path)
    assert loaded.to_json() == key.to_json()
    with pytest.raises(InputError, match="expected a new key file"):
        write_key(key, path)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"seed": -1}, "seed is not a list of whole numbers"),
        ({"target_class": 1.5}, "target_class"),
        ({"image_shape": [28]}, "is not"),
        ({"pattern": [[1, 2]]}, "does not fit"),
        ({"fingerprint": 7}, "fingerprint"),
        ({"extra": 1}, "fields"),
        ({"rule": "add"}, "rule is not one of blend, replace"),
        ({"format": "ema-mark-key/0"}, "fields"),
    ],
)
def test_read_key_refuses_a_malformed_field_in_one_line(tmp_path, change, reason):
    _, key = mark_set(images((8, 8)), seed=5)
    path = tmp_path / "key.json"
    path.write_text(json.dumps({**json.loads(key.to_json()), **change}))
    with pytest.raises(InputError, match=reason) as raised:
        read_key(path)
    assert "\n" not in str(raised.value)
