"""HttpOracle against a real HTTP server on 127.0.0.1 that replies badly, trickles bytes or hangs.

Every test is bounded by small limits: none waits more than a few seconds.
"""

from __future__ import annotations

import http.server
import io
import json
import threading
import time

import numpy as np
import pandas as pd
import pytest

from ema.errors import RETRYABLE, EMAError, InputError, ModelAccessError, TimeLimitExceeded
from ema.inputs import InputSpec
from ema.limits import command_limits
from ema.oracle import HttpOracle, ScoringTimeout, numeric_outputs, parse_reply
from tests.command_clock import command_clock

IMAGES = np.zeros((3, 28, 28), np.uint8)
PROBA = [[0.25, 0.75], [0.5, 0.5], [1.0, 0.0]]


class Handler(http.server.BaseHTTPRequestHandler):
    """Replies as ``self.server.behave(handler, n_images)`` says."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.calls += 1
        try:
            self.server.behave(self, len(json.loads(body)["inputs"]))
        except OSError:  # the client gave up and shut its socket
            pass

    def reply(self, body: bytes | str, status: int = 200, content_length: int | None = None):
        body = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body) if content_length is None else content_length))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    """A function that starts a server with a behaviour and returns (url, server); all stopped after the test."""
    servers = []

    def start(behave):
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.behave, httpd.calls, httpd.stop = behave, 0, threading.Event()
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}/invocations", httpd

    yield start
    for httpd in servers:
        httpd.stop.set()
        httpd.shutdown()
        httpd.server_close()


def json_reply(payload):
    return lambda handler, n: handler.reply(json.dumps(payload))


# --- reply shapes -------------------------------------------------------------------------------------------------

ACCEPTED = {
    "array": {"predictions": PROBA},
    "array with metadata": {"predictions": PROBA, "model_version": "3"},
    "records of a DataFrame": {"predictions": [{"0": a, "1": b} for a, b in PROBA]},
    "records with named columns": {"predictions": [{"cat": a, "dog": b} for a, b in PROBA]},
    "records of one vector column": {"predictions": [{"probabilities": row} for row in PROBA]},
    "columns": {"predictions": {"0": [r[0] for r in PROBA], "1": [r[1] for r in PROBA]}},
    "one column of vectors": {"predictions": {"probabilities": PROBA}},
    "bare list (MLflow 1.x)": PROBA,
    "bare records (MLflow 1.x)": [{"0": a, "1": b} for a, b in PROBA],
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_http_oracle_accepts_mlflow_reply_shapes(server, name):
    url, _ = server(json_reply(ACCEPTED[name]))
    np.testing.assert_allclose(HttpOracle(url).predict_proba(IMAGES), PROBA)


def test_http_oracle_accepts_label_records_of_a_series(server):
    url, _ = server(json_reply({"predictions": [{"0": 1}, {"0": 0}, {"0": 1}]}))
    predictions = HttpOracle(url).predict(IMAGES)
    assert predictions.access == "label-only"
    np.testing.assert_array_equal(predictions.proba.argmax(axis=1), [1, 0, 1])


#: Replies that are not JSON at all: the server (or a proxy before it) misbehaved, a retryable ModelAccessError.
NOT_JSON = {
    "invalid JSON": ("{'predictions': oops", r"expected a JSON reply from scoring server .* got b\"\{'predictions'"),
    "empty body": ("", r"expected a JSON reply from scoring server .* got b''"),
    "a proxy's HTML page": (
        "<html><body>502 Bad Gateway</body></html>",
        r"expected a JSON reply from scoring server .* got b'<html><body>502 Bad Gateway</body></html>': Expecting",
    ),
}
REFUSED = {
    "no predictions key": (
        json.dumps({"outputs": PROBA}),
        r"expected a JSON reply .* \{\"predictions\": \[\[\.\.\.\].*got an object with keys \['outputs'\]",
    ),
    "a JSON string": (json.dumps("hello"), r"expected a JSON reply .* got str"),
    "strings": (
        json.dumps({"predictions": ["cat", "dog", "cat"]}),
        r"expected scoring server .* to return numbers .*got strings \(dtype <U3, shape \(3,\)\), e.g. .*'cat'",
    ),
    "nulls": (json.dumps({"predictions": [None, None, None]}), r"to return numbers .*got Python objects"),
    "null predictions": (json.dumps({"predictions": None}), r"to return numbers .*got Python objects"),
    "nested objects": (
        json.dumps({"predictions": [[{"a": 1}], [{"a": 1}], [{"a": 1}]]}),
        r"to return numbers .*got Python objects",
    ),
    "ragged rows": (json.dumps({"predictions": [[0.5, 0.5], [1.0], [0.5, 0.5]]}), r"do not form an array"),
    "records with different columns": (
        json.dumps({"predictions": [{"0": 1.0}, {"1": 1.0}, {"0": 1.0}]}),
        r"records with the same columns in every row, got columns \['0'\] .* and \['1'\] in another",
    ),
    "columns of different lengths": (
        json.dumps({"predictions": {"0": [0.5, 0.5, 0.5], "1": [0.5]}}),
        r"columns of one value per sample, got columns of lengths \{'0': 3, '1': 1\}",
    ),
    "too few rows": (json.dumps({"predictions": PROBA[:2]}), r"expected model outputs of shape \(3, 2\) .*\(2, 2\)"),
    "deeply nested": ("[" * 100_000 + "]" * 100_000, r"expected a JSON reply"),
    "booleans": (
        json.dumps({"predictions": [True, False, True]}),
        r"integer class labels, got booleans \(shape \(3,\)",
    ),
    "one-hot booleans": (
        json.dumps({"predictions": [[False, True], [True, False], [True, False]]}),
        r"got booleans \(shape \(3, 2\)\), which are neither",
    ),
    "records of booleans": (json.dumps({"predictions": [{"0": True}, {"0": False}, {"0": True}]}), r"got booleans"),
    "integers too large for a float": (
        json.dumps({"predictions": [[10**400, 0]] * 3}),
        r"to return numbers .*got Python objects",
    ),
    "an absurd class label": (json.dumps({"predictions": [10**6] * 3}), r"expected class labels in 0\.\.9999, got"),
    "one number per sample": (
        json.dumps({"predictions": [12.5, 3.25, 7.0]}),
        r"got one number per sample \(shape \(3,\), such as 12\.5\): a regressor's outputs",
    ),
}


#: Every bad reply: its body, the message it gets, and its kind (a reply that is not JSON may pass when tried again).
BAD_REPLIES = {
    **{name: (*case, ModelAccessError) for name, case in NOT_JSON.items()},
    **{name: (*case, InputError) for name, case in REFUSED.items()},
}


@pytest.mark.parametrize("name", sorted(BAD_REPLIES))
def test_http_oracle_refuses_bad_reply_with_one_line(server, name):
    body, match, kind = BAD_REPLIES[name]
    url, httpd = server(lambda handler, n: handler.reply(body))
    with pytest.raises(kind, match=match) as excinfo:
        HttpOracle(url, retries=0).predict(IMAGES)
    assert isinstance(excinfo.value, RETRYABLE) == (kind is ModelAccessError)
    assert "\n" not in str(excinfo.value)
    assert excinfo.match(match)
    assert httpd.calls == 1  # a bad reply is not retried


def test_http_oracle_refuses_a_reply_too_large_for_the_batch(server, monkeypatch):
    monkeypatch.setattr("ema.oracle.scoring_server.REPLY_BYTES_ALLOWANCE", 0)
    url, _ = server(lambda handler, n: handler.reply(b"[" + b" " * (1 << 20) + b"]"))
    with pytest.raises(EMAError, match=r"sent a reply larger than 196608 bytes for a batch of 3 images"):
        HttpOracle(url).predict(IMAGES)


def test_http_oracle_shows_a_4xx_message_on_one_line(server):
    url, _ = server(lambda handler, n: handler.reply(json.dumps({"message": "bad\nshape"}), status=400))
    with pytest.raises(InputError, match=r"refused the query \(HTTP 400\): bad shape$"):
        HttpOracle(url).predict(IMAGES)


def test_http_oracle_hides_the_urls_credentials_a_server_quotes_back(server):
    def quote_authorization(handler, n):
        handler.reply(json.dumps({"message": f"denied: {handler.headers['Authorization']}"}), status=401)

    url, _ = server(quote_authorization)
    secret_url = url.replace("http://", "http://alice:S3cretPW@") + "?api_key=tok-123456"
    with pytest.raises(Exception) as raised:
        HttpOracle(secret_url, retries=0).predict(IMAGES)
    message = str(raised.value)
    assert "denied: Basic ***" in message
    assert not any(secret in message for secret in ("S3cretPW", "tok-123456", "YWxpY2U6UzNjcmV0UFc="))


def test_http_oracle_refuses_a_redirect_in_one_line_without_following_it(server):
    def redirect(handler, n):
        handler.send_response(307)
        handler.send_header("Location", "http://198.51.100.1/invocations")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    url, httpd = server(redirect)
    with pytest.raises(InputError, match=r"redirected the query \(HTTP 307\), which is not followed"):
        HttpOracle(url, retries=2).predict(IMAGES)
    assert httpd.calls == 1  # an input error: not retried


def test_parse_reply_keeps_record_column_order():
    assert numeric_outputs(parse_reply(b'{"predictions": [{"b": 1, "a": 2}]}')).tolist() == [[1, 2]]


# --- deadlines ----------------------------------------------------------------------------------------------------


def trickle(handler, n):
    """Headers at once, then the body one byte at a time, every 0.1 s, for as long as the client listens."""
    body = json.dumps({"predictions": [[0.5, 0.5]] * n}).encode()
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    for byte in body:
        if handler.server.stop.wait(0.1):
            return
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()


def trickle_headers(handler, n):
    """The status line and headers one byte every 0.1 s."""
    for byte in b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"a" * 10_000:
        if handler.server.stop.wait(0.1):
            return
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()


def hang(handler, n):
    handler.server.stop.wait(30)


@pytest.mark.parametrize("behave", [trickle, trickle_headers, hang], ids=["body", "headers", "silence"])
def test_http_oracle_overall_timeout_is_wall_clock(server, behave):
    url, _ = server(behave)
    oracle = HttpOracle(url, timeout=1.0, request_timeout=30.0)
    started = time.monotonic()
    with pytest.raises(ScoringTimeout) as excinfo:
        oracle.predict(IMAGES)
    assert time.monotonic() - started < 3.0
    assert "\n" not in str(excinfo.value)
    assert excinfo.match(r"did not finish within the overall limit of 1 s; raise it with --timeout SECONDS$")


@pytest.mark.parametrize("behave", [trickle, hang], ids=["body", "silence"])
def test_http_oracle_request_timeout_is_retried_then_reported(server, behave):
    url, httpd = server(behave)
    oracle = HttpOracle(url, timeout=30.0, request_timeout=0.5, retries=2, backoff=0.01)
    started = time.monotonic()
    with pytest.raises(ScoringTimeout) as excinfo:
        oracle.predict(IMAGES)
    assert time.monotonic() - started < 3.0
    assert excinfo.match(
        r"failed after 3 attempts; last: no complete reply within the request timeout of 0.5 s; "
        r"raise it with --request-timeout SECONDS$"
    )
    assert httpd.calls == 3


def test_http_oracle_overall_timeout_cuts_retries_short(server):
    url, httpd = server(lambda handler, n: handler.reply("down", status=503))
    started = time.monotonic()
    with pytest.raises(ScoringTimeout, match=r"overall limit of 0.5 s \(last attempt: HTTP 503: down\)"):
        HttpOracle(url, timeout=0.5, retries=10, backoff=0.2).predict(IMAGES)
    assert time.monotonic() - started < 1.5
    assert 1 <= httpd.calls <= 3


def test_http_oracle_limit_covers_all_batches(server):
    """Each batch answers in 0.3 s: four batches do not fit in 1 s, though each request does."""

    def slow(handler, n):
        handler.server.stop.wait(0.3)
        handler.reply(json.dumps({"predictions": [[0.5, 0.5]] * n}))

    url, httpd = server(slow)
    with pytest.raises(ScoringTimeout, match="overall limit of 1 s"):
        HttpOracle(url, timeout=1.0, request_timeout=0.5, batch_size=1).predict(np.zeros((4, 28, 28), np.uint8))
    assert httpd.calls <= 4


def test_http_oracle_keeps_one_connection_for_all_batches(server):
    ports = []

    def answer(handler, n):
        ports.append(handler.client_address[1])
        handler.reply(json.dumps({"predictions": [[0.5, 0.5]] * n}))

    url, _ = server(answer)
    oracle = HttpOracle(url, batch_size=1)
    assert oracle.predict_proba(IMAGES).shape == (3, 2)
    assert len(set(ports)) == 1 and len(ports) == 3


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"timeout": 0}, r"expected timeout \(seconds\) to be a finite number > 0, got 0"),
        ({"timeout": True}, r"expected timeout \(seconds\) to be a finite number > 0, got True"),
        ({"timeout": float("inf")}, r"expected timeout \(seconds\) to be a finite number > 0, got inf"),
        ({"request_timeout": float("nan")}, r"expected request_timeout \(seconds\) to be a finite number > 0, got nan"),
        ({"timeout": (5.0, 120.0)}, r"expected timeout \(seconds\) to be a finite number > 0, got \(5.0, 120.0\)"),
        ({"retries": -1}, r"expected retries as an integer >= 0, got -1"),
        ({"backoff": float("nan")}, r"expected backoff \(seconds\) to be a finite number >= 0, got nan"),
        ({"backoff": True}, r"expected backoff \(seconds\) to be a finite number >= 0, got True"),
    ],
)
def test_http_oracle_refuses_bad_limits(options, match):
    with pytest.raises(InputError, match=match):
        HttpOracle("http://127.0.0.1:1/invocations", **options)


@pytest.mark.parametrize(
    "url", ["ftp://x/invocations", "http:///invocations", "http://127.0.0.1:99999/x", "x", "http://[::1/invocations"]
)
def test_http_oracle_refuses_bad_urls(url):
    with pytest.raises(InputError, match=r"expected an http\(s\):// URL"):
        HttpOracle(url)


def test_http_oracle_retries_a_reply_cut_short(server):
    def cut(handler, n):
        body = json.dumps({"predictions": [[0.5, 0.5]] * n}).encode()
        handler.reply(body[:10], content_length=len(body))
        handler.close_connection = True

    url, httpd = server(cut)
    with pytest.raises(EMAError, match=r"failed after 2 attempts; last: ConnectionError: IncompleteRead"):
        HttpOracle(url, retries=1, backoff=0.01).predict(IMAGES)
    assert httpd.calls == 2


def test_http_oracle_reads_a_reply_ended_by_closing(server):
    """HTTP/1.0 style: no Content-Length, the body ends when the server closes the connection."""

    def close_ended(handler, n):
        handler.send_response(200)
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(json.dumps({"predictions": PROBA}).encode())
        handler.close_connection = True

    url, _ = server(close_ended)
    np.testing.assert_allclose(HttpOracle(url, batch_size=3).predict_proba(IMAGES), PROBA)


def test_target_oracle_passes_limits_to_http_oracle():
    from ema.training.recipes import TorchRecipe
    from ema.training.spec import TrainSpec
    from ema.workflows.target import Target

    target = Target(
        model_uri=None, model_url="http://127.0.0.1:1/invocations", version=None, recipe=TorchRecipe(TrainSpec())
    )
    oracle = target.oracle(timeout=5, request_timeout=2)
    assert (oracle.timeout, oracle.request_timeout) == (5.0, 2.0)
    assert (target.oracle().timeout, target.oracle().request_timeout) == (600.0, 120.0)


# --- concurrent requests ------------------------------------------------------------------------------------------


class EchoHandler(Handler):
    """Answers each image with probabilities [first pixel / 255, rest], counting the requests in flight at once."""

    def do_POST(self):
        inputs = np.asarray(json.loads(self.rfile.read(int(self.headers["Content-Length"])))["inputs"], np.float64)
        overlap = self.server.overlap
        with overlap["lock"]:
            overlap["now"] += 1
            overlap["most"] = max(overlap["most"], overlap["now"])
        time.sleep(0.05)
        with overlap["lock"]:
            overlap["now"] -= 1
        first = inputs.reshape(len(inputs), -1)[:, 0] / 255
        self.reply(json.dumps({"predictions": np.stack([first, 1 - first], axis=1).tolist()}))


@pytest.mark.parametrize("concurrency", [1, 3])
def test_concurrent_requests_return_every_batch_in_order(concurrency):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EchoHandler)
    httpd.overlap = {"now": 0, "most": 0, "lock": threading.Lock()}
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        images = np.repeat(np.arange(20, dtype=np.uint8), 28 * 28).reshape(20, 28, 28)
        oracle = HttpOracle(
            f"http://127.0.0.1:{httpd.server_address[1]}/invocations",
            batch_size=2,
            concurrency=concurrency,
            input_spec=InputSpec((-1, 28, 28), "uint8"),
        )
        proba = oracle.predict_proba(images)
    finally:
        httpd.shutdown()
        httpd.server_close()
    np.testing.assert_allclose(proba[:, 0] * 255, np.arange(20))
    assert httpd.overlap["most"] == concurrency  # 10 batches: with 3 workers, 3 were in flight at once


def test_a_refused_batch_among_concurrent_ones_fails_the_scoring(server):
    def refuse_from_the_third(handler, n):
        handler.reply('{"message": "no"}', status=400) if handler.server.calls >= 3 else json_reply(
            {"predictions": [[1.0, 0.0]] * n}
        )(handler, n)

    url, _ = server(refuse_from_the_third)
    oracle = HttpOracle(url, batch_size=1, concurrency=2, input_spec=InputSpec((-1, 28, 28), "uint8"))
    with pytest.raises(EMAError, match=r"refused the query \(HTTP 400\): no"):
        oracle.predict(np.zeros((8, 28, 28), np.uint8))


#: Seconds of the command's clock one request takes in the deadline tests, and the command's --timeout.
SECONDS_PER_REQUEST, COMMAND_TIMEOUT = 1.0, 5.0


@pytest.mark.parametrize("concurrency", [1, 3])
def test_the_commands_deadline_stops_http_scoring_one_request_or_several_at_a_time(server, monkeypatch, concurrency):
    """40 batches of a second each on the command's clock, a 5 s --timeout: with several requests in flight the
    deadline was never checked, and the scoring sent all 40. Either way it now stops with the command's error once
    the fifth request has used its time: no batch is sent after that but those already handed to a connection."""
    clock = command_clock(monkeypatch)

    def a_second_each(handler, n):
        clock.advance(SECONDS_PER_REQUEST)
        handler.reply(json.dumps({"predictions": [[0.5, 0.5]] * n}))

    url, httpd = server(a_second_each)
    oracle = HttpOracle(url, batch_size=1, concurrency=concurrency, input_spec=InputSpec((-1, 28, 28), "uint8"))
    with command_limits(timeout=COMMAND_TIMEOUT, started=0.0):
        with pytest.raises(TimeLimitExceeded, match=f"ran past it in step 'score scoring server {url}'"):
            oracle.predict(np.zeros((40, 28, 28), np.uint8))
    on_time = int(COMMAND_TIMEOUT / SECONDS_PER_REQUEST)  # the requests sent before the deadline passed
    assert on_time <= httpd.calls <= on_time + 2 * (concurrency - 1), httpd.calls


def test_concurrency_must_be_a_positive_integer():
    with pytest.raises(InputError, match="concurrency"):
        HttpOracle("http://127.0.0.1:1/invocations", concurrency=0)


# --- request formats ----------------------------------------------------------------------------------------------


class FormatHandler(Handler):
    """Reads JSON or Parquet (or answers 415 to Parquet when ``server.refuse_parquet``); records each content type;
    answers each image with probabilities [first pixel / 255, rest]."""

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        content_type = self.headers["Content-Type"]
        self.server.content_types.append(content_type)
        if self.path != "/invocations":
            return self.reply('{"detail": "Not Found"}', 404)
        if content_type == "application/vnd.apache.parquet":
            if self.server.refuse_parquet:
                return self.reply('{"message": "This predictor only supports the following content types"}', 415)
            frame = pd.read_parquet(io.BytesIO(body))
            inputs = np.vstack(frame.iloc[:, 0].tolist()).astype(np.float64)
        else:
            inputs = np.asarray(json.loads(body)["inputs"], np.float64)
        first = inputs.reshape(len(inputs), -1)[:, 0] / 255
        self.reply(json.dumps({"predictions": np.stack([first, 1 - first], axis=1).tolist()}))


@pytest.fixture
def format_server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FormatHandler)
    httpd.content_types, httpd.refuse_parquet = [], False
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/invocations", httpd
    httpd.shutdown()
    httpd.server_close()


FIRST_PIXELS = np.repeat(np.arange(6, dtype=np.uint8), 28 * 28).reshape(6, 28, 28)


def score_first_pixels(url: str, request_format: str) -> np.ndarray:
    oracle = HttpOracle(url, batch_size=2, request_format=request_format, input_spec=InputSpec((-1, 28, 28), "uint8"))
    return oracle.predict_proba(FIRST_PIXELS)[:, 0] * 255


@pytest.mark.parametrize(
    "request_format, refuse_parquet, sent",
    [
        ("json", False, ["application/json"] * 3),
        ("parquet", False, ["application/vnd.apache.parquet"] * 3),
        ("auto", False, ["application/vnd.apache.parquet"] * 3),
        ("auto", True, ["application/vnd.apache.parquet", *["application/json"] * 3]),
    ],
    ids=["json", "parquet", "auto", "auto-refused"],
)
def test_each_request_format_is_sent_as_asked_and_auto_falls_back_to_json_once(
    format_server, caplog, request_format, refuse_parquet, sent
):
    url, httpd = format_server
    httpd.refuse_parquet = refuse_parquet
    np.testing.assert_allclose(score_first_pixels(url, request_format), np.arange(6))
    assert httpd.content_types == sent
    fell_back = [r.getMessage() for r in caplog.records if "instead of Parquet" in r.getMessage()]
    assert len(fell_back) == refuse_parquet
    assert all("HTTP 415" in message and "--http-format json" not in message for message in fell_back)


def test_parquet_asked_for_and_refused_fails_with_the_servers_reason(format_server):
    url, httpd = format_server
    httpd.refuse_parquet = True
    with pytest.raises(EMAError, match=r"\(HTTP 415\): This predictor only supports.*--http-format json sends JSON"):
        score_first_pixels(url, "parquet")
    assert httpd.content_types == ["application/vnd.apache.parquet"]


@pytest.mark.parametrize("request_format", ["parquet", "json"])
def test_http_oracle_404_says_the_endpoint_does_not_exist(format_server, request_format):
    url, _ = format_server
    with pytest.raises(
        ModelAccessError,
        match=r"/predict: no such endpoint \(HTTP 404\): .*Not Found.*; check the URL's path: "
        r"MLflow's scoring server answers on /invocations",
    ) as excinfo:
        score_first_pixels(url.replace("/invocations", "/predict"), request_format)
    assert "Parquet" not in str(excinfo.value)


@pytest.mark.parametrize(
    "declared, given, used",
    [
        (InputSpec((-1, 28, 28), "uint8"), "auto", "auto"),  # Parquet, JSON if the server refuses it
        (InputSpec(None, "float32"), "auto", "json"),  # a shape left open: the server could not reshape a column
        (None, "auto", "json"),  # no registry entry, so no known signature
        (None, "parquet", "parquet"),
        (InputSpec((-1, 28, 28), "uint8"), "json", "json"),
    ],
)
def test_target_oracle_sends_parquet_only_where_the_signature_declares_the_inputs(monkeypatch, declared, given, used):
    import ema.workflows.target as target_module
    from ema.training.recipes import TorchRecipe
    from ema.training.spec import TrainSpec

    monkeypatch.setattr(target_module, "declared_input_spec", lambda uri: declared)
    target = target_module.Target(
        model_uri="models:/m/1" if declared is not None else None,
        model_url="http://127.0.0.1:1/invocations",
        version=None,
        recipe=TorchRecipe(TrainSpec()),
    )
    assert target.oracle(http_format=given).request_format == used


@pytest.mark.parametrize("concurrency", [1, 3])
def test_a_request_in_flight_is_cut_off_at_the_commands_deadline_not_the_oracles_limit(server, concurrency):
    """An oracle made with 600 s to go, as an audit makes it, scoring a later set with 1 s of the command's time left:
    a server that never answers is given that second, not the request timeout, and the command's error names the step
    (with several requests in flight too: the worker threads that send them raise it, in the command's context).
    """
    url, httpd = server(hang)
    spec = InputSpec((-1, 28, 28), "uint8")
    oracle = HttpOracle(
        url, timeout=600.0, request_timeout=20.0, retries=0, batch_size=1, concurrency=concurrency, input_spec=spec
    )
    with command_limits(timeout=1.0), pytest.raises(TimeLimitExceeded, match=f"in step 'score scoring server {url}'"):
        oracle.predict(IMAGES)
    assert httpd.calls == concurrency
    with pytest.raises(ScoringTimeout, match=r"overall limit of 0\.5 s"):  # no command deadline: the oracle's own limit
        HttpOracle(url, timeout=0.5, request_timeout=20.0, retries=0).predict(IMAGES)
