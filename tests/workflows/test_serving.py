"""Audits over HTTP against a real `mlflow models serve` process on 127.0.0.1."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import requests
from mlflow.tracking import MlflowClient

from ema.errors import EMAError
from ema.inputs import InputSpec
from ema.oracle import HttpOracle, PyfuncOracle
from ema.oracle.model_info import declared_input_spec
from ema.tracking import keys
from ema.workflows.audit import AuditConfig, audit
from tests.without_ema import environment_without_ema

SERVER_START_TIMEOUT = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(model_uri: str, port: int, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start `mlflow models serve` in its own process group (in ``env``, default ours) and wait for /ping."""
    env = dict(os.environ if env is None else env)
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    process = subprocess.Popen(
        [
            str(mlflow_cli),
            "models",
            "serve",
            "-m",
            model_uri,
            "-p",
            str(port),
            "--host",
            "127.0.0.1",
            "--env-manager",
            "local",
        ],
        env={**env, "PATH": f"{mlflow_cli.parent}{os.pathsep}{env['PATH']}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"mlflow models serve exited with {process.returncode}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/ping", timeout=1).ok:
                return process
        except requests.ConnectionError:
            time.sleep(0.5)
    stop(process)
    raise RuntimeError("mlflow models serve did not answer /ping in time")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def server(trained, tmp_path_factory):
    """The trained target served where `ema` cannot be imported: our models carry their own code."""
    _, outcome = trained
    port = free_port()
    process = serve(outcome.version.uri, port, environment_without_ema(tmp_path_factory.mktemp("site")))
    yield f"http://127.0.0.1:{port}/invocations", process
    stop(process)


def newest_failed_run_artifacts(before: set[str]) -> list[set[str]]:
    client = MlflowClient()
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], "attributes.status = 'FAILED'")
    return [{f.path for f in client.list_artifacts(r.info.run_id)} for r in runs if r.info.run_id not in before]


def failed_ids() -> set[str]:
    client = MlflowClient()
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], "attributes.status = 'FAILED'")
    return {r.info.run_id for r in runs}


@pytest.mark.parametrize("http_format", ["auto", "json", "parquet"])
def test_http_audit_equals_in_process(trained, server, http_format):
    _, outcome = trained
    url, _ = server
    config = AuditConfig(model_uri=outcome.version.uri, model_url=url, query="M6", http_format=http_format)
    over_http = audit(config, progress=False)
    in_process = audit(AuditConfig(model_uri=outcome.version.uri, query="M6"), progress=False)
    np.testing.assert_array_equal(over_http.primary.membership, in_process.primary.membership)
    assert over_http.primary.metrics == in_process.primary.metrics
    for name in in_process.primary.scores:
        np.testing.assert_array_equal(over_http.primary.scores[name], in_process.primary.scores[name])
    assert MlflowClient().get_run(over_http.run_id).data.params[keys.PARAM_MODEL_URL] == url


def test_shifted_http_audit_sends_the_nine_views_and_equals_in_process(trained, server):
    _, outcome = trained
    url, _ = server
    config = AuditConfig(model_uri=outcome.version.uri, query="M6", method="calibrated", augment="shifts")
    over_http = audit(replace(config, model_url=url), progress=False)
    in_process = audit(config, progress=False)
    assert over_http.primary.thresholds["n_views"] == 9
    assert over_http.primary.verdict == in_process.primary.verdict
    assert over_http.primary.metrics == pytest.approx(in_process.primary.metrics, rel=1e-6, nan_ok=True)
    assert "information_single_view" in over_http.primary.metrics


@pytest.mark.parametrize("request_format", ["json", "parquet"])
def test_the_server_returns_the_in_process_probabilities_for_either_request_format(trained, server, request_format):
    _, outcome = trained
    url, _ = server
    images = np.random.default_rng(0).integers(0, 256, (300, 28, 28), dtype=np.uint8)
    spec = declared_input_spec(outcome.version.uri)
    over_http = HttpOracle(url, batch_size=128, request_format=request_format, input_spec=spec).predict_proba(images)
    # the same batches in-process: a CPU's matrix kernels may sum in another order for another batch size
    in_process = PyfuncOracle(outcome.version.uri, batch_size=128).predict_proba(images)
    np.testing.assert_array_equal(over_http, in_process)


def test_the_readmes_command_for_the_workbenchs_own_served_target_audits_it(trained, server, tmp_path):
    """README's served-model example (`--input-shape 784`) was the only one: for our target it gets HTTP 400, and
    with a shape but no `--input-dtype uint8` the pixels arrive as floats in [0, 1] and a training fold looks unused."""
    from click.testing import CliRunner

    from ema_cli.cli import main

    _, outcome = trained
    url, _ = server
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (command,) = [line for line in readme.splitlines() if line.startswith("ema audit --model-url") and "28,28" in line]
    recipe = tmp_path / "recipe.json"
    recipe.write_text(
        MlflowClient().get_model_version(outcome.version.name, outcome.version.version).tags["ema.recipe"]
    )
    args = command.replace("http://127.0.0.1:5001/invocations", url).replace("recipe.json", str(recipe)).split()[1:]
    result = CliRunner().invoke(main, [*args, "--no-progress", "--no-figures"])
    assert result.exit_code == 0, result.output
    assert "-> memorized" in result.output  # M1 is one of the target's training folds


