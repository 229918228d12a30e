"""Black-box access to a model: class probabilities (or labels) for images, and nothing else.

The target is reached only through an oracle; nothing here reads weights or training
data. Two oracles: an MLflow pyfunc model loaded in-process, and an MLflow scoring server
over HTTP. Both cast and reshape the inputs to the model's declared shape, score in
batches, and validate the outputs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import numpy as np
from scipy.special import softmax

from ema.data.arrays import to_pixels
from ema.errors import EMAError, InputError
from ema.inputs import InputTransform
from ema.signals import ROW_SUM_TOLERANCE, check_probabilities

#: What a model may return. ``auto`` accepts probabilities and labels, and refuses logits with advice.
OUTPUT_KINDS = ("auto", "probabilities", "logits", "labels")
ACCESS_PROBABILITIES = "probabilities"
ACCESS_LABEL_ONLY = "label-only"
#: Images per call to the model.
DEFAULT_BATCH_SIZE = 4096
#: The shape our own models declare: (batch, channel, height, width).
IMAGE_INPUT_SHAPE = (-1, 1, 28, 28)


@dataclass(frozen=True)
class Predictions:
    """Validated model outputs.

    Attributes
    ----------
    proba : ndarray of shape (n_samples, n_classes)
        Probabilities; one-hot rows when the model returns only labels.
    access : {"probabilities", "label-only"}
    detected : str
        How the output kind was decided, for the run's tags.
    """

    proba: np.ndarray
    access: str
    detected: str

    def with_classes(self, n_classes: int) -> Predictions:
        """Label-only predictions one-hot encoded over ``n_classes`` (those of the calibration)."""
        if self.access != ACCESS_LABEL_ONLY or self.proba.shape[1] == n_classes:
            return self
        labels = self.proba.argmax(axis=1)
        if labels.max() >= n_classes:
            raise InputError(f"expected labels in 0..{n_classes - 1}, got a label {labels.max()}")
        return Predictions(np.eye(n_classes)[labels], self.access, self.detected)


def _looks_like_labels(outputs: np.ndarray) -> bool:
    flat = outputs.reshape(len(outputs), -1)
    return flat.shape[1] == 1 and np.isfinite(flat).all() and np.array_equal(flat, np.rint(flat))


def interpret_outputs(outputs: np.ndarray, kind: str = "auto") -> Predictions:
    """Turn raw model outputs into validated probabilities.

    Parameters
    ----------
    outputs : ndarray
        (n, C) probabilities or logits, or (n,) / (n, 1) integer labels.
    kind : {"auto", "probabilities", "logits", "labels"}
        What the outputs are; ``auto`` detects probabilities and labels and refuses
        anything else, suggesting ``--outputs logits``.

    Raises
    ------
    InputError
        If the outputs are not of the declared or detected kind.
    """
    if kind not in OUTPUT_KINDS:
        raise InputError(f"expected outputs in {OUTPUT_KINDS}, got {kind!r}")
    outputs = np.asarray(outputs)
    if outputs.ndim == 0 or len(outputs) == 0:
        raise InputError(f"expected model outputs for at least one sample, got shape {outputs.shape}")
    if kind == "labels" or (kind == "auto" and _looks_like_labels(outputs)):
        return _labels_to_predictions(
            outputs, "declared labels" if kind == "labels" else "one integer per sample: labels"
        )
    outputs = outputs.astype(np.float64)
    if outputs.ndim != 2:
        raise InputError(f"expected model outputs of shape (n_samples, n_classes), got shape {outputs.shape}")
    if kind == "logits":
        if not np.isfinite(outputs).all():
            raise InputError("expected finite logits, got NaN or inf")
        return Predictions(softmax(outputs, axis=1), ACCESS_PROBABILITIES, "declared logits: softmax applied")
    detected = (
        "declared probabilities"
        if kind == "probabilities"
        else "rows of non-negative values summing to 1: probabilities"
    )
    if kind == "auto" and np.isfinite(outputs).all():
        sums = outputs.sum(axis=1)
        if (outputs < 0).any() or np.abs(sums - 1).max() > ROW_SUM_TOLERANCE:
            raise InputError(
                "expected class probabilities (rows of non-negative values summing to 1), got rows summing to "
                f"{sums.min():.4g}..{sums.max():.4g} with values in {outputs.min():.4g}..{outputs.max():.4g}: "
                "these look like logits; pass --outputs logits to apply softmax"
            )
    return Predictions(check_probabilities(outputs)[0], ACCESS_PROBABILITIES, detected)


def _labels_to_predictions(outputs: np.ndarray, detected: str) -> Predictions:
    """One-hot rows over the classes seen so far; :meth:`Predictions.with_classes` widens them to the calibration's."""
    labels = outputs.reshape(len(outputs), -1)
    if labels.shape[1] != 1 or not np.array_equal(labels, np.rint(labels)):
        raise InputError(f"expected one integer label per sample, got outputs of shape {outputs.shape}")
    labels = labels[:, 0].astype(np.int64)
    if labels.min() < 0:
        raise InputError(f"expected non-negative class labels, got values from {labels.min()} to {labels.max()}")
    return Predictions(np.eye(int(labels.max()) + 1)[labels], ACCESS_LABEL_ONLY, detected)


