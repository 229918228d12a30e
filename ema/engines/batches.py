"""What a Spark job runs on each batch of the query, in its executors' Python: pandas in, pandas out.

:class:`AuditBatch` applies the in-process audit to one batch, in one pass: the batch's images
(or a table's features) go through the in-process oracle (:meth:`ema.oracle.Oracle.predict`:
the model's inputs prepared, its outputs read) and :meth:`ema.auditors.EMAAuditor.flag`
(scores, flags, M). No pyspark here: the class is a plain value that Spark ships to its
executors, and tests without it; how an executor gets its model is the engine's (a callable).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ema.auditors.ema import EMAAuditor
from ema.data.arrays import ArraySet
from ema.data.parquet import LEGACY_IMAGE_SHAPE, images_from_bytes
from ema.data.sources.images import fit_square_images
from ema.data.tables import ALLOW_MISSING_OPTION, feature_matrix
from ema.oracle import Oracle


@dataclass(frozen=True)
class AuditBatch:
    """A batch of the query table scored and flagged as the in-process audit scores and flags it.

    ``oracle`` returns the model as an in-process oracle on the executor (loaded once per
    worker; its transform, declared inputs and outputs the driver's). A batch holds ``index``,
    ``label`` and the table's input columns: ``pixels`` (images of ``image_shape`` (height,
    width, channels), centre-cropped and resized to ``image_size`` when given, as
    ``--image-size`` resizes them in-process) or, when ``features`` is given, the feature
    columns (those a column-based signature names, in its order; else all of them, in the
    table's order), their missing numbers kept as NaN when ``allow_missing`` (``--allow-missing``), else
    refused. ``where`` names the table in errors, as the in-process engine names it.
    Each batch comes out as the rows of the in-process ``membership.csv``: index, label, each
    signal, each signal's flag, M.
    """

    oracle: Callable[[], Oracle]
    auditor: EMAAuditor
    n_classes: int
    where: str = "query table"
    image_shape: tuple[int, int, int] = LEGACY_IMAGE_SHAPE
    image_size: int | None = None
    features: tuple[str, ...] | None = None
    allow_missing: bool = False

    @property
    def input_columns(self) -> tuple[str, ...]:
        """The table's input columns each batch holds, in order."""
        return ("pixels",) if self.features is None else self.features

    def inputs(self, frame: pd.DataFrame) -> np.ndarray:
        """The batch's images (uint8, of the table's shape) or feature matrix, as the in-process engine reads them."""
        if self.features is not None:
            missing = {"allow_missing": self.allow_missing, "option": ALLOW_MISSING_OPTION}
            return feature_matrix(frame[list(self.features)], where=self.where, **missing)
        images = images_from_bytes(frame["pixels"], self.image_shape, where=self.where)
        return images if self.image_size is None else fit_square_images(images, self.image_size)

    def __call__(self, frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        oracle = self.oracle()
        for frame in frames:
            labels = frame["label"].to_numpy(dtype=np.int64)
            inputs = self.inputs(frame)
            if self.features is not None:  # a table: its text columns matched to the model's, as in-process
                index = frame["index"].to_numpy(dtype=np.int64)
                inputs = ArraySet(self.where, inputs, labels, index, self.features)
            proba = oracle.predict(inputs).with_classes(self.n_classes).proba
            samples = self.auditor.flag(proba, labels)
            yield pd.DataFrame({"index": frame["index"].to_numpy(dtype=np.int64), "label": labels, **samples.columns()})
