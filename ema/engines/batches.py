"""What a Spark job runs on each batch of the query, in its executors' Python: pandas in, pandas out.

Each function applies the in-process code to one batch: :func:`ema.oracle.prepare_inputs`
(what the oracle hands the model, from images or a table's features),
:func:`ema.oracle.interpret_outputs` (what the model's outputs mean) and
:meth:`ema.auditors.EMAAuditor.flag` (scores, flags, M). No pyspark here:
the functions are plain values that Spark ships to its executors, and test without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ema.auditors.ema import EMAAuditor
from ema.data.parquet import LEGACY_IMAGE_SHAPE, images_from_bytes
from ema.data.tables import feature_matrix
from ema.inputs import InputSpec, InputTransform
from ema.oracle import interpret_outputs, prepare_inputs

#: Declared dtypes whose values float32 does not hold exactly (doubles, large integers): sent as float64.
WIDE_DTYPES = ("float64", "int64")


@dataclass(frozen=True)
class PrepareBatch:
    """A batch of the query table's input columns as the model's inputs, as the in-process oracle prepares them.

    Images (``pixels``, ``image_shape`` (height, width, channels) each) or, when ``features`` is
    given, a table's feature columns (those a column-based signature names, in its order; else
    all of them, in the table's order). A tensor signature gets one flat array per row: Spark
    carries arrays of numbers, and the model's UDF reshapes them to its declared input shape and
    casts them to its dtype (float32 holds pixels exactly; doubles and int64 go as float64). A
    column-based signature gets its named columns, of its declared dtypes (:attr:`output_columns`).
    ``spec`` is what the model declares, checked as the in-process oracle checks it; ``where``
    names the table in errors, as the in-process engine names it.
    """

    transform: InputTransform
    spec: InputSpec
    where: str = "query table"
    image_shape: tuple[int, int, int] = LEGACY_IMAGE_SHAPE
    features: tuple[str, ...] | None = None

    @property
    def input_columns(self) -> tuple[str, ...]:
        """The table's columns each batch holds, in order."""
        return ("pixels",) if self.features is None else self.features

    @property
    def output_columns(self) -> tuple[tuple[str, str], ...] | None:
        """(name, dtype) of each column a column-based signature takes; None for a tensor signature."""
        if self.spec.columns is None:
            return None
        dtypes = self.spec.column_dtypes or (self.spec.dtype,) * len(self.spec.columns)
        return tuple(zip(self.spec.columns, dtypes, strict=True))

    @property
    def array_dtype(self) -> str:
        """The dtype of a tensor signature's flat arrays: float32 unless it loses the declared dtype's values."""
        return "float64" if self.spec.dtype in WIDE_DTYPES else "float32"

    def __call__(self, batches: Iterator[pd.DataFrame]) -> Iterator[pd.Series | pd.DataFrame]:
        for frame in batches:
            if self.features is None:
                x = images_from_bytes(frame["pixels"], self.image_shape, where=self.where)
            else:
                x = feature_matrix(frame.set_axis(list(self.features), axis=1), where=self.where)
            inputs = prepare_inputs(x, self.transform, self.spec)
            if isinstance(inputs, pd.DataFrame):
                yield inputs
            else:
                yield pd.Series(list(inputs.reshape(len(inputs), -1).astype(self.array_dtype)))


@dataclass(frozen=True)
class FlagBatch:
    """A batch's model outputs turned into EMA's per-sample columns: index, label, each signal, its flag, M.

    ``outputs`` is the output kind the driver found on the reference (``probabilities`` or
    ``labels``; never ``auto``, so that every batch is read alike), ``n_classes`` the
    calibration's. The columns are those of the in-process ``membership.csv``.
    """

    auditor: EMAAuditor
    outputs: str
    n_classes: int

    def __call__(self, frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            predictions = interpret_outputs(np.stack(frame["outputs"].to_numpy()), self.outputs)
            proba = predictions.with_classes(self.n_classes).proba
            samples = self.auditor.flag(proba, frame["label"].to_numpy(dtype=np.int64))
            ids = {"index": frame["index"].to_numpy(dtype=np.int64), "label": frame["label"].to_numpy(dtype=np.int64)}
            yield pd.DataFrame({**ids, **samples.columns()})
