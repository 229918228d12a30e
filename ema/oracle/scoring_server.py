"""An MLflow scoring server (``mlflow models serve``) as an oracle: retries, backoff and wall-clock deadlines."""

from __future__ import annotations

import base64
import contextvars
import http.client
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

import numpy as np
import pandas as pd

from ema.data.arrays import ArraySet
from ema.errors import InputError, ModelAccessError, TimeLimitExceeded
from ema.inputs import TEXT_DTYPE, InputSpec, text_columns
from ema.limits import check_deadline, expired, seconds_left
from ema.oracle.base import Oracle
from ema.oracle.outputs import Predictions
from ema.oracle.timed_connection import RequestExpired, TimedConnection
from ema.oracle.wire_format import CONTENT_TYPES, REQUEST_FORMATS, encode_request, parse_reply, server_message
from ema.validation import REDACTED, SECRET_NAME, check_choice, check_finite, check_positive_int, redact_url

#: Seconds one scoring through a server (one ``predict`` call: every batch, retry and wait) may take by default.
DEFAULT_TIMEOUT = 600.0
#: Seconds one request (connect, send, the whole reply) may take by default; it is retried when it runs out.
DEFAULT_REQUEST_TIMEOUT = 120.0
#: Reply bytes allowed per image scored (a 1,000-class reply takes about 25 kB an image), plus a fixed allowance.
MAX_REPLY_BYTES_PER_IMAGE = 1 << 16
REPLY_BYTES_ALLOWANCE = 1 << 20
#: ``request_format``: Parquet, falling back to JSON for good when the server does not take Parquet (HTTP 415).
AUTO_FORMAT = "auto"
#: Statuses by which a server refuses the query itself (its shape, type or columns): unchanged, it fails again.
INPUT_REFUSED = (400, 422)
#: The status of a URL the server does not serve, and what to check then.
NOT_FOUND = 404
NOT_FOUND_HINT = "check the URL's path: MLflow's scoring server answers on /invocations (http://HOST:PORT/invocations)"
#: What ``request_format`` accepts.
HTTP_FORMATS = (AUTO_FORMAT, *REQUEST_FORMATS)
#: Credentials shorter than this are not hidden inside a server's messages (every occurrence of two letters would be).
MIN_SECRET_LENGTH = 4


class ScoringTimeout(ModelAccessError):
    """A model server did not finish within a wall-clock limit."""


class _UnsupportedFormat(ModelAccessError):
    """The server refused the request's content type (HTTP 415)."""


class _RetryableFailure(Exception):
    """One attempt failed in a way worth retrying: what went wrong, and whether the request's time ran out."""

    def __init__(self, problem: str, timed_out: bool) -> None:
        super().__init__(problem)
        self.problem, self.timed_out = problem, timed_out


