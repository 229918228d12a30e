"""Split presets: the pools and sizes each data source draws from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ema.data.embedded import load_mnist_embedded
from ema.data.presets import DATA_SOURCES, PRESETS, load_splits, preset_splits, split_plan
from ema.data.sources import ImageFormat
from ema.data.splits import EMBEDDED_SIZES, PAPER_SIZES, SplitSizes, make_splits
from ema.errors import InputError

DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")


def sizes_of(splits) -> SplitSizes:
    return SplitSizes(len(splits.folds[0]), len(splits.calibration), len(splits.held_out), len(splits.other_domain))


def check_disjoint(splits) -> None:
    parts = [*(fold.index for fold in splits.folds), splits.calibration.index, splits.held_out.index]
    together = np.concatenate(parts)
    assert len(np.unique(together)) == len(together)


def test_data_sources_list_every_preset():
    assert DATA_SOURCES == tuple(PRESETS)
    assert set(DATA_SOURCES) == {
        "mnist-embedded",
        "mnist",
        "fashion",
        "pneumoniamnist",
        "chest-xray",
        "covidx",
        "breast-cancer",
    }


def test_embedded_preset_is_make_splits():
    assert preset_splits("mnist-embedded", 2).train.fingerprint == make_splits(2).train.fingerprint
    assert load_splits("mnist-embedded", 2).other_domain.fingerprint == make_splits(2).other_domain.fingerprint


def test_embedded_preset_refuses_a_root(tmp_path):
    with pytest.raises(InputError, match="mnist-embedded: expected no root"):
        split_plan("mnist-embedded", tmp_path)


def test_unknown_preset_is_refused():
    with pytest.raises(InputError, match=r"expected data source in .*, got 'usps'"):
        load_splits("usps")


def test_mnist_preset_draws_paper_sizes_with_digits_as_other_domain(make_idx_root):
    root = make_idx_root("MNIST/raw", n_train=PAPER_SIZES.in_domain, n_test=1)
    splits = load_splits("mnist", 0, root)
    assert sizes_of(splits) == SplitSizes(2_000, 1_000, 2_000, EMBEDDED_SIZES.other_domain)
    check_disjoint(splits)


def test_mnist_preset_uses_svhn_beside_it_as_other_domain(make_idx_root, write_svhn):
    root = make_idx_root("MNIST/raw", n_train=PAPER_SIZES.in_domain, n_test=1)
    write_svhn(root / "test_32x32.mat", PAPER_SIZES.other_domain)
    plan = split_plan("mnist", root)
    assert plan.other_pool.name == "svhn-test" and plan.sizes == PAPER_SIZES


def test_mnist_preset_without_files_lists_them(tmp_path):
    with pytest.raises(InputError, match="mnist \\(train\\): expected MNIST/raw/train-images-idx3-ubyte"):
        load_splits("mnist", 0, tmp_path)


def test_pneumoniamnist_preset_scales_sizes_to_the_pool(make_pneumoniamnist_root):
    root = make_pneumoniamnist_root({"train": 130, "val": 2, "test": 2})
    splits = load_splits("pneumoniamnist", 0, root)
    assert sizes_of(splits) == SplitSizes(20, 10, 20, 20)
    check_disjoint(splits)
    assert set(np.unique(splits.other_domain.y)) <= {0, 1}
    assert splits.folds[0].fingerprint != load_splits("pneumoniamnist", 1, root).folds[0].fingerprint


def test_chest_xray_preset_draws_from_its_train_split(make_chest_root):
    plan = split_plan("chest-xray", make_chest_root(n=10), ImageFormat(28))
    assert len(plan.pool) == 20 and plan.pool.name == "chest-xray-train"
    assert plan.sizes == PAPER_SIZES.scaled(20 / PAPER_SIZES.in_domain)


def test_chest_xray_preset_matches_s_to_the_pools_size_and_channels(make_chest_root):
    plan = split_plan("chest-xray", make_chest_root(n=4, size=(40, 30)), ImageFormat(channels=3))
    assert plan.pool.x.shape[1:] == plan.other_pool.x.shape[1:] == (30, 40, 3), "S scores on the target's inputs"


def test_mnist_presets_refuse_image_options():
    with pytest.raises(
        InputError,
        match=r"^mnist-embedded: expected no --image-size or --channels \(its images are 28x28 grey\), got "
        r"--image-size 64; they apply to pneumoniamnist, chest-xray, covidx$",
    ):
        split_plan("mnist-embedded", None, ImageFormat(64))


def test_covidx_preset_without_files_lists_them(tmp_path):
    with pytest.raises(InputError, match=r"covidx \(train\): expected train\.txt, train under"):
        load_splits("covidx", 0, tmp_path)


def test_fashion_preset_on_the_real_debian_files():
    if not (DEBIAN_FASHION / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"Debian package dataset-fashion-mnist is not installed ({DEBIAN_FASHION} has no IDX files)")
    splits = load_splits("fashion", 0)
    assert sizes_of(splits) == PAPER_SIZES
    assert len(splits.train) == 10_000
    check_disjoint(splits)
    assert set(splits.other_domain.index) <= set(range(len(load_mnist_embedded())))
    assert splits.train.fingerprint == load_splits("fashion", 0).train.fingerprint
    # the non-member reference: 10,000 images no other split holds
    assert len(splits.reference) == 10_000
    used = {int(i) for name, part in splits.as_dict().items() if name not in ("reference", "S") for i in part.index}
    assert used.isdisjoint(splits.reference.index.tolist())


def test_breast_cancer_preset_splits_every_row_into_folds_calibration_and_held_out():
    splits = load_splits("breast-cancer", 0)
    assert [len(f) for f in splits.folds] == [63] * 5
    assert (len(splits.calibration), len(splits.held_out), splits.other_domain) == (126, 128, None)
    every = np.concatenate([part.index for part in splits.as_dict().values()])
    assert sorted(every) == list(range(569))
    assert splits.train.features == splits.held_out.features and len(splits.train.features) == 30
    assert splits.query_names == ("M1", "M2", "M3", "M4", "M5", "M6")
    with pytest.raises(InputError, match="a table has no other-domain set"):
        splits.query("S")


def test_file_source_reads_a_table_with_its_label_column(tmp_path):
    import pandas as pd

    rng = np.random.default_rng(0)
    table = pd.DataFrame(rng.normal(size=(40, 3)), columns=["age", "dose", "bmi"])
    table["outcome"] = rng.integers(0, 2, 40)
    table.to_csv(tmp_path / "t.csv", index=False)
    splits = load_splits("file", 1, tmp_path / "t.csv", label_column="outcome")
    assert [len(f) for f in splits.folds] == [4] * 5 and len(splits.calibration) == 8 and len(splits.held_out) == 12
    assert splits.train.features == ("age", "dose", "bmi")
    with pytest.raises(InputError, match="expected a label column 'label'"):
        load_splits("file", 1, tmp_path / "t.csv")


def test_file_source_refuses_a_table_too_small_to_split(tmp_path):
    np.savez(tmp_path / "few.npz", x=np.zeros((10, 2)), y=np.zeros(10, dtype=np.int64))
    with pytest.raises(InputError, match="expected at least 18 samples to split into five member folds"):
        load_splits("file", 0, tmp_path / "few.npz")
