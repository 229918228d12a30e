"""Feature tables from users: ``.csv`` and ``.parquet`` files, one row per sample, one column per feature.

The label column is named by ``--label-column`` (default ``label``); an ``index`` column, if
present, gives each row's position in its source. Every other column is a feature and holds
numbers or text (categories, which go to a model that declares them text). A model is audited on
exactly the values it is given, so nothing is filled in or dropped silently: a missing number (an
empty cell, a Parquet null) is refused unless the audit allows missing cells (``--allow-missing``),
and then it goes to the model as NaN, for a model whose own pipeline imputes it; an infinite number
is refused either way (it is a value, not a missing one), and so is a missing cell of a text
column. The row count is bounded before the rows are read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ema.data.arrays import ArraySet, sorted_codes
from ema.data.limits import DEFAULT_MAX_QUERY, check_set_size
from ema.errors import InputError
from ema.inputs import listed_names

#: The label column unless ``--label-column`` names another.
DEFAULT_LABEL_COLUMN = "label"
#: The optional column of positions in the source.
INDEX_COLUMN = "index"
#: File suffixes read as feature tables.
TABLE_SUFFIXES = (".csv", ".parquet")
#: Rows per chunk when a CSV over the size limit is counted.
CSV_COUNT_CHUNK = 100_000
#: Separators of files that are not comma-separated, by how a message names them (a CSV is read with commas only).
OTHER_SEPARATORS = {"';'": ";", "tabs": "\t", "'|'": "|"}
#: The most characters of a one-column header a message shows.
SHOWN_HEADER = 60
#: The largest label or index read: every whole number up to it is exact as a float64.
MAX_WHOLE = 2**53
#: The option of an audit that lets missing cells through, as its refusal names it (the evaluator names its key).
ALLOW_MISSING_OPTION = "--allow-missing"
#: What a refusal of missing cells says where no option of the command lets them through (training, unlearning).
NO_MISSING_HERE = (
    "nothing is filled in, and the workbench's own recipes train on no missing cell; only an audit sends them to a "
    "model, as NaN (ema audit --allow-missing), for a model whose own pipeline imputes them"
)
#: What a refusal of infinite cells says: they are not missing.
INFINITE_ADVICE = "infinity is a value, not a missing one: it is refused with or without --allow-missing"


def read_feature_table(
    path: Path,
    *,
    label_column: str = DEFAULT_LABEL_COLUMN,
    max_images: int = DEFAULT_MAX_QUERY,
    allow_missing: bool = False,
    option: str | None = None,
) -> ArraySet:
    """A labelled table read from a ``.csv`` or ``.parquet`` file; with ``allow_missing``, its missing numbers NaN.
    A refusal of missing numbers names ``option`` as what lets them through (None: no option of the command does).

    Raises
    ------
    InputError
        If the file cannot be read as its suffix says, holds more than ``max_images`` rows or
        none, lacks the label column, has a non-numeric or infinite feature value, a missing one
        (without ``allow_missing``; a missing text cell always), or labels that are not whole numbers.
    """
    path = Path(path)
    frame = _read_frame(path, max_images)
    return labelled_set(
        frame,
        path.stem,
        label_column=label_column,
        where=str(path),
        allow_missing=allow_missing,
        option=option,
        source=str(path),
    )


def labelled_set(
    frame: pd.DataFrame,
    name: str,
    *,
    label_column: str = DEFAULT_LABEL_COLUMN,
    where: str,
    allow_missing: bool = False,
    option: str | None = None,
    source: str | None = None,
) -> ArraySet:
    """A table read whole as a labelled set: labels from ``label_column``, positions from ``index`` if present
    (else 0..n-1), every other column a feature (see :func:`read_feature_table` for what is refused, and
    ``option``); ``source``: the set file it was read from, as given (:attr:`ArraySet.source`)."""
    check_distinct_columns(list(frame.columns), where=where)
    if label_column not in frame.columns:
        raise InputError(
            f"{where}: expected a label column {label_column!r} (name it with --label-column), got columns "
            f"{listed_names(list(map(str, frame.columns)))}"
        )
    if frame.empty:
        raise InputError(f"{where}: expected at least one row, got an empty table")
    labels = whole_numbers(frame[label_column], label_column, where, labels=True)
    # an index of text (patient IDs) holds no positions: the rows are numbered, and it goes with the text columns
    positions = INDEX_COLUMN in frame.columns and label_column != INDEX_COLUMN and not _is_text(frame[INDEX_COLUMN])
    index = (
        whole_numbers(frame[INDEX_COLUMN], INDEX_COLUMN, where) if positions else np.arange(len(frame), dtype=np.int64)
    )
    features = frame.drop(columns=[label_column, *([INDEX_COLUMN] if positions else [])])
    x = feature_matrix(features, where=where, allow_missing=allow_missing, option=option)
    return ArraySet(name, x, labels, index, tuple(map(str, features.columns)), source)


def check_comma_separated(header: list[object], *, where: str) -> None:
    """Refuse a CSV whose header is one name holding another separator (a file written with ';', as spreadsheets in
    many locales write it, or tabs): read with commas, it is one column, and no label column would be found in it."""
    found = [word for word, mark in OTHER_SEPARATORS.items() if len(header) == 1 and mark in str(header[0])]
    if found:
        name = str(header[0])
        shown = repr(name) if len(name) <= SHOWN_HEADER else f"{name[:SHOWN_HEADER]!r}..."
        raise InputError(
            f"{where}: expected comma-separated columns, got one column named {shown}: the file "
            f"looks separated by {found[0]}, and CSV files are read as comma-separated; write it with commas (pandas: "
            "frame.to_csv(path, index=False)) or as Parquet"
        )


def _is_text(column: pd.Series) -> bool:
    """A column of text and no number at all (an ID, a name): not a feature column with a few bad values."""
    return pd.api.types.is_string_dtype(column.dtype) and not pd.to_numeric(column, errors="coerce").notna().any()


def _is_number_column(kind: object) -> bool:
    return pd.api.types.is_numeric_dtype(kind) and not pd.api.types.is_bool_dtype(kind)


def _read_frame(path: Path, max_images: int) -> pd.DataFrame:
    if not path.is_file():
        raise InputError(f"expected a table file at {path}, found nothing there")
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            check_set_size(pq.ParquetFile(path).metadata.num_rows, limit=max_images, where=str(path), unit="rows")
            return pd.read_parquet(path)
        header = pd.read_csv(path, header=None, nrows=1, dtype=str).iloc[0].tolist()
        check_comma_separated(header, where=str(path))
        check_distinct_columns(header, where=str(path))
        frame = pd.read_csv(path, nrows=max_images + 1)
        if len(frame) > max_images:  # over the limit: count every row (one column at a time) to say how many
            rows = sum(len(chunk) for chunk in pd.read_csv(path, usecols=[0], chunksize=CSV_COUNT_CHUNK))
            check_set_size(rows, limit=max_images, where=str(path), unit="rows")
    except InputError:
        raise
    except Exception as exc:  # pandas and pyarrow raise many kinds for a damaged or foreign file
        message = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise InputError(f"could not read {path} as a {path.suffix[1:]} table: {message}") from exc
    return frame


def check_distinct_columns(names: list[object], *, where: str) -> None:
    """Refuse a table whose header names a column twice (pandas would rename the second ``name.1``)."""
    repeated = sorted({str(name) for name in names if names.count(name) > 1})
    if repeated:
        raise InputError(f"{where}: expected distinct column names, got {listed_names(repeated)} more than once")


def feature_matrix(
    features: pd.DataFrame, *, where: str, allow_missing: bool = False, option: str | None = None
) -> np.ndarray:
    """A frame's feature columns as one array: integers if all are, else float64; with text columns (see
    :func:`text_column`), an object array of their text and the other columns' numbers. Refused unless every
    cell is a finite number or text, or (with ``allow_missing``) a missing number, kept as NaN; a refusal of
    missing numbers names ``option`` as what allows them (None: :data:`NO_MISSING_HERE`)."""
    if features.shape[1] == 0:
        raise InputError(f"{where}: expected at least one feature column beside the label, got none")
    text = [_is_text_column(features[c]) for c in features.columns]
    not_numeric = [str(c) for (c, kind), t in zip(features.dtypes.items(), text, strict=True)
                   if not t and not _is_number_column(kind)]  # fmt: skip
    if not_numeric:
        raise InputError(
            f"{where}: expected numbers or text in every feature column, got other values in "
            f"{listed_names(not_numeric)}; encode them as numbers or text first"
        )
    numbers = features.loc[:, [not t for t in text]]
    values = numbers.to_numpy(dtype=np.float64 if (numbers.dtypes.map(lambda t: t.kind) == "f").any() else None)
    names = tuple(map(str, numbers.columns))
    check_finite_cells(values, names, where=where, allow_missing=allow_missing, option=option)
    if not any(text):
        return values
    table = np.empty(features.shape, dtype=object)
    table[:, np.logical_not(text)] = values
    for position in np.flatnonzero(text):
        table[:, position] = text_column(features.iloc[:, position], where=where)
    return table


def text_column(column: pd.Series, *, where: str) -> np.ndarray:
    """A column of text (categories) as an object array of str, refused if a cell is missing or not text."""
    missing = column.isna().to_numpy()
    odd = ~missing & ~column.map(lambda value: isinstance(value, str)).to_numpy(dtype=bool)
    for bad, what in ((missing, "missing"), (odd, "not text")):
        if bad.any():
            raise InputError(
                f"{where}: expected text in every cell of column {str(column.name)!r}, got {int(bad.sum())} {what} "
                f"(first at data row {int(np.argmax(bad))}, counted from 0: {column.iloc[int(np.argmax(bad))]!r}); "
                "nothing is filled in (--allow-missing lets missing numbers through, not missing text)"
            )
    return column.to_numpy(dtype=object)


def _is_text_column(column: pd.Series) -> bool:
    """A column read as text (pandas' object or string dtype, or a categorical of text): categories, IDs, or numbers
    with some text."""
    kind = column.dtype
    if isinstance(kind, pd.CategoricalDtype):
        return _is_text_column(pd.Series(kind.categories))
    return pd.api.types.is_string_dtype(kind) or pd.api.types.is_object_dtype(kind)


def check_finite_cells(
    values: np.ndarray,
    columns: tuple[str, ...] | None,
    *,
    where: str,
    allow_missing: bool = False,
    option: str | None = None,
) -> None:
    """Refuse a table whose features hold an infinite value, or a missing (NaN) one unless ``allow_missing`` (the
    message then says to give ``option``; None: that no option of the command lets them through), naming the first
    one's column and row.

    ``columns`` names the features (None: they are named by position). Rows count from 0, as the data's.
    An infinite value is refused even with ``allow_missing``: it is a number out of range, not a missing one.
    """
    values = values.astype(np.float64, copy=False)
    refused = [(np.isinf(values), "infinite", INFINITE_ADVICE)]
    if not allow_missing:
        advice = (
            f"nothing is filled in; pass {option} to send missing cells to the model as NaN when its own pipeline "
            "imputes them"
            if option is not None
            else NO_MISSING_HERE
        )
        refused.append((np.isnan(values), "missing", advice))
    for bad, what, advice in refused:
        if bad.any():
            rows, cols = np.nonzero(bad)
            column = repr(columns[cols[0]]) if columns is not None else f"number {int(cols[0])}"
            raise InputError(
                f"{where}: expected a finite number in every feature cell, got {int(bad.sum())} {what} (first in "
                f"column {column}, data row {int(rows[0])}, counted from 0); {advice}"
            )


def whole_numbers(column: pd.Series, name: str, where: str, *, labels: bool = False) -> np.ndarray:
    """A column of whole numbers as int64, refused naming a value that is none (for ``labels``, with the advice to
    number classes as the model's outputs: text labels, even "0" and "1", are the model's to order)."""
    missing = column.isna().to_numpy()
    if missing.any():
        raise InputError(
            f"{where}: expected whole numbers in column {name!r}, got {int(missing.sum())} missing (first at data "
            f"row {int(np.argmax(missing))}, counted from 0)"
        )
    if not _is_number_column(column.dtype):
        numbers = pd.to_numeric(column, errors="coerce")
        odd = column[numbers.isna() | (numbers.abs() > MAX_WHOLE) | (numbers != numbers.round())]
        order = f"the model's outputs ({sorted_codes(column.astype(str).tolist())})"
        advice = f"; encode classes as 0..k-1 in the order of {order}" if labels else ""
        raise InputError(
            f"{where}: expected whole numbers in column {name!r}, got {column.dtype} values such as "
            f"{str((odd if len(odd) else column).iloc[0])!r}{advice}"
        )
    values = column.to_numpy()
    floats = values.dtype.kind == "f"  # integers are exact: only an unsigned one beyond int64 does not fit
    limit = MAX_WHOLE if floats else np.iinfo(np.int64).max
    fractional = values != np.rint(values) if floats else np.zeros(values.shape, bool)
    beyond = np.abs(values) > limit if floats else values > limit
    if beyond.any() or fractional.any():
        what = f"values beyond {float(limit):.0e}" if beyond.any() else "fractional values"
        shown = values[beyond if beyond.any() else fractional][0]
        raise InputError(f"{where}: expected whole numbers in column {name!r}, got {what} such as {shown:g}")
    return values.astype(np.int64)
