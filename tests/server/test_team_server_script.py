"""``scripts/team-server``: the commands docs/SCALE.md gives, run as written there (folder and ports aside)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from benchmarks._serve import free_port
from tests.server.cluster import missing, postgres_bin

ROOT = Path(__file__).resolve().parents[2]
#: The folder and port the documented commands use; the test swaps in a temporary folder and free ports.
DOC_FOLDER, DOC_PORT = "/srv/ema-team", "5000"


#: The backups' folder the documented ``backup`` line uses.
DOC_BACKUPS = "/srv/ema-backups"


def documented_commands(section: str = "Set it up") -> list[str]:
    """The ``scripts/team-server`` lines of a section of docs/SCALE.md, in order."""
    text = (ROOT / "docs" / "SCALE.md").read_text()
    body = text.split(f"### {section}", 1)[1].split("\n### ", 1)[0]
    return [line.split("#", 1)[0].strip() for line in body.splitlines() if line.startswith("scripts/team-server")]


def script(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["scripts/team-server", *args], cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )


@pytest.mark.skipif(missing() is not None, reason=f"no team server: {missing()}")
def test_stop_kills_a_server_that_outlives_sigterm_before_saying_stopped(tmp_path):
    """`stop` waited 10 s, then removed mlflow.pid and said "stopped" with the server still alive."""
    (tmp_path / "postgres").mkdir()  # a folder whose cluster is not running
    stubborn = subprocess.Popen(["bash", "-c", "trap '' TERM; while :; do sleep 0.1; done"], start_new_session=True)
    try:
        (tmp_path / "mlflow.pid").write_text(f"{stubborn.pid}\n")
        stopped = script("stop", str(tmp_path), TEAM_SERVER_STOP_WAIT="1")
        assert stopped.returncode == 0, stopped.stderr
        assert "still running 1 s after SIGTERM; sending SIGKILL" in stopped.stderr
        assert stopped.stdout == f"team server in {tmp_path} stopped\n"
        assert stubborn.poll() == -signal.SIGKILL  # dead before "stopped" was said, not after
        assert not (tmp_path / "mlflow.pid").exists()
    finally:
        stubborn.kill()
        stubborn.wait()


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

    backup_line = documented_commands("Backups")
    assert [c.split()[1] for c in backup_line] == ["backup"], backup_line
    backups = outer / "backups"
    backup = backup_line[0].replace(DOC_FOLDER, str(folder)).replace(DOC_BACKUPS, str(backups))

    started = run(swapped[0])
    try:
        assert started.returncode == 0, started.stderr
        url = re.search(r"http://127\.0\.0\.1:\d+", started.stdout).group(0)
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        mlflow.set_tracking_uri(url)
        mlflow.set_experiment("team-server-check")  # an experiment of this server, not one cached from another test
        with mlflow.start_run() as run_:
            mlflow.log_metric("rho_ema", 0.5)
            mlflow.log_text("kept", "note.txt")
        assert MlflowClient().get_run(run_.info.run_id).data.metrics == {"rho_ema": 0.5}
        assert "mlflow server: running" in run(swapped[1]).stdout

        # the server's processes fit the cluster's connections (docs/SCALE.md, "Connection pool size")
        leader = (folder / "mlflow.pid").read_text().strip()
        assert "--workers\x002\x00" in Path(f"/proc/{leader}/cmdline").read_text()
        assert psql(folder, "SHOW max_connections") == str((2 + 3) * 2 * (5 + 10) + 20)

        # the documented backup: the database (its runs table in the dump) and the served artifacts
        backed_up = run(backup)
        assert backed_up.returncode == 0, backed_up.stderr
        (taken,) = backups.iterdir()
        assert sorted(p.name for p in taken.iterdir()) == ["artifacts", "mlflow.dump"]
        listing = subprocess.run(["pg_restore", "--list", str(taken / "mlflow.dump")], capture_output=True, text=True)
        assert "TABLE DATA public runs " in listing.stdout, listing.stderr
        assert [p.name for p in (taken / "artifacts").rglob("note.txt")] == ["note.txt"]

        # start on a running folder starts nothing; with the mlflow server dead, it starts that alone
        again = run(swapped[0])
        assert again.returncode == 0 and "already running on " + url in again.stdout, again.stderr
        os.killpg(int(leader), signal.SIGKILL)  # this test's own server
        for _ in range(100):
            if "mlflow server: stopped" in run(swapped[1]).stdout:
                break
            time.sleep(0.1)
        restarted = run(swapped[0])
        assert restarted.returncode == 0, restarted.stderr
        assert "starting the mlflow server only" in restarted.stdout and url in restarted.stdout
        assert MlflowClient().get_run(run_.info.run_id).data.metrics == {"rho_ema": 0.5}
    finally:
        mlflow.set_tracking_uri(None)
        stopped = run(swapped[2])
    assert stopped.returncode == 0, stopped.stderr
    assert run(swapped[1]).stdout.splitlines() == ["postgres: stopped", "mlflow server: stopped"]
    shutil.rmtree(outer)


def psql(folder: Path, query: str) -> str:
    """``query``'s answer from the cluster of a team-server folder, as the role the script's server uses."""
    port = (folder / "db.port").read_text().strip()
    command = [str(postgres_bin() / "psql"), "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-tAc", query, "mlflow"]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
