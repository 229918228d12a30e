"""An audit stopped part way: by its --timeout while it scores, by a failure before its verdict is written, by
SIGTERM. Each leaves a FAILED run that states no verdict, and nothing RUNNING."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time

import mlflow
import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from scipy.special import softmax

from ema.errors import TimeLimitExceeded
from ema.inputs import InputSpec
from ema.limits import command_limits
from ema.oracle import HttpOracle
from ema.tracking import keys
from ema.workflows import audit as audit_workflow
from ema.workflows.audit import AuditConfig, audit
from tests.command_clock import command_clock
from tests.workflows.conftest import ROOT

TARGET = "models:/ema-target@target"


def newest_run():
    """The run started last in the audits' experiment."""
    experiment = mlflow.get_experiment_by_name(keys.DEFAULT_EXPERIMENT)
    return MlflowClient().search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"])[0]


def test_the_timeout_stops_in_process_scoring(trained):
    """The deadline was checked only in training, HTTP and cache waits: a cached audit ran past --timeout and
    exited 0. Scoring checks it before each batch."""
    audit(AuditConfig(model_uri=TARGET, query="M6"), progress=False)  # the calibration cached: only scoring is left
    with command_limits(timeout=0.01, started=time.monotonic() - 1.0):
        with pytest.raises(TimeLimitExceeded, match="in step \"score model 'models:/ema-target/"):
            audit(AuditConfig(model_uri=TARGET, query="M6"), progress=False)
    run = newest_run()
    assert run.info.status == "FAILED" and keys.TAG_VERDICT not in run.data.tags


class SecondPerRequest(http.server.BaseHTTPRequestHandler):
    """A scoring server stand-in: probabilities of 10 classes from each image's pixels, each request taking a second
    of the command's clock (``server.clock``); ``server.calls`` counts the requests."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):
        inputs = np.asarray(json.loads(self.rfile.read(int(self.headers["Content-Length"])))["inputs"], np.float64)
        self.server.calls += 1
        self.server.clock.advance(1.0)
        proba = softmax(np.sin(inputs.reshape(len(inputs), -1).sum(axis=1, keepdims=True) + np.arange(10)), axis=1)
        body = json.dumps({"predictions": proba.tolist()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_the_timeout_stops_concurrent_http_scoring(trained, monkeypatch):
    """--http-concurrency 3 never checked the deadline: an audit over HTTP ran past --timeout by as many batches as
    the query had. The query's 20 batches take a second each of a 5 s --timeout: the audit stops scoring with the
    command's error, its run FAILED with no verdict and no artifacts, and most batches never sent."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SecondPerRequest)
    httpd.calls, httpd.clock = 0, command_clock(monkeypatch)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/invocations"
    oracle = HttpOracle(url, batch_size=100, concurrency=3, input_spec=InputSpec((-1, 28, 28), "uint8"))
    config = AuditConfig(model_uri=TARGET, model_url=url, query="M6", http_concurrency=3)
    try:
        with command_limits(timeout=5.0, started=0.0):
            with pytest.raises(TimeLimitExceeded, match=f"in step 'score scoring server {url}'"):
                audit(config, oracle=oracle, progress=False)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert 5 <= httpd.calls < 2000 // 100, httpd.calls
    run = newest_run()
    assert run.info.status == "FAILED" and keys.TAG_VERDICT not in run.data.tags
    assert not MlflowClient().list_artifacts(run.info.run_id)


def test_an_audit_that_fails_writing_its_artifacts_states_no_verdict(trained, monkeypatch):
    """The verdict is written last: a run stopped before (here a full disk at the artifacts) is FAILED with no
    verdict tag or code, where it used to keep the verdict of an audit whose report was never written."""

    def disk_full(files):
        raise OSError("No space left on device")

    monkeypatch.setattr(audit_workflow, "log_artifacts_atomically", disk_full)
    with pytest.raises(OSError, match="No space left"):
        audit(AuditConfig(model_uri=TARGET, query="M1"), progress=False)
    run = newest_run()
    assert run.info.status == "FAILED"
    assert keys.TAG_VERDICT not in run.data.tags and keys.METRIC_VERDICT_CODE not in run.data.metrics


def test_sigterm_ends_the_commands_run_failed_not_running(trained, tmp_path):
    """`kill` (a scheduler's stop) killed the process with its run left RUNNING for good; the ema program now
    unwinds, exiting 143 (128 + SIGTERM), and the run ends FAILED, with nothing registered."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    command = [sys.executable, "-c", "from ema_cli.cli import run; run()", "train", "--epochs", "500"]
    command += ["--model-name", "stopped-target", "--no-progress"]
    process = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    experiment = mlflow.get_experiment_by_name(keys.DEFAULT_EXPERIMENT).experiment_id
    deadline = time.monotonic() + 120
    while not (running := MlflowClient().search_runs([experiment], "attributes.status = 'RUNNING'")):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[0]
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=60)[0].decode()
    assert process.returncode == 128 + signal.SIGTERM, output
    assert MlflowClient().get_run(running[0].info.run_id).info.status == "FAILED"
    assert not MlflowClient().search_registered_models("name = 'stopped-target'")
