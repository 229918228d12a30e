"""ema.data.parquet: query tables (images of any shape, or features) written and read back, and what a malformed
one says."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ema.data.arrays import ArraySet
from ema.data.files import read_set
from ema.data.parquet import PART_FILE, ROWS_PER_GROUP, SHAPE_COLUMNS, read_table, write_table
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
    pq.write_table(pa.table({"label": [1], "pixels": [b"x"]}), tmp_path / "t.parquet")
    with pytest.raises(InputError, match=r"missing \['index'\]"):
        read_table(tmp_path / "t.parquet")


def test_read_table_without_pixels_is_a_table_of_features_and_says_so(tmp_path):
    pq.write_table(pa.table({"label": [1], "index": [0], "image": [b"x"]}), tmp_path / "t.parquet")
    with pytest.raises(InputError, match=r"numbers or text in every column .* got 'image \(binary\)'.*`pixels`$"):
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


def colour_set(n: int, shape: tuple[int, ...], seed: int = 0) -> ArraySet:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
    return ArraySet("q", x, rng.integers(0, 3, n).astype(np.int64), np.arange(n, dtype=np.int64))


@pytest.mark.parametrize("shape", [(32, 32, 3), (64, 48), (20, 20, 4)])
def test_write_table_records_the_image_shape_and_reads_it_back(tmp_path, shape):
    data = colour_set(5, shape)
    back = read_table(write_table([data], tmp_path / "t"))
    np.testing.assert_array_equal(back.x, data.x)
    table = pq.read_table(tmp_path / "t")
    sizes = [table.column(name).to_pylist() for name in SHAPE_COLUMNS]
    assert sizes == [[shape[0]] * 5, [shape[1]] * 5, [shape[2] if len(shape) == 3 else 1] * 5]


def test_read_table_without_shape_columns_holds_28x28_grey_images(tmp_path):
    """A table written before the shape columns existed."""
    x = colour_set(3, (28, 28)).x
    old = {"label": [1, 2, 3], "index": [7, 8, 9], "pixels": pa.array([row.tobytes() for row in x], pa.binary())}
    pq.write_table(pa.table(old), tmp_path / "old.parquet")
    back = read_table(tmp_path / "old.parquet")
    np.testing.assert_array_equal(back.x, x)
    assert back.index.tolist() == [7, 8, 9]


def test_read_table_refuses_images_of_several_shapes_in_one_line(tmp_path):
    small, large = colour_set(2, (8, 8, 3)), colour_set(2, (16, 16, 3))
    frames = [pq.read_table(write_table([data], tmp_path / name)) for name, data in (("a", small), ("b", large))]
    pq.write_table(pa.concat_tables(frames), tmp_path / "mixed.parquet")
    with pytest.raises(InputError, match=r"expected images of one shape .* got 2 shapes such as \[\(16, 16, 3\), \(8"):
        read_table(tmp_path / "mixed.parquet")


def test_read_table_refuses_some_shape_columns_without_the_others(tmp_path):
    table = pq.read_table(write_table([colour_set(2, (8, 8, 3))], tmp_path / "t")).drop_columns(["channels"])
    pq.write_table(table, tmp_path / "partial.parquet")
    with pytest.raises(
        InputError, match=r"height, width, channels \(integers\) or none of them, missing \['channels'\]"
    ):
        read_table(tmp_path / "partial.parquet")


def test_read_table_refuses_pixels_that_are_not_their_shape(tmp_path):
    table = pq.read_table(write_table([colour_set(2, (8, 8, 3))], tmp_path / "t"))
    table = table.set_column(table.schema.get_field_index("width"), "width", pa.array([9, 9], pa.int32()))
    pq.write_table(table, tmp_path / "lying.parquet")
    with pytest.raises(
        InputError, match=r"expected `pixels` of 216 bytes \(a 8x9x3 uint8 image\), got values of \[192\]"
    ):
        read_table(tmp_path / "lying.parquet")


def feature_set(n: int = 6) -> ArraySet:
    rng = np.random.default_rng(3)
    x = np.column_stack([rng.normal(size=n), rng.integers(0, 9, n)])
    return ArraySet("f", x, rng.integers(0, 2, n).astype(np.int64), np.arange(n, dtype=np.int64) + 100, ("a b", "n"))


def test_a_table_of_features_round_trips_and_reads_as_read_set_reads_it(tmp_path):
    data = feature_set()
    back = read_table(write_table([data], tmp_path / "t"))
    for name in ("x", "y", "index"):
        np.testing.assert_array_equal(getattr(back, name), getattr(data, name))
    assert back.features == ("a b", "n") and back.kind == "table"
    user = pd.DataFrame(data.x, columns=list(data.features)).assign(diagnosis=data.y)  # no index column
    user.to_parquet(tmp_path / "user.parquet")
    in_table, as_set = (
        read_table(tmp_path / "user.parquet", label_column="diagnosis"),
        read_set(tmp_path / "user.parquet", label_column="diagnosis"),
    )
    assert in_table.fingerprint == as_set.fingerprint and in_table.index.tolist() == list(range(6))


def test_a_query_table_with_nulls_is_refused_unless_missing_cells_are_allowed_then_they_are_nan(tmp_path):
    """A table Spark or Arrow wrote keeps its gaps as nulls: read as NaN with --allow-missing, as a file's are."""
    columns = {"a": pa.array([1.0, None, 3.0]), "n": pa.array([4, 5, None]), "label": pa.array([0, 1, 0])}
    pq.write_table(pa.table(columns), tmp_path / "q.parquet")
    with pytest.raises(InputError, match=r"got 2 missing \(first in column 'a', data row 1.*--allow-missing"):
        read_table(tmp_path / "q.parquet")
    data = read_table(tmp_path / "q.parquet", allow_missing=True)
    assert data.missing_cells == 2 and np.isnan(data.x[[1, 2], [0, 1]]).all()
    assert data.fingerprint == read_set(tmp_path / "q.parquet", allow_missing=True).fingerprint


def test_a_table_of_features_without_its_label_column_is_refused(tmp_path):
    write_table([feature_set()], tmp_path / "t")
    with pytest.raises(
        InputError, match=r"or of features with a label column 'diagnosis' \(name it with --label-column\)"
    ):
        read_table(tmp_path / "t", label_column="diagnosis")


def test_a_table_of_features_keeps_the_label_column_it_was_read_with(tmp_path):
    data = feature_set()
    write_table([data], tmp_path / "t", label_column="diagnosis")
    back = read_table(tmp_path / "t", label_column="diagnosis")  # the --label-column of the user's other files
    np.testing.assert_array_equal(back.y, data.y)
    assert back.features == data.features


def test_write_table_refuses_a_feature_named_as_a_query_column(tmp_path):
    data = feature_set()
    renamed = ArraySet("f", data.x, data.y, data.index, ("pixels", "n"))
    with pytest.raises(InputError, match=r"expected feature names other than .* got 'pixels'; rename"):
        write_table([renamed], tmp_path / "t")
    assert not (tmp_path / "t" / PART_FILE).exists()


def test_write_table_refuses_chunks_unlike_the_first(tmp_path):
    with pytest.raises(InputError, match="expected every chunk of a query table to be like the first"):
        write_table([colour_set(2, (8, 8, 3)), colour_set(2, (8, 8))], tmp_path / "t")
    assert not (tmp_path / "t" / PART_FILE).exists()
