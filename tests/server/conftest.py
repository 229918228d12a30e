"""A team tracking server for the session: PostgreSQL cluster, ``mlflow server`` with served artifacts."""

from __future__ import annotations

import mlflow
import pytest

from tests.server.cluster import missing, postgres_cluster, team_server


@pytest.fixture(scope="session")
def server_url(tmp_path_factory) -> str:
    """The URL of an ``mlflow server`` on a throwaway PostgreSQL cluster, shared by the session's server tests."""
    reason = missing()
    if reason:
        pytest.skip(f"no team server: {reason}")
    with postgres_cluster() as cluster, team_server(cluster, "mlflow", tmp_path_factory.mktemp("server")) as url:
        yield url


@pytest.fixture
def on_server(server_url, tmp_path, monkeypatch) -> str:
    """Work from ``tmp_path`` against the team server (``MLFLOW_TRACKING_URI``); returns its URL."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server_url)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri(server_url)
    yield server_url
    while mlflow.active_run():
        mlflow.end_run()
    mlflow.set_tracking_uri(None)
