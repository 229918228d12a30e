"""A throwaway team tracking server: a PostgreSQL cluster and an ``mlflow server`` on it, for tests and benchmarks.

The cluster is created with ``initdb`` and run with ``pg_ctl`` in a temporary folder, as an
unprivileged user (PostgreSQL refuses to run as root: under root the folder is handed to
``nobody`` and the commands run through ``runuser``). It listens on a free port of 127.0.0.1
only, its unix socket in the same folder, with ``trust`` authentication: nothing outside this
machine can reach it, and it is deleted afterwards. The server stores runs and the registry in
a database of that cluster and serves artifacts from a folder (``--artifacts-destination``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks._serve import answers, free_port, stop

#: Where Debian's ``postgresql`` package puts the server's binaries (not on PATH).
DEBIAN_BINARIES = "/usr/lib/postgresql/*/bin"
#: The unprivileged user the cluster runs as when this process is root.
CLUSTER_USER = "nobody"
#: Seconds to wait for the tracking server's ``/health``.
START_TIMEOUT = 120.0


def postgres_bin() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl`` (Debian's newest, else PATH); None when PostgreSQL is absent."""
    for folder in sorted(glob.glob(DEBIAN_BINARIES), key=lambda p: int(Path(p).parent.name), reverse=True):
        if (Path(folder) / "initdb").exists():
            return Path(folder)
    found = shutil.which("initdb")
    return Path(found).resolve().parent if found else None


def missing() -> str | None:
    """Why a team server cannot be started here (PostgreSQL or psycopg2 absent), or None."""
    if postgres_bin() is None:
        return "PostgreSQL's initdb and pg_ctl are not installed (Debian: apt-get install -y postgresql)"
    try:
        import psycopg2  # noqa: F401 - only its presence is checked
    except ImportError:
        return "psycopg2 is not installed (pip install -e '.[server]')"
    return None


@dataclass(frozen=True)
class Cluster:
    """A running PostgreSQL cluster on 127.0.0.1."""

    port: int
    folder: Path

    def database_uri(self, database: str) -> str:
        """The SQLAlchemy URI MLflow takes for ``database`` of this cluster."""
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, database: str) -> str:
        """Create an empty database; returns its URI."""
        import psycopg2

        connection = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        try:
            connection.autocommit = True  # CREATE DATABASE cannot run inside a transaction
            with connection.cursor() as cursor:
                cursor.execute(f'CREATE DATABASE "{database}"')
        finally:
            connection.close()
        return self.database_uri(database)


def _as_cluster_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", CLUSTER_USER, "--", *command] if os.geteuid() == 0 else command


def _run(command: list[str], cwd: Path) -> None:
    result = subprocess.run(_as_cluster_user(command), capture_output=True, text=True, timeout=120, cwd=cwd)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}): {result.stderr or result.stdout}")


@contextlib.contextmanager
def postgres_cluster() -> Iterator[Cluster]:
    """A fresh cluster in a temporary folder, stopped and deleted on exit."""
    binaries = postgres_bin()
    if binaries is None:
        raise RuntimeError(missing())
    folder = Path(tempfile.mkdtemp(prefix="ema-postgres-"))
    if os.geteuid() == 0:
        shutil.chown(folder, user=CLUSTER_USER)
    data, port = folder / "data", free_port()
    try:
        initdb = [str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]
        _run([*initdb, "-E", "UTF8", "--locale=C", "--no-sync"], folder)
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        pg_ctl = [str(binaries / "pg_ctl"), "-D", str(data), "-w"]
        _run([*pg_ctl, "-l", str(folder / "postgres.log"), "-o", options, "start"], folder)
        try:
            yield Cluster(port, folder)
        finally:
            _run([*pg_ctl, "-m", "fast", "stop"], folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def tracking_server(backend_uri: str, artifacts: Path, *, workers: int = 2) -> Iterator[str]:
    """``mlflow server`` on ``backend_uri`` serving artifacts from ``artifacts``, on a free port; yields its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = artifacts.with_name(artifacts.name + "-server.log")
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri]
    command += ["--artifacts-destination", str(artifacts), "--host", "127.0.0.1", "--port", str(port)]
    command += ["--workers", str(workers)]
    environment = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with open(log, "w") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=environment, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not answers(f"{url}/health"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start on {url}:\n{log.read_text()[-3000:]}")
            time.sleep(0.25)
        yield url
    finally:
        stop(process)


@contextlib.contextmanager
def team_server(cluster: Cluster, database: str, folder: Path, *, workers: int = 2) -> Iterator[str]:
    """A tracking server on a new, empty database of ``cluster``, artifacts under ``folder``; yields its URL."""
    artifacts = folder / f"{database}-artifacts"
    artifacts.mkdir(parents=True)
    with tracking_server(cluster.create_database(database), artifacts, workers=workers) as url:
        yield url
