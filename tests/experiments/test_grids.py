"""Grid definitions, cell planning and option parsing: pure values."""

from __future__ import annotations

import numpy as np
import pytest

from ema.data.arrays import ArraySet
from ema.data.corruption import noise_only
from ema.data.splits import QUERY_NAMES
from ema.errors import InputError
from ema.experiments.paper.cells import subsample
from ema.experiments.paper.grids import (
    GRIDS,
    MEDICAL_KS,
    PAPER_KS,
    Cell,
    check_data,
    get_grid,
    member_query,
    parse_ks,
    parse_queries,
    parse_sizes,
)
from ema.experiments.paper.runner import _panel_ks


def test_benchmark_plans_k_times_queries_cells_of_method_both():
    cells = GRIDS["benchmark"].cells(PAPER_KS, QUERY_NAMES, (None,))
    assert len(cells) == 6 * 7 and {c.method for c in cells} == {"both"} and {c.size for c in cells} == {None}
    assert cells[0] == Cell(100, "M1", "both") and cells[-1] == Cell(50, "S", "both")


def test_query_size_plans_every_size_for_ema():
    cells = GRIDS["query-size"].cells((100, 60), ("M1", "M6"), (None, 50, 5))
    assert len(cells) == 2 * 3 * 2 and {c.method for c in cells} == {"ema"}
    assert [c.size for c in cells[:6]] == [None, None, 50, 50, 5, 5]


def test_medical_plans_both_methods_on_whole_sets_and_ema_on_subsamples():
    grid = GRIDS["medical"]
    cells = grid.cells(MEDICAL_KS, QUERY_NAMES, (None, 20))
    assert len(cells) == 5 * 7 * 3
    assert {(c.method, c.size) for c in cells} == {("ema", None), ("ks-ratio", None), ("ema", 20)}
    assert grid.ks == (100, 90, 80, 70, 60) and grid.label_map["S"] == "R" and grid.label_map["M6"] == "C6"
    assert grid.recipe.arch == "cnn" and grid.recipe.optimizer == "adam" and grid.recipe.epochs == 30


def test_medical_tables_follow_the_chosen_sizes():
    names = [t.name for t in GRIDS["medical"].tables((None, 5))]
    assert names == ["table3a", "table3b", "table4c", "table6_full", "table6_5"]
    assert [t.name for t in GRIDS["medical"].tables((50,))] == ["table6_50"]


def test_parse_ks_queries_sizes():
    grid = get_grid("query-size")
    assert parse_ks("all", grid) == PAPER_KS and parse_ks("100, 60", grid) == (100, 60)
    assert parse_queries("S,M1") == ("M1", "S") and parse_queries("all") == QUERY_NAMES
    assert parse_sizes("full,50,5", grid) == (None, 50, 5) and parse_sizes("all", grid) == grid.sizes


@pytest.mark.parametrize("text", ["", "100,100", "101", "a"])
def test_parse_ks_refuses_bad_values(text):
    with pytest.raises(InputError, match="k values"):
        parse_ks(text, get_grid("benchmark"))


def test_parse_queries_refuses_unknown_names():
    with pytest.raises(InputError, match=r"expected query sets from \['M1'"):
        parse_queries("M1,M7")


def test_parse_sizes_refuses_sizes_on_grids_without_them_and_bad_values():
    with pytest.raises(InputError, match="whole query sets only"):
        parse_sizes("50", get_grid("benchmark"))
    with pytest.raises(InputError, match=">= 1"):
        parse_sizes("0", get_grid("query-size"))


def test_get_grid_and_check_data_refuse_mismatches():
    with pytest.raises(InputError, match="expected grid in"):
        get_grid("table7")
    with pytest.raises(InputError, match="binary chest X-ray source"):
        check_data(get_grid("medical"), "mnist-embedded")
    check_data(get_grid("benchmark"), "fashion")


def test_member_query_prefers_a_member_set():
    assert member_query(("M6", "M3", "S")) == "M3" and member_query(("M6", "S")) == "M6"


def test_panel_ks_picks_first_middle_last():
    assert _panel_ks((100, 90, 80, 70, 60)) == [100, 80, 60] and _panel_ks((100, 60)) == [100, 60]


def _images(n: int) -> ArraySet:
    rng = np.random.default_rng(0)
    return ArraySet("c", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), np.arange(n) % 2, np.arange(n))


def test_noise_only_noises_exactly_the_share_100_minus_k_and_nothing_else():
    data = _images(200)
    assert np.array_equal(noise_only(data, 100, 0).x, data.x)
    changed = (noise_only(data, 60, 0).x != data.x).reshape(200, -1).any(axis=1)
    assert changed.sum() == 80
    assert np.array_equal(noise_only(data, 60, 0).x, noise_only(data, 60, 0).x)
    with pytest.raises(InputError, match=r"0\.\.100"):
        noise_only(data, 120)


def test_subsample_is_seeded_sized_and_named_after_its_query_set():
    data = _images(100)
    first, again = subsample(data, 20, seed=0, query="M1"), subsample(data, 20, seed=0, query="M1")
    assert len(first) == 20 and first.name == "M1" and np.array_equal(first.index, again.index)
    assert not np.array_equal(first.index, subsample(data, 20, seed=0, query="M2").index)
