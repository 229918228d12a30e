"""What a Spark job runs on each batch of the query, in its executors' Python: pandas in, pandas out.

Each function applies the in-process code to one batch: :func:`ema.oracle.prepare_inputs`
(what the oracle hands the model), :func:`ema.oracle.interpret_outputs` (what the model's
outputs mean) and :meth:`ema.auditors.EMAAuditor.flag` (scores, flags, M). No pyspark here:
the functions are plain values that Spark ships to its executors, and test without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ema.auditors.ema import EMAAuditor
from ema.data.parquet import images_from_bytes
from ema.inputs import InputSpec, InputTransform
from ema.oracle import interpret_outputs, prepare_inputs


@dataclass(frozen=True)
class PrepareBatch:
    """Query images (``pixels``, 784 bytes each) as the model's inputs, one flat float32 array per image.

    Flat: Spark carries arrays of numbers, and the model's UDF reshapes them to its declared
    input shape and casts them to its dtype (a uint8 model's pixel values 0-255 are exact in
    float32). ``spec`` is what the model declares, checked as the in-process oracle checks it;
    ``where`` names the table in errors, as the in-process engine names it.
    """

    transform: InputTransform
    spec: InputSpec
    where: str = "query table"

    def __call__(self, batches: Iterator[pd.Series]) -> Iterator[pd.Series]:
        for pixels in batches:
            inputs = np.asarray(prepare_inputs(images_from_bytes(pixels, where=self.where), self.transform, self.spec))
            yield pd.Series(list(inputs.reshape(len(inputs), -1).astype(np.float32)))


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
