"""Set files in three formats (.npz, .csv, .parquet), tables and images of any size."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ema.data.arrays import ArraySet
from ema.data.files import read_set, write_set
from ema.errors import InputError

RNG = np.random.default_rng(1)
X = np.round(RNG.normal(size=(6, 3)), 3)
Y = np.array([0, 1, 0, 1, 1, 0])


def table_frame(label: str = "label") -> pd.DataFrame:
    frame = pd.DataFrame(X, columns=["age", "dose", "weight"])
    frame[label] = Y
    return frame


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_table_reads_the_same_from_csv_parquet_and_npz(tmp_path, suffix):
    path = tmp_path / f"q{suffix}"
    frame = table_frame()
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    data = read_set(path)
    assert data.kind == "table" and data.features == ("age", "dose", "weight")
    np.testing.assert_array_equal(data.x, X)
    np.testing.assert_array_equal(data.y, Y)
    back = read_set(write_set(data, tmp_path / "q.npz"))
    assert back.fingerprint == data.fingerprint and back.features == data.features


def test_the_label_column_is_named_by_the_caller_and_an_index_column_kept(tmp_path):
    frame = table_frame("diagnosis")
    frame["index"] = np.arange(6) + 100
    frame.to_csv(tmp_path / "q.csv", index=False)
    data = read_set(tmp_path / "q.csv", label_column="diagnosis")
    assert data.features == ("age", "dose", "weight") and data.index.tolist() == list(range(100, 106))
    with pytest.raises(InputError, match=r"expected a label column 'label' \(name it with --label-column\)"):
        read_set(tmp_path / "q.csv")


@pytest.mark.parametrize(("separator", "named"), [(";", "';'"), ("\t", "tabs")])
def test_a_csv_separated_otherwise_than_by_commas_is_refused_naming_its_separator(tmp_path, separator, named):
    """A spreadsheet's CSV written with ';' was read as one column, and refused as lacking its label column."""
    table_frame().to_csv(tmp_path / "q.csv", index=False, sep=separator)
    with pytest.raises(InputError) as error:
        read_set(tmp_path / "q.csv")
    assert str(error.value) == (
        f"{tmp_path / 'q.csv'}: expected comma-separated columns, got one column named "
        f"{separator.join(table_frame().columns)!r}: the file looks separated by {named}, and CSV files are read as "
        "comma-separated; write it with commas (pandas: frame.to_csv(path, index=False)) or as Parquet"
    )


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda f: f.assign(age=[np.nan, *X[1:, 0]]), "got 1 missing \\(first in column 'age', data row 0"),
        (lambda f: f.assign(label=Y + 0.5), "whole numbers in column 'label', got fractional values such as 0.5"),
        (lambda f: f.assign(label=[1e300, *Y[1:]]), "in column 'label', got values beyond 9e\\+15 such as 1e\\+300"),
        (lambda f: f.assign(label=[0, 1, 0, np.nan, 1, 0]), "'label', got 1 missing \\(first at data row 3,"),
        (lambda f: f.assign(label=[0, 1, "benign", 1, 1, 0]), "'label', got .* values such as 'benign'"),
        (
            lambda f: f.assign(label=["malignant", "benign"] * 3),
            "in the order of the model's outputs \\(a scikit-learn model fitted on these labels sorts them: 'benign' "
            "= 0, 'malignant' = 1\\)",
        ),
        (lambda f: f.iloc[:0], "at least one row"),
    ],
    ids=["missing", "fractional-labels", "huge-labels", "missing-label", "text-label", "text-labels", "empty"],
)
def test_bad_tables_are_refused_in_one_line(tmp_path, change, match):
    change(table_frame()).to_csv(tmp_path / "q.csv", index=False)
    with pytest.raises(InputError, match=match) as error:
        read_set(tmp_path / "q.csv")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".npz"])
def test_missing_cells_are_kept_as_nan_with_allow_missing_and_fingerprinted_as_one_nan(tmp_path, suffix):
    path = tmp_path / f"q{suffix}"
    frame = table_frame().assign(age=[np.nan, *X[1:, 0]], weight=[*X[:5, 2], np.nan])
    columns = ["age", "dose", "weight"]
    if suffix == ".npz":
        write_set(ArraySet("q", frame[columns].to_numpy(), Y, np.arange(6), tuple(columns)), path)
    else:
        frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    with pytest.raises(InputError, match=r"got 2 missing .*pass --allow-missing to send missing cells to the model"):
        read_set(path, option="--allow-missing")  # an audit's file
    with pytest.raises(InputError, match=r"got 2 missing .*the workbench's own recipes train on no missing cell"):
        read_set(path)  # where no option lets them through (ema train --data-file)
    data = read_set(path, allow_missing=True)
    assert data.missing_cells == 2
    np.testing.assert_array_equal(np.isnan(data.x), np.isnan(frame[columns].to_numpy()))
    other_nan = ArraySet("q", np.where(np.isnan(data.x), -np.nan, data.x), data.y, data.index, data.features)
    assert other_nan.fingerprint == data.fingerprint


