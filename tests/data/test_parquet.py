"""ema.data.parquet: query tables written and read back, and what a malformed one says."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ema.data.arrays import ArraySet
from ema.data.parquet import PART_FILE, ROWS_PER_GROUP, read_table, write_table
from ema.errors import InputError


def image_set(n: int, seed: int = 0, name: str = "q") -> ArraySet:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    return ArraySet(name, x, rng.integers(0, 10, n).astype(np.int64), np.arange(n, dtype=np.int64) + 7)


def test_write_table_round_trips_chunks_in_order(tmp_path):
    chunks = [image_set(ROWS_PER_GROUP + 3, 0), image_set(5, 1)]
    back = read_table(write_table(chunks, tmp_path / "table"))
    for name in ("x", "y", "index"):
        np.testing.assert_array_equal(getattr(back, name), np.concatenate([getattr(c, name) for c in chunks]))
    assert pq.ParquetFile(tmp_path / "table" / PART_FILE).metadata.num_row_groups == 3
    assert not list((tmp_path / "table").glob("*.partial"))


def test_read_table_missing_path_says_where(tmp_path):
    with pytest.raises(InputError, match=r"expected a query table .* found nothing there"):
        read_table(tmp_path / "nope")


def test_read_table_names_missing_columns(tmp_path):
    pq.write_table(pa.table({"label": [1], "image": [b"x"]}), tmp_path / "t.parquet")
    with pytest.raises(InputError, match=r"missing \['index', 'pixels'\]"):
        read_table(tmp_path / "t.parquet")


def test_read_table_refuses_pixels_that_are_not_bytes(tmp_path):
    pq.write_table(pa.table({"label": [1], "index": [0], "pixels": [[0.5] * 784]}), tmp_path / "t.parquet")
    with pytest.raises(InputError, match="binary pixels"):
        read_table(tmp_path / "t.parquet")


def test_read_table_refuses_images_of_another_size(tmp_path):
    pq.write_table(pa.table({"label": [1], "index": [0], "pixels": [b"\x00" * 100]}), tmp_path / "t.parquet")
    with pytest.raises(InputError, match=r"expected `pixels` of 784 bytes .* got values of \[100\] bytes"):
        read_table(tmp_path / "t.parquet")


def test_read_table_refuses_nulls(tmp_path):
    pixels = pa.array([b"\x00" * 784, None], type=pa.binary())
    pq.write_table(pa.table({"label": [1, 2], "index": [0, 1], "pixels": pixels}), tmp_path / "t.parquet")
    with pytest.raises(InputError, match=r"nulls in columns \['pixels'\]"):
        read_table(tmp_path / "t.parquet")
