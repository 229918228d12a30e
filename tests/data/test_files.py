import re
from pathlib import Path

import numpy as np
import pytest

from ema.data.arrays import ArraySet
from ema.data.files import read_set, write_set
from ema.errors import InputError


def sample_set() -> ArraySet:
    rng = np.random.default_rng(0)
    return ArraySet(
        "q",
        rng.integers(0, 256, (4, 28, 28), dtype=np.uint8),
        np.arange(4, dtype=np.int64),
        np.arange(4, dtype=np.int64) + 7,
    )


def test_write_then_read_round_trips(tmp_path):
    data = sample_set()
    back = read_set(write_set(data, tmp_path / "q.npz"))
    assert back.fingerprint == data.fingerprint
    np.testing.assert_array_equal(back.index, data.index)
    assert not list(tmp_path.glob("*.partial"))


def test_read_set_lists_missing_arrays(tmp_path):
    np.savez(tmp_path / "bad.npz", x=sample_set().x)
    with pytest.raises(InputError, match=r"missing \['y'\]"):
        read_set(tmp_path / "bad.npz")


@pytest.mark.parametrize("shape", [(4, 32, 32, 7), (4, 2, 32, 32, 3), (4,)])
def test_read_set_rejects_shapes_of_no_kind(tmp_path, shape):
    np.savez(tmp_path / "bad.npz", x=np.zeros(shape, np.uint8), y=np.zeros(4, np.int64), index=np.arange(4))
    with pytest.raises(
        InputError, match=r"numbers of shape \(n, features\), got uint8 of shape " + re.escape(str(shape))
    ):
        read_set(tmp_path / "bad.npz")


def test_read_set_rejects_wrong_dtype(tmp_path):
    np.savez(tmp_path / "bad.npz", x=np.zeros((4, 28, 28), np.float32), y=np.zeros(4, np.int64), index=np.arange(4))
    with pytest.raises(InputError, match=r"expected `x` as uint8 images .* got float32 of shape \(4, 28, 28\)"):
        read_set(tmp_path / "bad.npz")


def test_read_set_rejects_empty_set(tmp_path):
    np.savez(
        tmp_path / "empty.npz", x=np.zeros((0, 28, 28), np.uint8), y=np.zeros(0, np.int64), index=np.zeros(0, np.int64)
    )
    with pytest.raises(InputError, match="empty set"):
        read_set(tmp_path / "empty.npz")


def test_read_set_refuses_pickled_objects(tmp_path):
    np.savez(
        tmp_path / "obj.npz", x=np.array([{"a": 1}], dtype=object), y=np.zeros(1, np.int64), index=np.zeros(1, np.int64)
    )
    with pytest.raises(InputError, match="without pickled objects"):
        read_set(tmp_path / "obj.npz")


def test_read_set_rejects_non_npz(tmp_path):
    (tmp_path / "q.npz").write_text("not a zip")
    with pytest.raises(InputError, match=r"expected an \.npz"):
        read_set(tmp_path / "q.npz")


def test_read_set_missing_file(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        read_set(tmp_path / "nope.npz")


@pytest.mark.parametrize("name", ["nope.npz", "nope.csv", "nope.parquet"])
def test_read_set_missing_file_is_named_by_its_role(tmp_path, name):
    """Every format's missing file says which of the user's files it is, by the option that gave it."""
    with pytest.raises(InputError, match=rf"^reference file \(--reference\) {tmp_path / name} does not exist$"):
        read_set(tmp_path / name, role="reference file (--reference)")


def test_read_set_missing_relative_file_shows_where_it_looked(tmp_path, monkeypatch):
    """`mlflow run` reads a relative path in the project's folder: the message shows the absolute path it tried."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as refused:
        read_set(Path("splits/M6.npz"), role="query file")
    assert str(refused.value) == (
        f"query file splits/M6.npz does not exist (looked for {tmp_path / 'splits/M6.npz'}; under `mlflow run` a "
        "relative path is read from the project's folder: pass an absolute path there)"
    )


def test_read_set_numbers_samples_when_index_is_left_out(tmp_path):
    np.savez(tmp_path / "plain.npz", x=np.zeros((3, 28, 28), np.uint8), y=np.arange(3, dtype=np.int64))
    data = read_set(tmp_path / "plain.npz")
    np.testing.assert_array_equal(data.index, np.arange(3))
    assert data.name == "plain"
