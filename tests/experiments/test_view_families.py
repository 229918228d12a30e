"""The view-family study (``python -m ema.experiments.errors.view_families``): its views and its table."""

from __future__ import annotations

import numpy as np
import pytest

from ema.data.arrays import ArraySet
from ema.experiments.errors import view_families
from ema.experiments.errors.shift_information import TrainedTarget
from ema.experiments.errors.view_families import (
    FAMILIES,
    OFFSETS_2PX,
    noise_views,
    rotation_views,
    scale_views,
    shift_and_rotation_views,
)


def dot_images(n: int, size: int = 15, channels: int | None = None) -> np.ndarray:
    """``n`` images holding one bright 3x3 square at the centre."""
    shape = (n, size, size) if channels is None else (n, size, size, channels)
    x = np.zeros(shape, np.uint8)
    middle = size // 2
    x[:, middle - 1 : middle + 2, middle - 1 : middle + 2] = 200
    return x


@pytest.mark.parametrize("channels", [None, 3])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_keeps_the_images_shape_and_dtype_with_the_identity_first(family, channels):
    x = dot_images(4, channels=channels)
    views = FAMILIES[family](x)
    assert views.shape[1:] == x.shape and views.dtype == x.dtype and len(views) >= 5
    np.testing.assert_array_equal(views[0], x)
    assert all((view != x).any() for view in views[1:])  # no view repeats the identity


def test_view_counts_are_the_documented_ones():
    x = dot_images(2)
    counts = {family: len(views(x)) for family, views in FAMILIES.items()}
    assert counts == {"shifts": 9, "shifts-2px": 25, "rotations": 7, "scales": 5, "noise": 9, "shifts+rotations": 15}
    assert len(set(OFFSETS_2PX)) == 25 and max(max(abs(dy), abs(dx)) for dy, dx in OFFSETS_2PX) == 2


def test_rotations_turn_an_off_centre_pixel_about_the_centre_and_zero_rotation_is_the_identity():
    x = np.zeros((1, 21, 21), np.uint8)
    x[0, 10, 18] = 255  # 8 pixels right of the centre (10, 10)
    np.testing.assert_array_equal(rotation_views(x, (0.0,))[1], x)
    turned = rotation_views(x, (9.0,))[1, 0].astype(float)
    rows, cols = np.indices(turned.shape)
    row, col = (turned * rows).sum() / turned.sum(), (turned * cols).sum() / turned.sum()
    assert np.hypot(row - 10, col - 10) == pytest.approx(8, abs=0.3)  # the same distance from the centre
    assert abs(np.degrees(np.arctan2(row - 10, col - 10))) == pytest.approx(9, abs=1.5)  # turned by 9 degrees


def test_scales_grow_or_shrink_a_centred_square_about_the_centre():
    x = np.zeros((1, 21, 21), np.uint8)
    x[0, 6:15, 6:15] = 255  # a 9x9 square at the centre
    np.testing.assert_array_equal(scale_views(x, (1.0,))[1], x)
    grown, shrunk = scale_views(x, (1.5, 0.5))[1:, 0]
    assert (grown > 127).sum() > 1.8 * (x > 127).sum() > 3.6 * (shrunk > 127).sum() > 0
    for view in (grown, shrunk):  # still centred
        rows, cols = np.nonzero(view > 127)
        assert rows.mean() == pytest.approx(10, abs=0.5) and cols.mean() == pytest.approx(10, abs=0.5)


def test_noise_views_are_seeded_clipped_and_of_the_stated_spread():
    x = np.full((50, 8, 8), 128, np.uint8)
    first, again, other = noise_views(x), noise_views(x), noise_views(x, seed=1)
    np.testing.assert_array_equal(first, again)
    assert (first != other).any()
    assert np.std(first[1:].astype(float) - 128) == pytest.approx(view_families.NOISE_STD, rel=0.05)
    saturated = noise_views(np.full((5, 8, 8), 250, np.uint8))
    assert saturated.max() == 255 and saturated.dtype == np.uint8


def test_shifts_with_rotations_are_the_shift_views_then_the_rotations():
    x = dot_images(3)
    joint = shift_and_rotation_views(x)
    np.testing.assert_array_equal(joint[:9], FAMILIES["shifts"](x))
    np.testing.assert_array_equal(joint[9:], rotation_views(x)[1:])


def fake_target() -> TrainedTarget:
    """A 'model' whose confidence in class 0 is the centre square's brightness: members are bright there and
    their views lose it, non-members are dim."""
    rng = np.random.default_rng(0)

    def images(n: int, level: int) -> ArraySet:
        x = dot_images(n)
        x[x > 0] = np.repeat(rng.integers(level - 40, level + 40, n), 9).astype(np.uint8)
        return ArraySet("fake", x, np.zeros(n, np.int64), np.arange(n))

    def predict(x: np.ndarray) -> np.ndarray:
        confidence = 0.2 + 0.7 * x[:, 6:9, 6:9].mean(axis=(1, 2)) / 255
        return np.column_stack([confidence, np.repeat(((1 - confidence) / 9)[:, None], 9, axis=1)])

    return TrainedTarget(predict, images(400, 200), images(400, 150))


def test_main_prints_every_family_against_the_identity_and_the_shifts(monkeypatch, capsys):
    monkeypatch.setattr(view_families, "train_with_references", lambda name: fake_target())
    view_families.main(["--targets", "overfit", "--families", "rotations", "shifts", "--seeds", "1"])
    header, rule, *rows = capsys.readouterr().out.splitlines()
    assert "/ shifts" in header and rule.startswith("|---") and len(rows) == 2
    cells = {row.split("|")[2].strip(): [cell.strip() for cell in row.split("|")] for row in rows}
    assert list(cells) == ["rotations", "shifts"]  # the order asked for
    assert cells["shifts"][3] == "9" and cells["shifts"][6] == "1.00x" and cells["rotations"][3] == "7"
    information, single = (float(x.strip("()")) for x in cells["shifts"][4].split())
    assert information > 0 and single > 0  # the fake's members are brighter at the centre


def test_main_with_learned_adds_the_learned_score_of_each_family(monkeypatch, capsys):
    monkeypatch.setattr(view_families, "train_with_references", lambda name: fake_target())
    view_families.main(["--targets", "overfit", "--families", "shifts", "--seeds", "1", "--learned"])
    header, rule, row = capsys.readouterr().out.splitlines()
    assert "learned: information (lower)" in header and rule.count("|---") == 10
    cells = [cell.strip() for cell in row.split("|")]
    information, lower = (float(x.strip("()")) for x in cells[8].split())
    assert information > lower > 0 and cells[9].endswith("x") and 0 < float(cells[10]) <= 1


def test_main_refuses_no_seeds(capsys):
    with pytest.raises(SystemExit):
        view_families.main(["--seeds", "0"])
    assert "--seeds: expected at least 1, got 0" in capsys.readouterr().err