def test_http_schema_error_shows_server_message(server):
    url, _ = server
    oracle = HttpOracle(url, input_spec=InputSpec((-1, 784)))
    with pytest.raises(EMAError, match=r"HTTP 400.*(shape|schema|Shape)"):
        oracle.predict(np.zeros((3, 1, 28, 28), np.float32))


class FailingHandler(http.server.BaseHTTPRequestHandler):
    calls = 0

    def do_POST(self):
        type(self).calls += 1
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(500)
        self.end_headers()
        self.wfile.write(b"internal error")

    def log_message(self, *args):
        pass


def test_http_500_is_retried_then_fails_run_without_artifacts(trained):
    _, outcome = trained
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FailingHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/invocations"
    before = failed_ids()
    try:
        oracle = HttpOracle(url, retries=2, backoff=0.01)
        with pytest.raises(EMAError, match=r"failed after 3 attempts; last: HTTP 500"):
            audit(AuditConfig(model_uri=outcome.version.uri, model_url=url, query="M1"), oracle=oracle, progress=False)
    finally:
        httpd.shutdown()
    assert FailingHandler.calls == 3
    assert newest_failed_run_artifacts(before) == [set()]


def test_http_unreachable_server_fails_run(trained):
    _, outcome = trained
    before = failed_ids()
    url = f"http://127.0.0.1:{free_port()}/invocations"
    with pytest.raises(EMAError, match="ConnectionError"):
        audit(
            AuditConfig(model_uri=outcome.version.uri, model_url=url, query="M1"),
            oracle=HttpOracle(url, retries=1, backoff=0.01),
            progress=False,
        )
    assert newest_failed_run_artifacts(before) == [set()]


class StopsServerAfterFirstBatch(HttpOracle):
    """Stops the real server once the first batch has been answered: the second batch finds it gone."""

    def __init__(self, url, process, **options):
        super().__init__(url, **options)
        self.process = process

    def _predict_batch(self, inputs):
        outputs = super()._predict_batch(inputs)
        stop(self.process)
        return outputs


def test_http_server_stopped_mid_audit_fails_run(trained):
    _, outcome = trained
    port = free_port()
    process = serve(outcome.version.uri, port)
    url = f"http://127.0.0.1:{port}/invocations"
    before = failed_ids()
    oracle = StopsServerAfterFirstBatch(
        url, process, batch_size=500, retries=1, backoff=0.01, input_spec=InputSpec((-1, 28, 28), "uint8")
    )
    try:
        with pytest.raises(EMAError, match="failed after 2 attempts"):
            audit(AuditConfig(model_uri=outcome.version.uri, model_url=url, query="M6"), oracle=oracle, progress=False)
    finally:
        stop(process)
    assert newest_failed_run_artifacts(before) == [set()]


FRAME_MODEL_CODE = '''
import mlflow.pyfunc
import pandas as pd
from mlflow.models import set_model


class FrameModel(mlflow.pyfunc.PythonModel):
    """Our registered target, answering with a pandas DataFrame of probabilities (one column per class)."""

    def load_context(self, context):
        self.inner = mlflow.pyfunc.load_model(context.model_config["inner"])

    def predict(self, context, model_input, params=None):
        return pd.DataFrame(self.inner.predict(model_input))


set_model(FrameModel())
'''


def test_http_audit_of_a_served_model_that_returns_a_dataframe(trained, tmp_path):
    import mlflow

    _, outcome = trained
    code = tmp_path / "frame_model.py"
    code.write_text(FRAME_MODEL_CODE)
    example = np.zeros((2, 28, 28), np.uint8)  # our models take raw images
    inner = mlflow.pyfunc.load_model(outcome.version.uri)
    with mlflow.start_run(run_name="log frame model"):
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=str(code),
            model_config={"inner": outcome.version.uri},
            signature=mlflow.models.infer_signature(example, inner.predict(example)),
            input_example=example,
            pip_requirements=["pandas"],
        )
    port = free_port()
    process = serve(info.model_uri, port)
    try:
        url = f"http://127.0.0.1:{port}/invocations"
        over_http = audit(AuditConfig(model_uri=outcome.version.uri, model_url=url, query="M6"), progress=False)
    finally:
        stop(process)
    in_process = audit(AuditConfig(model_uri=outcome.version.uri, query="M6"), progress=False)
    np.testing.assert_array_equal(over_http.primary.membership, in_process.primary.membership)
    assert over_http.primary.metrics == in_process.primary.metrics
