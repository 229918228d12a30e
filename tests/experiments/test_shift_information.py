"""What `--augment shifts` buys (``python -m ema.experiments.errors.shift_information``): its measure and its table."""

from __future__ import annotations

import numpy as np
import pytest

from ema.data.arrays import ArraySet
from ema.data.shifts import shift_views
from ema.experiments.errors import shift_information
from ema.experiments.errors.shift_information import TrainedTarget, view_information


def centred_target(rng: np.random.Generator) -> TrainedTarget:
    """A 'model' whose confidence in class 0 is the centre pixel's brightness. Each image has a difficulty (the
    brightness of its 3x3 centre square) and a member's centre pixel is brighter by 40 still: the identity alone
    confuses an easy non-member with a member, while its shifts (which move a neighbour onto the centre) say how
    easy it is."""

    def images(n: int, boost: int) -> ArraySet:
        x = np.zeros((n, 7, 7), np.uint8)
        difficulty = rng.integers(40, 200, size=n)
        x[:, 2:5, 2:5] = difficulty[:, None, None]
        x[:, 3, 3] = difficulty + boost
        return ArraySet("part", x, np.zeros(n, np.int64), np.arange(n))

    def predict(x: np.ndarray) -> np.ndarray:
        confidence = 0.15 + 0.8 * x[:, 3, 3] / 255
        return np.column_stack([confidence, np.repeat(((1 - confidence) / 4)[:, None], 4, axis=1)])

    return TrainedTarget(predict, images(400, 40), images(400, 0))


def test_scored_views_are_the_targets_probabilities_on_every_view_of_both_references():
    target = centred_target(np.random.default_rng(0))
    member_views, nonmember_views = target.scored_views(shift_views)
    assert member_views.shape == (9, 400, 5) and nonmember_views.shape == (9, 400, 5)
    np.testing.assert_array_equal(member_views[0], target.predict(target.members.x))
    np.testing.assert_array_equal(nonmember_views[4], target.predict(shift_views(target.nonmembers.x)[4]))


def test_view_information_credits_the_views_where_members_stand_out_from_their_shifts():
    target = centred_target(np.random.default_rng(1))
    row = view_information(target, *target.scored_views(shift_views), (0, 1))
    assert row["views"] == 9 and row["members"] == row["nonmembers"] == 400
    assert row["shifts"] > row["single"] > 0  # the shifts tell the bright-centred members apart
    assert 0 < row["margin_shifts"] <= row["margin_single"] <= 1


def test_main_prints_one_row_a_target_with_the_ratio_of_the_views_to_the_identity(monkeypatch, capsys):
    monkeypatch.setattr(
        shift_information, "train_with_references", lambda name: centred_target(np.random.default_rng(2))
    )
    shift_information.main(["--targets", "overfit", "--seeds", "1"])
    header, rule, row = capsys.readouterr().out.splitlines()
    assert "9 views" in header and rule.startswith("|---")
    cells = [cell.strip() for cell in row.split("|")]
    assert cells[1] == "overfit" and cells[2] == "400 / 400"
    single, shifted = float(cells[3]), float(cells[4])
    assert shifted > single > 0 and float(cells[5].rstrip("x")) == pytest.approx(shifted / single, rel=0.01)
    assert 0 < float(cells[7]) <= float(cells[6]) <= 1  # the margins at 200: with the views, then the identity
