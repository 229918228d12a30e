"""Black-box access to a model: class probabilities (or labels) for images, and nothing else.

The target is reached only through an oracle; nothing here reads weights or training
data. Two oracles: an MLflow pyfunc model loaded in-process, and an MLflow scoring server
over HTTP. Both cast and reshape the inputs to the model's declared shape, score in
batches, and validate the outputs.
"""

from __future__ import annotations

import http.client
import json
import math
import select
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np
from scipy.special import softmax

from ema.data.arrays import MODEL_INPUT_SHAPE, to_pixels
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
IMAGE_INPUT_SHAPE = MODEL_INPUT_SHAPE
#: Seconds one scoring through a server (one ``predict`` call: every batch, retry and wait) may take by default.
DEFAULT_TIMEOUT = 600.0
#: Seconds one request (connect, send, the whole reply) may take by default; it is retried when it runs out.
DEFAULT_REQUEST_TIMEOUT = 120.0
#: Reply bytes allowed per image scored (a 1,000-class reply takes about 25 kB an image), plus a fixed allowance.
MAX_REPLY_BYTES_PER_IMAGE = 1 << 16
REPLY_BYTES_ALLOWANCE = 1 << 20
#: Reply shapes accepted from a scoring server, as MLflow's scoring server writes them.
REPLY_SHAPES = (
    '{"predictions": [[...], ...]} (an array), {"predictions": [{"col": v, ...}, ...]} (a DataFrame\'s records), '
    '{"predictions": {"col": [...], ...}} (columns), or a bare list (MLflow 1.x)'
)


class ScoringTimeout(EMAError):
    """A model server did not finish within a wall-clock limit."""


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


def numeric_outputs(raw: object, source: str = "the model") -> np.ndarray:
    """A model's raw outputs as a numeric array; strings, objects, ``None`` and ragged lists are refused.

    Accepts what a pyfunc ``predict`` returns: an ndarray, a list, a pandas DataFrame or
    Series (a single column whose cells are vectors is stacked), or a mapping of equal-length
    columns.

    Raises
    ------
    InputError
        Naming ``source`` and what came back, when the outputs are not numbers.
    """
    if hasattr(raw, "to_dict") and hasattr(raw, "to_numpy"):  # pandas DataFrame or Series
        raw = raw.to_dict(orient="list") if hasattr(raw, "columns") else raw.to_numpy()
    if isinstance(raw, dict):
        raw = _stack_columns(raw, source)
    try:
        outputs = np.asarray(raw)
    except (ValueError, TypeError) as exc:
        raise InputError(
            f"expected {source} to return numbers (probabilities, logits or labels), got {_describe_outputs(raw)} "
            f"that do not form an array: {' '.join(str(exc).split())[:200]}"
        ) from exc
    if outputs.dtype == bool:
        return outputs.astype(np.int64)
    if outputs.dtype.kind in "iuf":
        return outputs
    if outputs.dtype == object and outputs.ndim > 0:
        try:
            converted = outputs.astype(np.float64)
        except (ValueError, TypeError):
            converted = None
        if converted is not None and all(_is_number(v) for v in outputs.reshape(-1)[:1000]):
            return converted
    raise InputError(
        f"expected {source} to return numbers (probabilities, logits or labels), got {_describe_outputs(outputs)}"
    )


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _describe_outputs(outputs: object) -> str:
    """What a model returned, in a few words: kind, dtype, shape and a first value."""
    if not isinstance(outputs, np.ndarray):
        return f"a {type(outputs).__name__}"
    kinds = {
        "U": "strings",
        "S": "bytes",
        "O": "Python objects",
        "c": "complex numbers",
        "M": "dates",
        "m": "durations",
    }
    kind = kinds.get(outputs.dtype.kind, f"values of dtype {outputs.dtype}")
    first = repr(outputs.reshape(-1)[0])[:60] if outputs.size else "nothing"
    return f"{kind} (dtype {outputs.dtype}, shape {outputs.shape}), e.g. {first}"


