"""Black-box access to a model: probabilities for images, and nothing else.

The target is reached only through an oracle; nothing here reads weights or training data.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from scipy.special import softmax

from ema.errors import EMAError, InputError
from ema.signals import check_probabilities

OUTPUT_KINDS = ("probabilities", "logits")
#: Images per call to the model.
DEFAULT_BATCH_SIZE = 4096


class Oracle(Protocol):
    """Anything that turns float32 pixels (n, 1, 28, 28) in [0, 1] into class probabilities (n, C)."""

    def predict_proba(self, pixels: np.ndarray) -> np.ndarray: ...


def to_probabilities(outputs: np.ndarray, kind: str) -> np.ndarray:
    """Validate raw model outputs as probabilities, applying softmax first for ``kind="logits"``."""
    if kind not in OUTPUT_KINDS:
        raise InputError(f"expected outputs in {OUTPUT_KINDS}, got {kind!r}")
    outputs = np.asarray(outputs, dtype=np.float64)
    if kind == "logits":
        if outputs.ndim != 2 or not np.isfinite(outputs).all():
            raise InputError(f"expected finite logits of shape (n_samples, n_classes), got shape {outputs.shape}")
        outputs = softmax(outputs, axis=1)
    return check_probabilities(outputs)[0]


class PyfuncOracle:
    """An MLflow pyfunc model loaded in-process (``models:/NAME@ALIAS``, ``runs:/...``, a path).

    Loading a pyfunc model runs that model's code: load only models you trust, and audit
    others over HTTP against a sandboxed server.

    Parameters
    ----------
    model_uri : str
    outputs : {"probabilities", "logits"}
        What the model returns; logits are turned into probabilities with softmax.
    batch_size : int
        Images per predict call.
    """

    def __init__(self, model_uri: str, *, outputs: str = "probabilities", batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        import mlflow.pyfunc
        from mlflow.exceptions import MlflowException

        if outputs not in OUTPUT_KINDS:
            raise InputError(f"expected outputs in {OUTPUT_KINDS}, got {outputs!r}")
        self.model_uri, self.outputs, self.batch_size = model_uri, outputs, batch_size
        try:
            self._model = mlflow.pyfunc.load_model(model_uri)
        except (MlflowException, OSError) as exc:
            raise EMAError(f"could not load model {model_uri!r}: {str(exc).splitlines()[0]}") from exc
        self._input_shape = self._declared_input_shape()

    def _declared_input_shape(self) -> tuple[int, ...] | None:
        schema = self._model.metadata.get_input_schema()
        if schema is None or not schema.is_tensor_spec():
            return None
        return tuple(schema.inputs[0].shape)

    def _prepare(self, pixels: np.ndarray) -> np.ndarray:
        """Cast to float32 and reshape to the signature's shape (e.g. flatten for (-1, 784))."""
        pixels = np.ascontiguousarray(pixels, dtype=np.float32)
        if self._input_shape is None:
            return pixels
        target = (len(pixels), *self._input_shape[1:])
        if int(np.prod(target[1:])) != int(np.prod(pixels.shape[1:])):
            raise InputError(
                f"model {self.model_uri!r} declares inputs of shape {self._input_shape}, which images of "
                f"shape {pixels.shape[1:]} cannot be reshaped to"
            )
        return pixels.reshape(target)

    def predict_proba(self, pixels: np.ndarray) -> np.ndarray:
        """Class probabilities for ``pixels`` (n, 1, 28, 28), scored in batches and validated."""
        from mlflow.exceptions import MlflowException

        inputs = self._prepare(pixels)
        try:
            chunks = [np.asarray(self._model.predict(inputs[i : i + self.batch_size])) for i in range(0, len(inputs), self.batch_size)]
        except MlflowException as exc:
            raise EMAError(f"model {self.model_uri!r} refused the query: {str(exc).splitlines()[0]}") from exc
        outputs = np.concatenate(chunks)
        if outputs.ndim != 2 or outputs.shape[0] != len(pixels):
            raise InputError(
                f"expected model {self.model_uri!r} to return (n_samples, n_classes) = ({len(pixels)}, C), "
                f"got shape {outputs.shape}; a model that returns labels supports only label-only auditing"
            )
        return to_probabilities(outputs, self.outputs)
