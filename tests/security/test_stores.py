"""Stores that misbehave (issue 11, group 8): a cached calibration whose artifact is gone, a corrupt
database, an unsupported tracking URI. Errors are one line from the real CLI, with no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import mlflow
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.tracking import keys
from ema.tracking.runs import configure
from ema.training.spec import TrainSpec
from ema.workflows.calibrate import calibrate
from ema.workflows.train import train_target
from ema_cli.cli import main
from tests.conftest import open_store

ROOT = Path(__file__).resolve().parents[2]


def run_ema(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """The real CLI in a process of its own, bounded in time."""
    environment = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID")}
    environment.update(PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **env)
    return subprocess.run(
        [sys.executable, "-c", "from ema_cli.cli import run; run()", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def test_corrupt_database_is_one_line_naming_the_file(tmp_path):
    (tmp_path / "mlflow.db").write_bytes(os.urandom(8192))
    result = run_ema(["history", "--model", "none"], tmp_path)
    assert_one_line_error(result, str(tmp_path / "mlflow.db"), "not a usable sqlite database", "move it aside")
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("uri", "fragments"),
    [
        ("foo://x", ("unsupported tracking URI 'foo://x'", "expected sqlite:///PATH")),
        ("file:./mlruns", ("the file store 'file:./mlruns' is not supported",)),
    ],
)
def test_unsupported_tracking_uri_is_one_line(tmp_path, uri, fragments):
    assert_one_line_error(run_ema(["history", "--model", "none"], tmp_path, MLFLOW_TRACKING_URI=uri), *fragments)
    assert not (tmp_path / "mlflow.db").exists()


@pytest.fixture
def tiny_target(tmp_path, template_db):
    """(store URI, target version URI) of a one-epoch target in a fresh store."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", "")
        patch.chdir(os.getcwd())
        uri = open_store(tmp_path, template_db)
        configure()
        outcome = train_target(TrainSpec(hidden=(16,), epochs=1), progress=False)
        yield uri, outcome.version.uri
        while mlflow.active_run():
            mlflow.end_run()


def delete_calibration_json(run_id: str) -> None:
    """Remove the thresholds from the artifact store, as an operator cleaning up storage might."""
    folder = Path(urlparse(MlflowClient().get_run(run_id).info.artifact_uri).path)
    (folder / keys.ARTIFACT_CALIBRATION).unlink()


def runs_with_cache(prefix: str) -> list:
    client = MlflowClient()
    experiments = [e.experiment_id for e in client.search_experiments()]
    return [r for r in client.search_runs(experiments) if r.data.tags.get(keys.TAG_CACHE, "").startswith(prefix)]


def test_a_cached_calibration_whose_thresholds_are_gone_is_trained_again_and_says_why(tiny_target):
    _, target = tiny_target
    first = calibrate(target, k=50, progress=False)
    delete_calibration_json(first.version.run_id)

    audited = CliRunner().invoke(main, ["audit", "--model", target, "--query", "M6", "--k", "50", "--no-progress"])
    assert audited.exit_code == 0, audited.output
    stale_runs = runs_with_cache("stale: ")  # the calibration run nested in the audit, and the audit run
    assert sorted(r.data.tags.get(keys.TAG_RUN_KIND, "") for r in stale_runs) == ["", keys.RUN_KIND_AUDIT]
    for stale in stale_runs:
        reason = stale.data.tags[keys.TAG_CACHE]
        assert f"version {first.version.version} of {keys.CALIBRATION_MODEL_NAME}" in reason
        assert keys.ARTIFACT_CALIBRATION in reason
        assert stale.data.tags[keys.TAG_CALIBRATION_VERSION] != first.version.uri

    again = CliRunner().invoke(main, ["audit", "--model", target, "--query", "M6", "--k", "50", "--no-progress"])
    assert again.exit_code == 0, again.output
    assert len(runs_with_cache("stale: ")) == 2  # the retrained version is reused
    alias = MlflowClient().get_model_version_by_alias(keys.CALIBRATION_MODEL_NAME, keys.CALIBRATION_ALIAS)
    assert str(alias.version) == first.version.version  # audits move no alias


def test_ema_calibrate_retrains_a_stale_calibration_and_moves_the_alias_to_it(tiny_target):
    _, target = tiny_target
    first = calibrate(target, k=50, progress=False)
    delete_calibration_json(first.version.run_id)
    again = calibrate(target, k=50, progress=False)
    assert not again.cached and again.cache.startswith("stale: ")
    assert again.version.version != first.version.version
    alias = MlflowClient().get_model_version_by_alias(keys.CALIBRATION_MODEL_NAME, keys.CALIBRATION_ALIAS)
    assert str(alias.version) == again.version.version