def _stack_columns(columns: dict, source: str) -> object:
    """Columns ``{name: [v, ...]}`` as rows; one column of vectors becomes those vectors."""
    values = list(columns.values())
    if not values or not all(isinstance(v, (list, tuple, np.ndarray)) for v in values):
        return np.asarray(columns, dtype=object)  # refused by the caller with what came back
    if len({len(v) for v in values}) != 1:
        raise InputError(
            f"expected {source} to return columns of one value per sample, got columns of lengths "
            f"{ {str(k): len(v) for k, v in columns.items()} }"
        )
    if len(values) == 1:
        return values[0]  # one column: scalars per sample (labels) or a vector per sample (probabilities)
    return [list(row) for row in zip(*values, strict=True)]


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

    #: How errors name the model.
    source = "the model"

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
            batch = numeric_outputs(self._predict_batch(self.prepare(images)), self.source)
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
        self.source = f"model {model_uri!r}"
        schema = self._model.metadata.get_input_schema()
        declared = tuple(schema.inputs[0].shape) if schema is not None and schema.is_tensor_spec() else None
        super().__init__(**{"input_shape": declared, **options})

    def _predict_batch(self, inputs: np.ndarray) -> object:
        from mlflow.exceptions import MlflowException

        try:
            return self._model.predict(inputs)
        except MlflowException as exc:
            raise EMAError(f"model {self.model_uri!r} refused the query: {_first_line(exc)}") from exc
        except Exception as exc:  # the model's own code: whatever it raises is the model's failure, not ours
            raise EMAError(
                f"model {self.model_uri!r} failed on a batch of {len(inputs)} images of shape {inputs.shape[1:]}: "
                f"{type(exc).__name__}: {_first_line(exc)}"
            ) from exc


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:500] if lines else type(exc).__name__


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

    One kept-alive connection for all batches. Connection errors, request timeouts and
    5xx answers are retried with exponential backoff; a 4xx answer is not retried and its
    message is shown. Every limit is wall-clock time, enforced however slowly the server
    sends its bytes: when one runs out, the connection is shut down. No proxy is used.

    Parameters
    ----------
    url : str
    timeout : float
        Seconds one scoring (one :meth:`predict` call: all batches, retries and waits) may
        take; on expiry :class:`ScoringTimeout` is raised. Default 600.
    request_timeout : float
        Seconds one request (connect, send, receive the whole reply) may take before it is
        abandoned and retried. Default 120.
    retries : int
        Further attempts after a failed one.
    backoff : float
        Seconds before the first retry; doubled after each.
    **options
        See :class:`Oracle`. ``input_shape`` defaults to our image models' (-1, 1, 28, 28).

    Raises
    ------
    InputError
        If the URL or a limit is malformed.

    Notes
    -----
    Replies are read in every shape MLflow's scoring server writes (see ``REPLY_SHAPES``);
    anything else, or more than ``MAX_REPLY_BYTES_PER_IMAGE`` bytes per image, is refused.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        retries: int = 3,
        backoff: float = 0.5,
        **options,
    ) -> None:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"expected an http(s):// URL of a scoring server's /invocations, got {url!r}")
        try:
            port = parts.port
        except ValueError as exc:
            raise InputError(f"expected an http(s):// URL with a valid port, got {url!r}: {exc}") from exc
        for name, value in (("timeout", timeout), ("request_timeout", request_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise InputError(f"expected {name} as a finite number of seconds > 0, got {value!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise InputError(f"expected retries as an integer >= 0, got {retries!r}")
        if not 0 <= backoff < math.inf:
            raise InputError(f"expected backoff as a finite number of seconds >= 0, got {backoff!r}")
        self.url, self.timeout, self.request_timeout = url, float(timeout), float(request_timeout)
        self.retries, self.backoff = retries, backoff
        self.source = f"scoring server {url}"
        self._scheme, self._host, self._port = parts.scheme, parts.hostname, port
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._connection: http.client.HTTPConnection | None = None
        self._deadline = math.inf
        super().__init__(**{"input_shape": IMAGE_INPUT_SHAPE, **options})

    def predict(self, pixels: np.ndarray) -> Predictions:
        """Validated predictions, as :meth:`Oracle.predict`, within ``timeout`` seconds of wall time."""
        self._deadline = time.monotonic() + self.timeout
        try:
            return super().predict(pixels)
        finally:
            self._deadline = math.inf
            self._close()

    def _predict_batch(self, inputs: np.ndarray) -> object:
        body = float32_json(inputs).encode()
        most = MAX_REPLY_BYTES_PER_IMAGE * len(inputs) + REPLY_BYTES_ALLOWANCE
        problem, timed_out = "", False
        for attempt in range(self.retries + 1):
            if attempt:
                self._wait(self.backoff * 2 ** (attempt - 1), problem)
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                raise self._overall_timeout(problem)
            seconds = min(self.request_timeout, remaining)
            try:
                status, reply = self._post(body, seconds, most)
            except _Expired:
                if seconds < self.request_timeout:
                    raise self._overall_timeout(problem) from None
                problem, timed_out = f"no complete reply within the request timeout of {self.request_timeout:g} s", True
                continue
            except (OSError, http.client.HTTPException) as exc:
                problem, timed_out = f"ConnectionError: {type(exc).__name__}: {' '.join(str(exc).split())}", False
                continue
            if len(reply) > most:
                raise EMAError(
                    f"scoring server {self.url} sent a reply larger than {most} bytes for a batch of {len(inputs)} "
                    "images; expected probabilities, logits or labels"
                )
            text = reply.decode("utf-8", errors="replace")
            if status >= 500:
                problem, timed_out = f"HTTP {status}: {text[:300]}", False
                continue
            if not 200 <= status < 300:
                raise EMAError(f"scoring server {self.url} refused the query (HTTP {status}): {_server_message(text)}")
            return parse_reply(reply, self.source)
        advice = "; raise it with --request-timeout SECONDS" if timed_out else ""
        error = ScoringTimeout if timed_out else EMAError
        raise error(f"scoring server {self.url} failed after {self.retries + 1} attempts; last: {problem}{advice}")

    def _overall_timeout(self, problem: str = "") -> ScoringTimeout:
        return ScoringTimeout(
            f"scoring through {self.url} did not finish within the overall limit of {self.timeout:g} s"
            + (f" (last attempt: {problem})" if problem else "")
            + "; raise it with --timeout SECONDS"
        )

    def _wait(self, seconds: float, problem: str) -> None:
        """Sleep before a retry, but not past the overall deadline."""
        if seconds >= self._deadline - time.monotonic():
            raise self._overall_timeout(problem)
        time.sleep(seconds)

    def _post(self, body: bytes, seconds: float, most: int) -> tuple[int, bytes]:
        """One POST within ``seconds`` of wall time: (status, reply of at most ``most`` bytes).

        A timer shuts the socket down when the time is up, which wakes any blocked
        connect, send or receive; :class:`_Expired` is raised then.
        """
        connection = self._connect(seconds)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            sock = connection.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        timer = threading.Timer(seconds, expire)
        timer.daemon = True
        timer.start()
        try:
            if connection.sock is None:
                connection.connect()
            if not expired.is_set():
                connection.request("POST", self._path, body=body, headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                reply = bytearray()
                while len(reply) <= most:  # to the reply's end (its length, last chunk or the server's close)
                    chunk = response.read(min(most + 1 - len(reply), 1 << 20))
                    if not chunk:
                        break
                    reply += chunk
        except (OSError, http.client.HTTPException) as exc:
            self._close()
            if expired.is_set() or isinstance(exc, TimeoutError):  # a socket timeout is the same limit, per receive
                raise _Expired from None
            raise
        finally:
            timer.cancel()
        if expired.is_set():  # the socket was shut down: whatever was read may be cut short
            self._close()
            raise _Expired
        if len(reply) <= most and response.length:
            self._close()
            raise http.client.IncompleteRead(bytes(reply), response.length)  # the server closed before the end
        if response.will_close or not response.isclosed():
            self._close()
        return response.status, bytes(reply)

    def _connect(self, seconds: float) -> http.client.HTTPConnection:
        """The kept-alive connection, unless the server has closed it; socket timeouts set to ``seconds``."""
        connection = self._connection
        if connection is not None and connection.sock is not None:
            if select.select([connection.sock], [], [], 0)[0]:  # readable while idle: closed by the server
                self._close()
                connection = None
            else:
                connection.sock.settimeout(seconds)
        if connection is None:
            if self._scheme == "https":
                import ssl

                connection = http.client.HTTPSConnection(
                    self._host, self._port, timeout=seconds, context=ssl.create_default_context()
                )
            else:
                connection = http.client.HTTPConnection(self._host, self._port, timeout=seconds)
            self._connection = connection
        connection.timeout = seconds
        return connection

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class _Expired(Exception):
    """A request's wall-clock limit ran out (internal to :class:`HttpOracle`)."""


def parse_reply(body: bytes, source: str = "the scoring server") -> object:
    """The predictions in a scoring server's JSON reply, in any shape MLflow's scoring server writes.

    MLflow writes ``{"predictions": ...}`` (plus optional metadata keys) where the
    predictions are an array's nested lists, a DataFrame's records ``[{"col": v}, ...]``,
    or whatever JSON the model returned, such as columns ``{"col": [...]}``; MLflow 1.x
    wrote the predictions bare. Records become rows (columns in the first record's order);
    a single column of vectors becomes those vectors.

    Raises
    ------
    InputError
        If the body is not JSON of one of these shapes.
    """
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(
            f"expected a JSON reply from {source} as {REPLY_SHAPES}, got {bytes(body[:80])!r}: "
            f"{' '.join(str(exc).split())[:200]}"
        ) from exc
    if isinstance(payload, dict):
        if "predictions" not in payload:
            keys = sorted(str(key) for key in payload)[:10]
            raise InputError(f"expected a JSON reply from {source} as {REPLY_SHAPES}, got an object with keys {keys}")
        payload = payload["predictions"]
    elif not isinstance(payload, list):
        raise InputError(f"expected a JSON reply from {source} as {REPLY_SHAPES}, got {type(payload).__name__}")
    if isinstance(payload, list) and payload and all(isinstance(row, dict) for row in payload):
        return _stack_records(payload, source)
    if isinstance(payload, dict):
        return _stack_columns(payload, source)
    return payload


def _stack_records(records: list[dict], source: str) -> object:
    """DataFrame records ``[{"col": v, ...}, ...]`` as rows; one column of vectors becomes those vectors."""
    columns = list(records[0])
    if not columns or any(list(row) != columns for row in records):
        raise InputError(
            f"expected {source} to return records with the same columns in every row, got columns {columns[:10]} "
            f"in the first row and {next((list(r)[:10] for r in records if list(r) != columns), [])} in another"
        )
    if len(columns) == 1:
        return [row[columns[0]] for row in records]
    return [[row[column] for column in columns] for row in records]


def _server_message(text: str) -> str:
    """The server's error message, on one line."""
    try:
        message = str(json.loads(text).get("message", text))
    except (ValueError, AttributeError, RecursionError):
        message = text
    return " ".join(message.split())[:500]
