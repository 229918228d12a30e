"""A table's text columns (categories such as ``"north"``) matched to what a model declares it takes.

A table holds text where its file does; a model's column-based signature says which columns
it takes as text (MLflow's ``string``) and which as numbers. Text goes only to a column
declared text; whole numbers in such a column go as their decimal text (a ZIP code a CSV
reader took for a number); a model that names no columns takes numbers only, so text columns
are left out of what it is sent. Each departure from the file is logged for the record.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ema.errors import InputError
from ema.inputs import InputSpec, listed_names, numeric_columns, text_columns
from ema.run_warnings import FOR_THE_RECORD


def without_text(x: np.ndarray, features: Sequence[str], *, where: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """``x`` without its text columns, for a model that names no columns (it takes numbers), and the names kept."""
    taker, advice = "the model, whose signature names no columns,", "log the model with a signature that names them"
    numbers, kept, left_out = numeric_columns(x, features, where=where, taker=taker, advice=advice)
    if left_out:
        logging.getLogger(__name__).warning(
            "%s: %d column(s) of text left out, as the model's signature names no columns (it takes numbers): %s",
            where, len(left_out), listed_names(left_out), extra=FOR_THE_RECORD,
        )  # fmt: skip
    return numbers, kept


def text_as_declared(x: np.ndarray, spec: InputSpec, *, where: str) -> np.ndarray:
    """``x`` (in ``spec``'s columns) with text in the columns ``spec`` declares text, refused where it declares
    numbers and the table holds text; as it is where ``spec`` names its columns but declares no types.

    Raises
    ------
    InputError
        Naming the columns of text the model takes as numbers.
    """
    if not spec.types_declared:  # columns known by name alone: each takes what the table holds
        return x
    text, declared = text_columns(x), spec.declared_text()
    wrong = np.flatnonzero(text & ~declared)
    if wrong.size:
        column = int(wrong[0])
        dtypes = spec.column_dtypes or (spec.dtype,) * len(spec.columns)
        name = spec.columns[column]
        words = np.flatnonzero(pd.to_numeric(pd.Series(x[:, column]), errors="coerce").isna().to_numpy())
        row = int(words[0]) if words.size else 0  # a cell that is not even a number written as text
        advice = (
            "give the values the model was trained on"
            if words.size
            else f"every cell of it reads as a number, so the column is stored as text in the file: cast it to a "
            f"number type before writing the file (pandas: frame[{name!r}] = frame[{name!r}].astype(float))"
        )
        raise InputError(
            f"{where}: expected numbers in column {name!r} (the model's signature declares {dtypes[column]}), got "
            f"text such as {x[row, column]!r} (data row {row}, counted from 0)"
            + (f", and text in {len(wrong) - 1} more such column(s)" if wrong.size > 1 else "")
            + f"; {advice}"
        )
    numbers = np.flatnonzero(declared & ~text)
    if numbers.size == 0:
        return x
    gaps = np.isnan(x[:, numbers].astype(np.float64)).sum(axis=0)
    if gaps.any():
        first = int(np.argmax(gaps > 0))
        raise InputError(
            f"{where}: expected text or numbers in every cell of column {spec.columns[numbers[first]]!r} (the model's "
            f"signature declares text), got {int(gaps[first])} missing: a missing cell goes as NaN to a column of "
            "numbers only (--allow-missing), never as text"
        )
    texts = np.column_stack([decimal_text(x[:, column]) for column in numbers])
    logging.getLogger(__name__).warning(
        "%s: column(s) %s hold numbers where the model's signature declares text: sent as their decimal text "
        "(such as %r); a file's own spelling of them (a leading zero, 1.50) is not restored",
        where, listed_names([spec.columns[c] for c in numbers]), str(texts[0, 0]),
        extra=FOR_THE_RECORD,
    )  # fmt: skip
    typed = x.astype(object)
    typed[:, numbers] = texts.astype(object)
    return typed


def decimal_text(numbers: np.ndarray) -> np.ndarray:
    """Numbers as a file shows them: integers exactly, whole floats without a fraction (up to 2**53, where they are
    exact), other floats in their shortest form (``1.5``, ``1e+30``).

    >>> decimal_text(np.array([2.0, 1.5, 1e30])).tolist()
    ['2', '1.5', '1e+30']
    """
    values = np.array(numbers.tolist()) if numbers.dtype == object else numbers  # a column's own number type
    if values.dtype.kind in "iu":
        return values.astype(str)
    whole = (values == np.rint(values)) & (np.abs(values) <= 2**53)
    text = values.astype(str)
    text[whole] = values[whole].astype(np.int64).astype(str)
    return text
