"""`describe_source` and `ema data show`: what a data source holds."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ema.data.catalog import SOURCE_NAMES, describe_source
from ema.errors import InputError
from ema_cli.cli import main


def test_describe_source_counts_each_split_and_class(make_pneumoniamnist_root):
    description = describe_source("pneumoniamnist", make_pneumoniamnist_root())
    assert [s.split for s in description.splits] == ["train", "val", "test"]
    train = description.splits[0]
    assert (train.n_images, train.image_shape, train.dtype, train.class_counts) == (20, (28, 28), "uint8", (10, 10))
    assert 0 <= train.pixel_min <= train.pixel_max <= 255
    assert description.classes == ("normal", "pneumonia")


def test_describe_source_builtin_has_one_split_and_no_root(tmp_path):
    description = describe_source("sklearn-digits")
    assert description.root is None and [s.split for s in description.splits] == ["all"]
    assert sum(description.splits[0].class_counts) == 1_797
    with pytest.raises(InputError, match="sklearn-digits: expected no root"):
        describe_source("sklearn-digits", tmp_path)


def test_describe_source_rejects_unknown_name():
    with pytest.raises(InputError, match=r"expected data source in .*, got 'usps'"):
        describe_source("usps")
    assert "svhn" in SOURCE_NAMES and "mnist-embedded" in SOURCE_NAMES


def test_data_show_prints_splits_and_classes(make_covidx_root):
    result = CliRunner().invoke(main, ["data", "show", "covidx", "--root", str(make_covidx_root())])
    assert result.exit_code == 0, result.output
    assert "train: 3 images of 60x50 uint8" in result.output, "at their own size"
    assert "  0 negative: 1\n  1 positive: 2\n" in result.output


def test_data_show_missing_files_is_a_one_line_error(tmp_path):
    result = CliRunner().invoke(main, ["data", "show", "svhn", "--root", str(tmp_path)])
    assert result.exit_code == 3
    assert "Error: svhn (train): expected train_32x32.mat under" in result.output and "Traceback" not in result.output


def test_data_splits_draws_from_a_given_source(tmp_path, make_pneumoniamnist_root):
    root = make_pneumoniamnist_root({"train": 130})
    result = CliRunner().invoke(
        main, ["data", "splits", "--data", "pneumoniamnist", "--root", str(root), "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    written = sorted(p.stem for p in (tmp_path / "out").glob("*.npz"))
    assert written == ["M1", "M2", "M3", "M4", "M5", "M6", "S", "calibration"]
    assert "M1.npz  20 images" in result.output