@pytest.mark.parametrize("allow_missing", [False, True])
def test_an_infinite_cell_is_refused_with_or_without_allow_missing(tmp_path, allow_missing):
    table_frame().assign(dose=[1.0, np.inf, np.nan, 1.0, 1.0, 1.0]).to_parquet(tmp_path / "q.parquet")
    with pytest.raises(InputError) as error:
        read_set(tmp_path / "q.parquet", allow_missing=allow_missing)
    assert str(error.value) == (
        f"{tmp_path / 'q.parquet'}: expected a finite number in every feature cell, got 1 infinite (first in column "
        "'dose', data row 1, counted from 0); infinity is a value, not a missing one: it is refused with or without "
        "--allow-missing"
    )


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_text_columns_are_kept_as_text_beside_the_numbers_and_survive_an_npz(tmp_path, suffix):
    path = tmp_path / f"q{suffix}"
    sites = ["north", "south", "north", "east", "west", "south"]
    frame = table_frame().assign(site=pd.Categorical(sites), patient=[f"P{i:04d}" for i in range(6)])
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    data = read_set(path)
    assert data.kind == "table" and data.features == ("age", "dose", "weight", "site", "patient")
    assert data.x.dtype == object and data.x[:, 3].tolist() == sites and data.x[0, 4] == "P0000"
    np.testing.assert_array_equal(data.x[:, :3].astype(np.float64), X)
    back = read_set(write_set(data, tmp_path / "q.npz"))  # no pickle: the text travels as strings
    assert back.features == data.features and back.x[:, 3].tolist() == sites
    assert back.fingerprint == data.fingerprint  # numbers read back as floats: the same content
    other = read_set(write_set(data.take(np.array([1, 0, 2, 3, 4, 5])), tmp_path / "swapped.npz"))
    assert other.fingerprint != data.fingerprint  # a row order is content


def test_an_index_of_text_numbers_the_rows_and_an_index_of_numbers_and_text_is_refused(tmp_path):
    table_frame().assign(index=[f"P{i:04d}" for i in range(6)]).to_csv(tmp_path / "i.csv", index=False)
    ids = read_set(tmp_path / "i.csv")
    assert ids.index.tolist() == list(range(6)) and ids.features[-1] == "index"  # a column of text, as IDs are
    table_frame().assign(index=["P1", 2, 3, 4, 5, 6]).to_csv(tmp_path / "mixed.csv", index=False)
    with pytest.raises(InputError, match=r"in column 'index', got \S+ values such as 'P1'$"):
        read_set(tmp_path / "mixed.csv")  # numbers with some text: a broken index, not IDs


def test_an_npz_whose_text_columns_do_not_fit_its_table_is_refused(tmp_path):
    path = tmp_path / "bad.npz"
    np.savez(path, x=X, y=Y, text=np.array([["a"]] * 6), text_columns=np.array([3]))
    with pytest.raises(InputError, match=r"`text_columns` as distinct columns of `x` \(0..2\), got \[3\]"):
        read_set(path)
    np.savez(path, x=X, y=Y, text=np.array([["a"]] * 5), text_columns=np.array([0]))
    with pytest.raises(InputError, match=r"`text` as strings of shape \(6, k\)"):
        read_set(path)
    np.savez(path, x=X, y=Y, text=np.array([["a"]] * 6))
    with pytest.raises(InputError, match="`text` and `text_columns` together"):
        read_set(path)


def test_a_big_integer_index_is_kept_exactly_and_labels_written_as_text_are_refused(tmp_path):
    big = 2**60 + np.arange(6)  # hashed patient ids: beyond what a float holds exactly
    table_frame().assign(index=big).to_parquet(tmp_path / "ids.parquet")
    np.testing.assert_array_equal(read_set(tmp_path / "ids.parquet").index, big)
    table_frame().assign(label=[str(v) for v in Y]).to_parquet(tmp_path / "text.parquet")
    with pytest.raises(InputError, match=r"got \S+ values such as '0'; encode classes as 0..k-1"):
        read_set(tmp_path / "text.parquet")


def test_a_table_of_more_rows_than_allowed_is_refused(tmp_path):
    table_frame().to_parquet(tmp_path / "q.parquet")
    with pytest.raises(InputError, match="--max-query"):
        read_set(tmp_path / "q.parquet", max_images=5)