class Oracle:
    """Scores images through a model in batches. Subclasses say how one batch is scored.

    Parameters
    ----------
    outputs : {"auto", "probabilities", "logits", "labels"}
        What the model returns.
    batch_size : int
        Images per call.
    transform : InputTransform
        The pixel scaling the model was trained on.
    input_shape : tuple of int, optional
        The model's declared input shape, (-1, ...); inputs are reshaped to it.
    """

    def __init__(
        self,
        *,
        outputs: str = "auto",
        batch_size: int = DEFAULT_BATCH_SIZE,
        transform: InputTransform = InputTransform(),
        input_shape: tuple[int, ...] | None = None,
    ) -> None:
        if outputs not in OUTPUT_KINDS:
            raise InputError(f"expected outputs in {OUTPUT_KINDS}, got {outputs!r}")
        if batch_size < 1:
            raise InputError(f"expected batch_size >= 1, got {batch_size}")
        self.outputs, self.batch_size, self.transform, self.input_shape = outputs, batch_size, transform, input_shape

    def _predict_batch(self, inputs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def prepare(self, pixels: np.ndarray) -> np.ndarray:
        """Scale, cast to float32 and reshape to the declared shape (e.g. flatten for (-1, 784)).

        uint8 images (n, H, W) are first turned into pixels in [0, 1], as torchvision's ``ToTensor`` does.
        """
        if pixels.dtype == np.uint8:
            if pixels.ndim != 3:
                raise InputError(f"expected uint8 images of shape (n, height, width), got shape {pixels.shape}")
            pixels = to_pixels(pixels)
        inputs = np.ascontiguousarray(self.transform.apply(pixels))
        if self.input_shape is None:
            return inputs
        target = (len(inputs), *self.input_shape[1:])
        if -1 in target[1:] or int(np.prod(target[1:])) != int(np.prod(inputs.shape[1:])):
            raise InputError(
                f"expected images that fit the model's declared input shape {self.input_shape}, got images of shape "
                f"{inputs.shape[1:]}"
            )
        return inputs.reshape(target)

    def predict(self, pixels: np.ndarray) -> Predictions:
        """Validated predictions for ``pixels`` of shape (n, 1, 28, 28) in [0, 1], or uint8 images (n, 28, 28).

        Inputs are prepared one batch at a time: uint8 images (``ArraySet.x``) never exist
        as float32 all at once, so memory does not grow with the query set beyond the
        images themselves and the outputs.
        """
        pixels = np.asarray(pixels)
        if pixels.ndim == 0 or len(pixels) == 0:
            raise InputError(f"expected at least one image to score, got an array of shape {pixels.shape}")
        outputs = None
        for start in range(0, len(pixels), self.batch_size):
            images = pixels[start : start + self.batch_size]
            batch = np.asarray(self._predict_batch(self.prepare(images)))
            if outputs is None:
                # one array for all outputs: small per-batch arrays kept alive would pin the heap above
                # each batch's large temporaries, and memory would grow with the number of batches
                outputs = np.empty((len(pixels), *batch.shape[1:]), dtype=batch.dtype)
            if not np.can_cast(batch.dtype, outputs.dtype, "safe"):
                outputs = outputs.astype(
                    np.result_type(outputs.dtype, batch.dtype)
                )  # e.g. integer one-hot, then floats
            if batch.shape != (len(images), *outputs.shape[1:]):
                raise InputError(
                    f"expected model outputs of shape {(len(images), *outputs.shape[1:])} for a batch of "
                    f"{len(images)} images, got {batch.shape}"
                )
            outputs[start : start + len(images)] = batch
        return interpret_outputs(outputs, self.outputs)

    def predict_proba(self, pixels: np.ndarray) -> np.ndarray:
        """Class probabilities (one-hot for a label-only model)."""
        return self.predict(pixels).proba


class PyfuncOracle(Oracle):
    """An MLflow pyfunc model loaded in-process (``models:/NAME@ALIAS``, ``runs:/...``, a path).

    Loading a pyfunc model runs that model's code: load only models you trust, and audit
    others over HTTP against a sandboxed server.
    """

    def __init__(self, model_uri: str, **options) -> None:
        import mlflow.pyfunc
        from mlflow.exceptions import MlflowException

        try:
            self._model = mlflow.pyfunc.load_model(model_uri)
        except (MlflowException, OSError) as exc:
            raise EMAError(f"could not load model {model_uri!r}: {str(exc).splitlines()[0]}") from exc
        self.model_uri = model_uri
        schema = self._model.metadata.get_input_schema()
        declared = tuple(schema.inputs[0].shape) if schema is not None and schema.is_tensor_spec() else None
        super().__init__(**{"input_shape": declared, **options})

    def _predict_batch(self, inputs: np.ndarray) -> np.ndarray:
        from mlflow.exceptions import MlflowException

        try:
            return self._model.predict(inputs)
        except MlflowException as exc:
            raise EMAError(f"model {self.model_uri!r} refused the query: {str(exc).splitlines()[0]}") from exc


def float32_json(inputs: np.ndarray) -> str:
    """``{"inputs": [...]}`` with each float32 written in its shortest exact form.

    Images hold few distinct values: each is formatted once, and the server's cast back
    to float32 restores the exact input.
    """
    values, inverse = np.unique(inputs.astype(np.float32), return_inverse=True)
    table = np.array([np.format_float_positional(v, unique=True, trim="0") for v in values])
    text = table[inverse.reshape(inputs.shape)]
    for _ in range(inputs.ndim):
        text = np.array(["[" + ",".join(row) + "]" for row in text.reshape(-1, text.shape[-1])]).reshape(
            text.shape[:-1]
        )
    return '{"inputs":' + text.item() + "}"


class HttpOracle(Oracle):
    """An MLflow scoring server (``mlflow models serve``) at ``url`` (``http://HOST:PORT/invocations``).

    One HTTP session (kept-alive connection) for all batches. Connection errors, timeouts
    and 5xx answers are retried with exponential backoff; a 4xx answer is not retried and
    its message is shown.

    Parameters
    ----------
    url : str
    timeout : (float, float)
        Connect and read timeouts in seconds.
    retries : int
        Further attempts after a failed one.
    backoff : float
        Seconds before the first retry; doubled after each.
    **options
        See :class:`Oracle`. ``input_shape`` defaults to our image models' (-1, 1, 28, 28).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: tuple[float, float] = (5.0, 120.0),
        retries: int = 3,
        backoff: float = 0.5,
        **options,
    ) -> None:
        import requests

        if not url.startswith(("http://", "https://")):
            raise InputError(f"expected an http(s):// URL of a scoring server's /invocations, got {url!r}")
        self.url, self.timeout, self.retries, self.backoff = url, timeout, retries, backoff
        self._session = requests.Session()
        super().__init__(**{"input_shape": IMAGE_INPUT_SHAPE, **options})

    def _predict_batch(self, inputs: np.ndarray) -> np.ndarray:
        import requests

        body = float32_json(inputs)
        problem = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                response = self._session.post(
                    self.url, data=body, headers={"Content-Type": "application/json"}, timeout=self.timeout
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                problem = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code >= 500:
                problem = f"HTTP {response.status_code}: {response.text[:300]}"
                continue
            if response.status_code >= 400:
                raise EMAError(
                    f"scoring server {self.url} refused the query (HTTP {response.status_code}): "
                    f"{_server_message(response)}"
                )
            return np.asarray(response.json()["predictions"])
        raise EMAError(f"scoring server {self.url} failed after {self.retries + 1} attempts; last: {problem}")


def _server_message(response) -> str:
    """The server's error message, on one line."""
    try:
        message = str(json.loads(response.text).get("message", response.text))
    except (ValueError, AttributeError):
        message = response.text
    return " ".join(message.split())[:500]
