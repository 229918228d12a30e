"""A password in ``--model-url`` never reaches the tracking store or the screen, whether the audit passes or fails.

A scoring server on 127.0.0.1 (a scikit-learn model behind ``http.server``) answers as
``mlflow models serve`` does; the audit runs through the ``ema`` command, and every byte the
store holds (the sqlite file, the artifact folder) and everything printed is searched for
the password.
"""

from __future__ import annotations

import base64
import http.server
import json
import socket
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient
from sklearn.naive_bayes import GaussianNB

from ema.data.presets import load_splits
from ema.oracle import HttpOracle
from ema_cli.cli import main

SECRET = "s3cr3t-Pa55"
RECIPE = {"framework": "sklearn", "estimator": "sklearn.naive_bayes.GaussianNB", "params": {}}


class ModelHandler(http.server.BaseHTTPRequestHandler):
    """``/invocations`` as a scoring server answers it: the model's probabilities, or HTTP ``server.status``."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.authorizations.append(self.headers.get("Authorization"))
        if self.server.status != 200:
            self.reply(json.dumps({"error_code": "INTERNAL_ERROR", "message": "boom"}), self.server.status)
            return
        pixels = np.asarray(body["inputs"], np.float32)
        self.reply(
            json.dumps({"predictions": self.server.model.predict_proba(pixels.reshape(len(pixels), -1)).tolist()})
        )

    def reply(self, body: str, status: int = 200):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def model():
    """A classifier of 28 x 28 pixels in [0, 1], trained on one fold (seconds)."""
    fold = load_splits().query("M1")
    return GaussianNB().fit(fold.model_inputs().reshape(len(fold), -1), fold.y)


@pytest.fixture
def serve(model):
    """A function that starts a scoring server answering with ``status`` and returns it; stopped after the test."""
    servers = []

    def start(status: int = 200) -> http.server.ThreadingHTTPServer:
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ModelHandler)
        httpd.model, httpd.status, httpd.authorizations = model, status, []
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(httpd)
        return httpd

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def free_port() -> int:
    """A port on 127.0.0.1 where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def secret_url(port: int) -> str:
    return f"http://auditor:{SECRET}@127.0.0.1:{port}/invocations"


def run_audit(store_dir: Path, url: str, capfd, caplog, *extra: str):
    """``ema audit --model-url URL`` through the CLI: (exit code, everything printed or logged)."""
    recipe = store_dir / "recipe.json"
    recipe.write_text(json.dumps(RECIPE))
    args = ["audit", "--model-url", url, "--recipe", str(recipe), "--query", "M1", "--no-progress", *extra]
    result = CliRunner().invoke(main, args)
    captured = capfd.readouterr()
    shown = "\n".join((result.output, result.stderr, captured.out, captured.err, caplog.text))
    return result, shown


def files_holding(folder: Path, needle: str) -> list[str]:
    """Every file under ``folder`` (the sqlite store, its journal, the artifacts) whose bytes contain ``needle``."""
    return sorted(
        str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()
    )


def test_a_successful_audit_records_the_url_without_its_password(store, tmp_path, serve, capfd, caplog):
    httpd = serve()
    result, shown = run_audit(tmp_path, secret_url(httpd.server_address[1]), capfd, caplog)
    assert result.exit_code == 0, shown
    assert SECRET not in shown
    assert files_holding(tmp_path, SECRET) == []
    runs = MlflowClient().search_runs([MlflowClient().get_experiment_by_name("ema").experiment_id])
    audit_run = next(run for run in runs if run.data.params.get("model_url"))
    assert audit_run.data.params["model_url"] == f"http://auditor:***@127.0.0.1:{httpd.server_address[1]}/invocations"
    assert "auditor:***@127.0.0.1" in audit_run.data.tags["mlflow.runName"]
    report = next(tmp_path.rglob("report.html")).read_text()
    command = report[report.index("ema audit") :].split("</code>")[0]
    assert "--model-url" in command and "auditor:***@127.0.0.1" in command  # the command that reproduces the audit
    # the real credentials still reach the server
    expected = "Basic " + base64.b64encode(f"auditor:{SECRET}".encode()).decode()
    assert httpd.authorizations and set(httpd.authorizations) == {expected}


@pytest.mark.parametrize("failure", ["nothing listens", "HTTP 500"])
def test_a_failing_audit_shows_and_records_no_password(store, tmp_path, serve, capfd, caplog, failure):
    port = free_port() if failure == "nothing listens" else serve(status=500).server_address[1]
    result, shown = run_audit(tmp_path, secret_url(port), capfd, caplog, "--timeout", "2")
    assert result.exit_code != 0
    assert "Error: " in shown and f"auditor:***@127.0.0.1:{port}" in shown, shown
    assert SECRET not in shown
    assert files_holding(tmp_path, SECRET) == []
    runs = MlflowClient().search_runs([MlflowClient().get_experiment_by_name("ema").experiment_id])
    assert [run.info.status for run in runs] == ["FAILED"]


def test_http_oracle_errors_name_the_server_without_its_password():
    oracle = HttpOracle(secret_url(free_port()), retries=0, timeout=2)
    with pytest.raises(Exception) as raised:
        oracle.predict(np.zeros((2, 28, 28), np.uint8))
    assert SECRET not in str(raised.value) and "auditor:***@127.0.0.1" in str(raised.value)
    assert SECRET not in oracle.url and SECRET not in oracle.source


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("http://user:secret@host:5000/invocations", "http://user:***@host:5000/invocations"),
        ("https://user:p@ss:w@host/x", "https://user:***@host/x"),
        ("http://tokenonly@host/x", "http://***@host/x"),
        ("http://host/x?api_key=secret&batch=2", "http://host/x?api_key=***&batch=2"),
        ("https://bucket.s3/x?X-Amz-Signature=secret#top", "https://bucket.s3/x?X-Amz-Signature=***#top"),
        ("http://host:5000/invocations", "http://host:5000/invocations"),
        ("models:/ema-target@target", "models:/ema-target@target"),
        (
            "scoring server http://u:secret@h/invocations failed; then http://v:secret@k/",
            "scoring server http://u:***@h/invocations failed; then http://v:***@k/",
        ),
    ],
)
def test_redact_url_hides_passwords_and_tokens_only(given, shown):
    from ema.validation import redact_url

    assert redact_url(given) == shown