class HttpOracle(Oracle):
    """An MLflow scoring server (``mlflow models serve``) at ``url`` (``http://HOST:PORT/invocations``).

    One kept-alive connection per request in flight (one by default). Connection errors, request timeouts and
    5xx answers are retried with exponential backoff; a 4xx answer is not retried and its
    message is shown. Every limit is wall-clock time, enforced however slowly the server
    sends its bytes: when one runs out, the connection is shut down. No proxy is used.

    Parameters
    ----------
    url : str
        The server's ``/invocations``. A ``user:password@`` in it is sent as HTTP Basic
        authorization and never shown: ``self.url``, ``self.source`` and every message carry
        the URL with its secrets replaced by ``***`` (:func:`ema.validation.redact_url`).
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
    concurrency : int
        Requests in flight at once, each on a kept-alive connection of its own (default 1).
        A server with several workers, or one that scores while the client encodes the
        next batch, answers sooner (benchmarks/RESULTS.md); outputs are the same.
    request_format : {"json", "parquet", "auto"}
        How batches are sent. ``json`` (the default) works with any MLflow scoring server.
        ``parquet`` sends each batch's values in their own type, which the server does not parse
        one by one (several times faster for images, benchmarks/RESULTS.md); the served model
        needs a signature that declares its input (a tensor of fixed shape, or columns).
        ``auto`` sends Parquet and, if the server answers 415 (a server that predates Parquet),
        JSON from then on.
    table_names : bool
        Whether a table's columns go by the file's names when ``input_spec`` names none (a server with
        no registry entry, whose signature is unknown: if it declares columns, it matches them by name).
    **options
        See :class:`Oracle`. ``input_spec`` defaults to our image models' float32 (-1, 1, 28, 28).

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
        concurrency: int = 1,
        request_format: str = "json",
        table_names: bool = False,
        **options,
    ) -> None:
        parts, port = _check_url(url)
        _check_limits(timeout=timeout, request_timeout=request_timeout, retries=retries, backoff=backoff)
        self.url, self.timeout, self.request_timeout = redact_url(url), float(timeout), float(request_timeout)
        self.retries, self.backoff = retries, backoff
        self.concurrency = check_positive_int("concurrency", concurrency)
        self.request_format = check_choice("request format", request_format, HTTP_FORMATS)
        self._sending = "parquet" if request_format == AUTO_FORMAT else request_format
        self.source = f"scoring server {self.url}"
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._address = (parts.scheme, parts.hostname, port)
        self._headers = _credential_headers(parts)
        self._secrets = _secrets(parts, self._headers)
        self._local = threading.local()
        self._connections: list[TimedConnection] = []
        self._deadline, self._command_bound = math.inf, False
        self.table_names, self._named_here = table_names, False  # columns named from a table, not the server
        super().__init__(**options)

    def _inputs_of(self, data: ArraySet) -> np.ndarray:
        """As :meth:`Oracle._inputs_of`; a table sent by its own column names when the server's are not known, a
        column as integers where the whole set's values are whole (a signature's integer columns need them, its
        float ones take them)."""
        if self.table_names and data.kind == "table" and (self.input_spec.columns is None or self._named_here):
            text = text_columns(data.x)
            numbers = data.x[:, ~text].astype(np.float64)
            whole = np.ones(len(text), dtype=bool)
            whole[~text] = np.all(numbers == np.rint(numbers), axis=0) & np.all(np.abs(numbers) < 2**53, axis=0)
            dtypes = tuple(TEXT_DTYPE if t else "int64" if w else "float64" for t, w in zip(text, whole, strict=True))
            self.input_spec = InputSpec(dtype="float64", columns=data.features, column_dtypes=dtypes)
            self._named_here = True
        return super()._inputs_of(data)

    def predict(self, pixels: np.ndarray) -> Predictions:
        """Validated predictions, as :meth:`Oracle.predict`, within ``timeout`` seconds of wall time and not past the
        command's ``--timeout``: each set an audit scores through this oracle gets what is left of the command's time,
        not again the seconds that were left when the oracle was made, so a request in flight is cut off at the
        command's deadline too, and the command's error (:func:`ema.limits.expired`) says so."""
        left = seconds_left(self.timeout)
        self._command_bound = left < self.timeout
        self._deadline = time.monotonic() + min(self.timeout, left)
        try:
            return super().predict(pixels)
        finally:
            self._deadline = math.inf
            for connection in self._connections:
                connection.close()
            self._connections.clear()
            self._local = threading.local()

    #: Every request holds ``batch_size`` images: a request's fixed cost (the round trip, the server's parsing) makes
    #: small ones dear (benchmarks/RESULTS.md, ``http``), and each is cut off by ``request_timeout``, ``timeout`` and
    #: the command's deadline (:meth:`predict`) however slow the server.
    paced = False
    #: A request cut off by ``request_timeout`` or ``timeout`` says nothing of the rows it sent.
    input_blind_failures = (ScoringTimeout,)

    def _scored_batches(self, pixels: np.ndarray) -> Iterator[tuple[int, int, np.ndarray]]:
        """Batches scored ``concurrency`` at a time, yielded in order; the first failure stops the rest.

        The command's ``--timeout`` is checked before each batch is handed to a connection and before each reply is
        waited for, as one connection checks it before each batch (:meth:`Oracle._scored_batches`): once it has
        passed, no batch is sent, the batches not yet sent are cancelled, and the requests in flight end (each
        cut off at the deadline, :meth:`predict`) before :class:`~ema.errors.TimeLimitExceeded` names this step.
        """
        starts = range(0, len(pixels), self.batch_size)
        if self.concurrency == 1 or len(starts) == 1:
            yield from super()._scored_batches(pixels)
            return
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="ema-http") as pool:
            pending: deque[tuple[int, Future]] = deque()  # one batch waits beyond those in flight: memory bounded
            try:
                for start in starts:
                    check_deadline(self.step)
                    # in the command's context: a worker whose request the command's deadline cuts off raises its error
                    batch = pixels[start : start + self.batch_size]
                    pending.append((start, pool.submit(contextvars.copy_context().run, self._score, batch)))
                    if len(pending) > self.concurrency:
                        yield self._done(pending.popleft(), len(pixels))
                while pending:
                    check_deadline(self.step)
                    yield self._done(pending.popleft(), len(pixels))
            finally:
                for _, future in pending:
                    future.cancel()

    def _done(self, pending: tuple[int, Future], n_images: int) -> tuple[int, int, np.ndarray]:
        """``(start, stop, outputs)`` of a batch sent at ``start``, once its reply is in."""
        start, future = pending
        return start, min(start + self.batch_size, n_images), future.result()

    @property
    def _connection(self) -> TimedConnection:
        """This thread's kept-alive connection to the server."""
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = TimedConnection(*self._address)
            self._connections.append(connection)
        return connection

    def _predict_batch(self, inputs: np.ndarray | pd.DataFrame) -> object:
        """One batch's predictions; with ``auto``, in JSON from the first time the server refuses Parquet."""
        sending = self._sending
        try:
            return self._send(inputs, sending)
        except _UnsupportedFormat as exc:
            if self.request_format != AUTO_FORMAT or sending == "json":
                raise
            if self._sending != "json":
                self._sending = "json"
                logging.getLogger(__name__).warning("%s; sending JSON instead of Parquet from now on", exc)
            return self._send(inputs, "json")

    def _send(self, inputs: np.ndarray | pd.DataFrame, request_format: str) -> object:
        """One batch's predictions, retried with backoff until an attempt succeeds, fails for good or time runs out."""
        body = encode_request(inputs, request_format, self.input_spec.tensor_name)
        most = MAX_REPLY_BYTES_PER_IMAGE * len(inputs) + REPLY_BYTES_ALLOWANCE
        failure = _RetryableFailure("", timed_out=False)
        for attempt in range(self.retries + 1):
            if attempt:
                self._wait(self.backoff * 2 ** (attempt - 1), failure.problem)
            try:
                reply = self._attempt(body, CONTENT_TYPES[request_format], most, len(inputs), failure.problem)
                return parse_reply(reply, self.source)
            except _RetryableFailure as exc:
                failure = exc
        advice = "; raise it with --request-timeout SECONDS" if failure.timed_out else ""
        error = ScoringTimeout if failure.timed_out else ModelAccessError
        raise error(
            f"scoring server {self.url} failed after {self.retries + 1} attempts; last: {failure.problem}{advice}"
        )

    def _attempt(self, body: bytes, content_type: str, most: int, n_images: int, problem: str) -> bytes:
        """One request within what is left of the overall deadline: the reply of a 2xx answer.

        Raises
        ------
        _RetryableFailure
            On a connection error, a request timeout or a 5xx answer.
        ScoringTimeout
            When the overall deadline runs out (``problem``, the last attempt's, is named);
            :class:`~ema.errors.TimeLimitExceeded` where the command's ``--timeout`` set it.
        _UnsupportedFormat
            On HTTP 415 (the server does not read ``content_type``); not retried.
        ModelAccessError
            On another 4xx answer or a reply larger than ``most`` bytes; neither is retried.
        """
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise self._overall_timeout(problem)
        seconds = min(self.request_timeout, remaining)
        try:
            status, reply = self._connection.post(
                self._path, body, {**self._headers, "Content-Type": content_type}, seconds=seconds, most=most
            )
        except RequestExpired:
            if seconds < self.request_timeout:
                raise self._overall_timeout(problem) from None
            raise _RetryableFailure(
                f"no complete reply within the request timeout of {self.request_timeout:g} s", timed_out=True
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise _RetryableFailure(
                f"ConnectionError: {type(exc).__name__}: {' '.join(str(exc).split())}", timed_out=False
            ) from None
        if len(reply) > most:
            raise ModelAccessError(
                f"scoring server {self.url} sent a reply larger than {most} bytes for a batch of {n_images} "
                "images; expected probabilities, logits or labels"
            )
        text = self._scrubbed(reply.decode("utf-8", errors="replace"))
        if status >= 500:
            raise _RetryableFailure(f"HTTP {status}: {text[:300]}", timed_out=False)
        if 300 <= status < 400:  # not followed: a redirect may lead anywhere, with the query and credentials
            raise InputError(
                f"scoring server {self.url} redirected the query (HTTP {status}), which is not followed: give the "
                "URL of the server's own /invocations"
            )
        if not 200 <= status < 300:
            error = {415: _UnsupportedFormat, **dict.fromkeys(INPUT_REFUSED, InputError)}.get(status, ModelAccessError)
            falls_back = error is _UnsupportedFormat and self.request_format == AUTO_FORMAT  # JSON follows at once
            sent_parquet = content_type == CONTENT_TYPES["parquet"]
            hint = "; it was sent as Parquet: --http-format json sends JSON" if sent_parquet and not falls_back else ""
            if status == NOT_FOUND:  # the URL is wrong, whatever was sent: the format is beside the point
                raise error(
                    f"scoring server {self.url}: no such endpoint (HTTP 404): {server_message(text)}; {NOT_FOUND_HINT}"
                )
            raise error(f"scoring server {self.url} refused the query (HTTP {status}): {server_message(text)}{hint}")
        return reply

    def _scrubbed(self, text: str) -> str:
        """A server's reply with the URL's credentials hidden: a server may quote the request's authorization."""
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return redact_url(text)

    def _overall_timeout(self, problem: str = "") -> ScoringTimeout | TimeLimitExceeded:
        """The error of a scoring whose deadline ran out: the command's, where its ``--timeout`` set the deadline."""
        if self._command_bound:
            return expired(self.step)
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


def _check_url(url: object) -> tuple[SplitResult, int | None]:
    """The parts and port of a scoring server's http(s) URL; messages show it without its secrets."""
    shown = redact_url(url) if isinstance(url, str) else url
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
    except ValueError as exc:  # an unclosed [IPv6 address
        raise InputError(
            f"expected an http(s):// URL of a scoring server's /invocations, got {shown!r}: {exc}"
        ) from exc
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"expected an http(s):// URL of a scoring server's /invocations, got {shown!r}")
    try:
        port = parts.port
    except ValueError as exc:
        raise InputError(f"expected an http(s):// URL with a valid port, got {shown!r}: {exc}") from exc
    return parts, port


def _credential_headers(parts: SplitResult) -> dict[str, str]:
    """HTTP Basic authorization from the URL's ``user:password@``, as curl sends it; none without a user."""
    if parts.username is None:
        return {}
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode("ascii")}


def _secrets(parts: SplitResult, headers: dict[str, str]) -> tuple[str, ...]:
    """What of the URL must never be shown: its password, the Basic token made of it, token parameters' values."""
    tokens = [value for name, value in parse_qsl(parts.query) if SECRET_NAME.search(name)]
    credentials = [unquote(parts.password or ""), headers.get("Authorization", "").removeprefix("Basic ")]
    return tuple(sorted({s for s in [*credentials, *tokens] if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True))


def _check_limits(*, timeout: float, request_timeout: float, retries: int, backoff: float) -> None:
    """Refuse limits that are not finite positive seconds, a negative retry count or a negative backoff."""
    check_finite("timeout (seconds)", timeout, minimum=0.0, open_minimum=True)
    check_finite("request_timeout (seconds)", request_timeout, minimum=0.0, open_minimum=True)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InputError(f"expected retries as an integer >= 0, got {retries!r}")
    check_finite("backoff (seconds)", backoff, minimum=0.0)
