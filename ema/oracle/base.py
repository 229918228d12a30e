"""The Oracle: inputs in, validated predictions out, scored in batches; subclasses say how one batch is scored."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd

from ema.data.arrays import MODEL_INPUT_SHAPE, ArraySet
from ema.errors import EMAError, InputError, ModelAccessError, TimeLimitExceeded
from ema.inputs import InputSpec, InputTransform, align_columns, missing_cells, missing_mask, prepare_inputs
from ema.limits import check_deadline
from ema.oracle.batching import BatchPace
from ema.oracle.outputs import OUTPUT_KINDS, Predictions, interpret_outputs, looks_like_probabilities, numeric_outputs
from ema.oracle.text_columns import text_as_declared, without_text
from ema.progress import Progress
from ema.run_warnings import FOR_THE_RECORD
from ema.validation import check_choice, check_positive_int

#: Images per call to the model (the most, for an oracle that paces its batches: :mod:`ema.oracle.batching`).
DEFAULT_BATCH_SIZE = 4096
#: The shape our own models declare: (batch, channel, height, width).
IMAGE_INPUT_SHAPE = MODEL_INPUT_SHAPE


class Oracle:
    """Scores images through a model in batches. Subclasses say how one batch is scored.

    Parameters
    ----------
    outputs : {"auto", "probabilities", "logits", "labels"}
        What the model returns.
    batch_size : int
        Images per call; the most per call where the oracle paces its batches (:attr:`paced`: in-process
        models), each sized to take about :data:`ema.oracle.batching.BATCH_SECONDS`.
    transform : InputTransform
        The pixel scaling the model was trained on.
    input_spec : InputSpec, optional
        The model's declared inputs (shape, dtype, columns); images are cast and reshaped to them.
        None: float32 pixels of shape (n, 1, 28, 28).
    output_name : str, optional
        Which output to read when the model returns several by name (an ONNX model's
        ``label`` and ``probabilities``); by default the probability-like one.
    progress : bool
        Whether each set's scoring shows its progress on stderr (:mod:`ema.progress`); see
        :meth:`with_progress`.
    """

    def __init__(
        self,
        *,
        outputs: str = "auto",
        batch_size: int = DEFAULT_BATCH_SIZE,
        transform: InputTransform = InputTransform(),
        input_spec: InputSpec | None = None,
        output_name: str | None = None,
        progress: bool = False,
    ) -> None:
        check_choice("outputs", outputs, OUTPUT_KINDS)
        check_positive_int("batch_size", batch_size)
        spec = input_spec or InputSpec()
        if spec.takes_integers and not transform.is_identity:
            raise InputError(
                f"expected no input scaling for a model that takes integer pixels ({spec.describe()}: it scales "
                f"them itself), got pixels scaled {transform.describe()} (from --input-scale, --normalize or the "
                'recipe\'s "input"); drop them'
            )
        self.outputs, self.batch_size, self.transform = outputs, batch_size, transform
        self.input_spec, self.output_name, self.progress = spec, output_name, progress
        self._pace = BatchPace()
        self.forget_warnings()

    #: How errors name the model.
    source = "the model"
    #: Whether batches are sized to the model's pace (:mod:`ema.oracle.batching`), so that the command's deadline,
    #: checked between them, is not overrun by more than about a batch; else every batch holds ``batch_size``.
    paced = True
    #: Whether a table's column order is the model owner's to keep (warned about when the signature names no
    #: columns); False for the auditor's own helper models, trained on the query's layout.
    owner_column_order = True

    @property
    def step(self) -> str:
        """What scoring through this oracle is called: in its progress, and by the error of a command whose
        ``--timeout`` passes while it scores ("score model 'models:/m/1'")."""
        return f"score {self.source}"

    def forget_warnings(self) -> None:
        """Warn again, once each, about what the scoring finds: every audit through this oracle records its own."""
        self._warned_orders: set[tuple[str, ...]] = set()  # column orders already warned about (once each)
        self._warned_logits = False  # declared logits that read as probabilities, warned about once

    def _predict_batch(self, inputs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def with_transform(self, transform: InputTransform) -> Oracle:
        """The same model with other input scaling (sharing the loaded model or the connection)."""
        other = copy.copy(self)
        other.transform = transform
        return other

    def with_progress(self, progress: bool) -> Oracle:
        """The same model, showing (or not) each set's scoring progress, sharing the model, connection and pace."""
        other = copy.copy(self)
        other.progress = progress
        return other

    def with_input_spec(self, spec: InputSpec) -> Oracle:
        """The same model with other declared inputs (another pixel order), sharing the model or the connection."""
        other = copy.copy(self)
        other.input_spec = spec
        return other

    def prepare(self, pixels: np.ndarray) -> np.ndarray | pd.DataFrame:
        """What this oracle hands the model for ``pixels``: :func:`prepare_inputs` with its transform and spec."""
        return prepare_inputs(pixels, self.transform, self.input_spec)

    def predict(self, pixels: np.ndarray | ArraySet) -> Predictions:
        """Validated predictions for a set, or for its inputs (``ArraySet.x``, or float pixels (n, C, H, W)).

        A table given as a set is matched to a column-based signature by name (extra columns
        are left out and logged). Inputs are prepared one batch at a time: uint8 images never
        exist as float32 all at once, so memory does not grow with the query set beyond the
        images themselves and the outputs. With :attr:`progress`, a set that takes a while says
        how far its scoring is (named by the set's name).
        """
        what = self.step + (f" on {pixels.name}" if isinstance(pixels, ArraySet) else "")
        pixels = self._inputs_of(pixels) if isinstance(pixels, ArraySet) else np.asarray(pixels)
        if pixels.ndim == 0 or len(pixels) == 0:
            raise InputError(f"expected at least one image to score, got an array of shape {pixels.shape}")
        outputs = None
        with Progress(what, len(pixels), enabled=self.progress) as progress:
            for start, stop, batch in self._scored_batches(pixels):
                if outputs is None:
                    # one array for all outputs: small per-batch arrays kept alive would pin the heap above
                    # each batch's large temporaries, and memory would grow with the number of batches
                    outputs = np.empty((len(pixels), *batch.shape[1:]), dtype=batch.dtype)
                if not np.can_cast(batch.dtype, outputs.dtype, "safe"):
                    outputs = outputs.astype(
                        np.result_type(outputs.dtype, batch.dtype)
                    )  # e.g. integer one-hot, then floats
                if batch.shape != (stop - start, *outputs.shape[1:]):
                    raise InputError(
                        f"expected model outputs of shape {(stop - start, *outputs.shape[1:])} for a batch of "
                        f"{stop - start} images, got {batch.shape}"
                    )
                outputs[start:stop] = batch
                progress.advance(stop - start)
        self._check_outputs_of_missing(pixels, outputs)
        if self.outputs == "logits" and not self._warned_logits and looks_like_probabilities(outputs):
            self._warned_logits = True
            logging.getLogger(__name__).warning(
                "declared logits (--outputs logits), but %s returns rows of non-negative values summing to 1: the "
                "softmax of probabilities flattens them; if they are probabilities, pass --outputs auto",
                self.source,
                extra=FOR_THE_RECORD,
            )
        return interpret_outputs(outputs, self.outputs)

    def _check_outputs_of_missing(self, inputs: np.ndarray, outputs: np.ndarray) -> None:
        """Refuse NaN or infinite outputs for a table with missing cells (sent as NaN with ``--allow-missing``): the
        model cannot take them, and saying so names the cause that a plain non-finite-outputs error would hide."""
        if np.isfinite(outputs).all():
            return
        missing = missing_cells(inputs)
        if not missing:
            return
        rows = int((~np.isfinite(outputs.reshape(len(outputs), -1))).any(axis=1).sum())
        raise InputError(
            f"expected finite outputs from {self.source}, got NaN or infinite ones for {rows} of {len(outputs)} "
            f"samples, whose inputs had {missing} missing cells sent as NaN (--allow-missing): this model cannot take "
            "missing values (its pipeline imputes none); audit it on rows without gaps, or a model that imputes them"
        )

    def _inputs_of(self, data: ArraySet) -> np.ndarray:
        """A set's inputs, a table's columns in the order the model's signature names them."""
        if data.kind != "table":
            return data.x
        x, extra = align_columns(data.x, data.features, self.input_spec, where=data.where)
        log_left_out(data.name, extra)
        features = self.input_spec.columns or data.features
        if self.input_spec.columns is not None:
            x = text_as_declared(x, self.input_spec, where=data.name)
        elif self.owner_column_order:  # not a helper of ours, trained on the query's layout, text included
            x, features = without_text(x, data.features, where=data.name)
        if self.owner_column_order and self.input_spec.columns is None and features not in self._warned_orders:
            self._warned_orders.add(features)
            log_by_position(data.name, features)
        return x

    def _scored_batches(self, pixels: np.ndarray) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(start, stop, outputs)``: the model's numeric outputs for each batch ``pixels[start:stop]``, in order;
        the command's ``--timeout`` is checked before each. Batches hold ``batch_size`` images, or where the oracle
        is :attr:`paced`, as many as the model scores in about :data:`~ema.oracle.batching.BATCH_SECONDS`."""
        start = 0
        while start < len(pixels):
            check_deadline(self.step)
            stop = min(start + (self._pace.size(self.batch_size) if self.paced else self.batch_size), len(pixels))
            began = time.perf_counter()
            outputs = self._score(pixels[start:stop])
            self._pace.record(stop - start, time.perf_counter() - began)
            yield start, stop, outputs
            start = stop

    def _score(self, images: np.ndarray) -> np.ndarray:
        """The model's numeric outputs for one batch; its failure on a table's missing cells said as such."""
        try:
            return self._outputs(images)
        except (InputError, ModelAccessError) as exc:
            refusal = self._failure_of_missing(images, exc)
            if refusal is None:
                raise
            raise refusal from exc

    def _outputs(self, images: np.ndarray) -> np.ndarray:
        return numeric_outputs(self._predict_batch(self.prepare(images)), self.source, self.output_name)

    #: Failures that say nothing of a batch's inputs (a scoring server's timeout): never put down to missing cells.
    input_blind_failures: tuple[type[EMAError], ...] = ()

    def _failure_of_missing(self, images: np.ndarray, failure: EMAError) -> InputError | None:
        """The error that says the model failed on a table's missing cells (sent as NaN with ``--allow-missing``):
        a model that raises on NaN, in-process or behind a scoring server that answers an error status.

        None where ``failure`` is not theirs: the batch had no missing cell, the failure says nothing of the inputs
        (:attr:`input_blind_failures`), or the batch's rows without one fail as well (scored once more to tell; a
        batch whose every row has a gap cannot be told apart, and is put down to them, the model's error quoted).
        """
        gaps = missing_mask(images).any(axis=1)
        if not gaps.any() or isinstance(failure, self.input_blind_failures):
            return None
        complete = len(images) - int(gaps.sum())
        if complete:
            try:
                self._outputs(images[~gaps])
            except TimeLimitExceeded:
                raise  # the command's deadline passed while telling: that, not the model's error, ends it
            except EMAError:
                return None
        told = f"the batch's {complete} other rows scored" if complete else "every row of the batch had one"
        return InputError(
            f"{self.source} failed on rows with missing values: {int(gaps.sum())} of a batch of {len(images)} rows "
            f"had {missing_cells(images)} missing cells, sent as NaN (--allow-missing), and {told}; this model does "
            "not accept missing values: impute the table before the audit, or audit a model that accepts NaN (e.g. "
            f"scikit-learn's HistGradientBoostingClassifier, or a pipeline that imputes them); its error: {failure}"
        )

    def predict_proba(self, pixels: np.ndarray | ArraySet) -> np.ndarray:
        """Class probabilities (one-hot for a label-only model)."""
        return self.predict(pixels).proba


def log_by_position(where: str, features: Sequence[str]) -> None:
    """Log (a warning) that a table's named columns go to a model whose signature names none: by position."""
    logging.getLogger(__name__).warning(
        "%s: the model's signature names no columns, so the table's %d columns are sent in the file's order (%s): "
        "they must be in the order the model was trained on",
        where,
        len(features),
        ", ".join(features[:4]) + (", ..." if len(features) > 4 else ""),
        extra=FOR_THE_RECORD,
    )


def log_left_out(where: str, extra: list[str]) -> None:
    """Log (a warning) the columns of a table that a column-based signature does not name, if any."""
    if extra:
        logging.getLogger(__name__).warning(
            "%s: %d column(s) the model's signature does not name are left out: %s",
            where,
            len(extra),
            ", ".join(extra[:8]) + (" ..." if len(extra) > 8 else ""),
            extra=FOR_THE_RECORD,
        )