@pytest.mark.parametrize("limit", [2, 4])
def test_a_csv_over_the_limit_is_refused_with_its_true_row_count(tmp_path, limit):
    table_frame().to_csv(tmp_path / "q.csv", index=False)
    with pytest.raises(InputError, match=rf"expected at most {limit} rows, got 6 .*pass --max-query 6 "):
        read_set(tmp_path / "q.csv", max_images=limit)
    assert len(read_set(tmp_path / "q.csv", max_images=6)) == 6


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_an_npz_table_with_a_missing_or_infinite_cell_is_refused_as_a_csv_is(tmp_path, bad):
    x = X.astype(np.float64)
    x[3, 1] = bad
    np.savez(tmp_path / "q.npz", x=x, y=Y, features=np.array(["age", "dose", "weight"]))
    with pytest.raises(InputError, match=r"q.npz: expected a finite number .*column 'dose', data row 3"):
        read_set(tmp_path / "q.npz")


def test_a_damaged_parquet_file_is_refused(tmp_path):
    (tmp_path / "q.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match=r"could not read .*q.parquet as a parquet table"):
        read_set(tmp_path / "q.parquet")


@pytest.mark.parametrize("shape", [(4, 64, 64), (4, 32, 32, 3), (4, 224, 224, 3)])
def test_images_of_any_size_and_colour_round_trip(tmp_path, shape):
    data = ArraySet("q", RNG.integers(0, 256, size=shape, dtype=np.uint8), np.arange(4), np.arange(4))
    back = read_set(write_set(data, tmp_path / "q.npz"))
    assert back.kind == "image" and back.x.shape == shape and back.fingerprint == data.fingerprint


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".npz"])
def test_a_set_file_missing_a_column_is_named_as_given(tmp_path, monkeypatch, suffix):
    """A missing column was refused naming `q` for `data/q.csv`: the set's name drops the suffix, messages do not."""
    from ema.data.arrays import in_query_layout

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    given = f"data/q{suffix}"
    frame = table_frame().drop(columns=["dose"])
    if suffix == ".npz":
        write_set(ArraySet("q", frame[["age", "weight"]].to_numpy(), Y, np.arange(6), ("age", "weight")), given)
    else:
        frame.to_csv(given, index=False) if suffix == ".csv" else frame.to_parquet(given)
    data = read_set(given)
    assert data.name == "q" and data.where == given
    query = ArraySet("query", X, Y, np.arange(6), ("age", "dose", "weight"))
    with pytest.raises(InputError, match=rf"^calibration file {given}: expected inputs like the query's"):
        in_query_layout(data, query, role="calibration file")


def test_labels_of_any_integer_dtype_are_read_as_int64(tmp_path):
    np.savez(tmp_path / "q.npz", x=np.zeros((2, 8, 8), np.uint8), y=np.array([1, 2], np.int32))
    assert read_set(tmp_path / "q.npz").y.dtype == np.int64


def test_feature_names_only_for_a_table(tmp_path):
    np.savez(tmp_path / "q.npz", x=np.zeros((2, 8, 8), np.uint8), y=np.array([1, 2]), features=np.array(["a"]))
    with pytest.raises(InputError, match="expected `features` as no strings naming the columns of a table"):
        read_set(tmp_path / "q.npz")


@pytest.mark.parametrize(
    ("shape", "advice"),
    [
        ((4, 80, 80, 3), "got image 80x80x3; resize it with --image-size 48, as the query's"),
        ((4, 48, 48), "got image 48x48; give a calibration file of 3-channel images, as the query's"),
        ((4, 28, 28, 3), "got image 28x28x3; resize it with --image-size 48, as the query's"),
        ((4, 12), "got table of 12 features; give a calibration file with the query's kind of inputs"),
    ],
)
def test_a_set_unlike_the_query_is_refused_naming_what_makes_it_alike(shape, advice):
    from ema.data.arrays import ArraySet, in_query_layout

    def made(name, shape):
        x = np.zeros(shape, np.uint8 if len(shape) > 2 else np.float64)
        return ArraySet(name, x, np.zeros(shape[0], np.int64), np.arange(shape[0]))

    query = made("query", (4, 48, 48, 3))
    with pytest.raises(InputError) as refused:
        in_query_layout(made("cal", shape), query, role="calibration file")
    message = str(refused.value)
    assert message.startswith("calibration file cal: expected inputs like the query's (image 48x48x3), ")
    assert message.endswith(advice), message


def test_a_grey_set_with_or_without_a_channel_axis_is_laid_out_as_the_query():
    from ema.data.arrays import ArraySet, in_query_layout

    grey = np.arange(2 * 32 * 32, dtype=np.uint8).reshape(2, 32, 32)
    query = ArraySet("query", grey[..., None], np.zeros(2, np.int64), np.arange(2))
    reference = in_query_layout(ArraySet("ref", grey, np.zeros(2, np.int64), np.arange(2)), query, role="reference")
    assert reference.x.shape == (2, 32, 32, 1) and np.array_equal(reference.x[..., 0], grey)
    small = ArraySet("ref", grey[:, :28, :28, None], np.zeros(2, np.int64), np.arange(2))
    with pytest.raises(InputError, match=r"got image 28x28x1; resize it with --image-size 32, as the query's$"):
        in_query_layout(small, ArraySet("query", grey, np.zeros(2, np.int64), np.arange(2)), role="reference")
