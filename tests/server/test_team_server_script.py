"""``scripts/team-server``: the commands docs/SCALE.md gives, run as written there (folder and ports aside)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from benchmarks._serve import free_port
from tests.server.cluster import missing

ROOT = Path(__file__).resolve().parents[2]
#: The folder and port the documented commands use; the test swaps in a temporary folder and free ports.
DOC_FOLDER, DOC_PORT = "/srv/ema-team", "5000"


def documented_commands() -> list[str]:
    """The ``scripts/team-server`` lines of docs/SCALE.md's "Set it up" section, in order."""
    text = (ROOT / "docs" / "SCALE.md").read_text()
    section = text.split("### Set it up", 1)[1].split("\n### ", 1)[0]
    return [line.split("#", 1)[0].strip() for line in section.splitlines() if line.startswith("scripts/team-server")]


@pytest.mark.slow
@pytest.mark.skipif(missing() is not None, reason=f"no team server: {missing()}")
def test_the_documented_team_server_commands_start_serve_a_client_and_stop(monkeypatch):
    commands = documented_commands()
    assert [c.split()[1] for c in commands] == ["start", "status", "stop"], commands
    # not under pytest's tmp_path: its parents are closed to the cluster's user (nobody) under root
    outer = Path(tempfile.mkdtemp(prefix="ema-team-server-"))
    outer.chmod(0o755)
    folder, port = outer / "team", str(free_port())
    swapped = [c.replace(DOC_FOLDER, str(folder)).replace(f"--port {DOC_PORT}", f"--port {port}") for c in commands]
    swapped[0] += f" --db-port {free_port()}"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}

    def run(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(command, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)

    started = run(swapped[0])
    try:
        assert started.returncode == 0, started.stderr
        url = re.search(r"http://127\.0\.0\.1:\d+", started.stdout).group(0)
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        mlflow.set_tracking_uri(url)
        mlflow.set_experiment("team-server-check")  # an experiment of this server, not one cached from another test
        with mlflow.start_run() as run_:
            mlflow.log_metric("rho_ema", 0.5)
        assert MlflowClient().get_run(run_.info.run_id).data.metrics == {"rho_ema": 0.5}
        assert "mlflow server: running" in run(swapped[1]).stdout
    finally:
        mlflow.set_tracking_uri(None)
        stopped = run(swapped[2])
    assert stopped.returncode == 0, stopped.stderr
    assert run(swapped[1]).stdout.splitlines() == ["postgres: stopped", "mlflow server: stopped"]
    shutil.rmtree(outer)
