"""The workbench against a team tracking server: ``mlflow server`` on PostgreSQL with served artifacts (issue 15)."""

from __future__ import annotations

import json
import threading
from functools import partial

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.tracking import keys
from ema.tracking.registry import RegisteredVersion, set_alias, set_version_tags
from ema_cli.cli import main
from tests.experiments.test_grid_cli import audit_children, grid_parents
from tests.experiments.test_grid_workers import TRAINED, grid_cells, versions_by_cache_key
from tests.workflows.test_concurrency import assert_all_succeeded, ema_processes

TARGET = "models:/ema-team-target@target"


def invoke(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "View run" not in result.output  # MLflow's run links stay out of our tables
    return result.output


def calibration_versions(client: MlflowClient, k: int) -> list[str]:
    """The calibration versions registered for quality ``k``."""
    found = client.search_model_versions(f"name = '{keys.CALIBRATION_MODEL_NAME}'")
    runs = {v.version: client.get_run(v.run_id).data.params for v in found}
    return sorted(str(v) for v, params in runs.items() if params.get(keys.PARAM_K) == str(k))


def test_train_calibrate_audit_and_history_through_the_server(on_server, tmp_path):
    trained = invoke("train", "--hidden", "16", "--epochs", "1", "--model-name", "ema-team-target", "--no-progress")
    assert "registered models:/ema-team-target/1 (alias target)" in trained
    assert "trained and registered" in invoke("calibrate", "--model", TARGET, "--k", "90", "--no-progress")
    audit = ("audit", "--model", TARGET, "--query", "M6", "--k", "90", "--method", "both", "--no-progress")
    first = invoke(*audit)
    invoke(*audit)  # every model cached: the second audit trains nothing
    history = invoke("history", "--model", "ema-team-target")
    assert history.count(" M6 ") == 2 and "FINISHED" in history

    client = MlflowClient()
    version = client.get_model_version_by_alias("ema-team-target", keys.TARGET_ALIAS)
    last = json.loads(version.tags[keys.TAG_LAST_AUDIT])
    assert last["query"] == "M6" and last["run_id"] in history
    assert last["run_id"] != first.split("run ")[-1].split(")")[0]  # the newest audit is the last
    (calibration,) = calibration_versions(client, 90)
    assert client.get_model_version_by_alias(keys.CALIBRATION_MODEL_NAME, keys.CALIBRATION_ALIAS).version == calibration
    for name in ("ema-query-model", "ema-calset-model"):
        assert len(client.search_model_versions(f"name = '{name}'")) == 1
    run = client.get_run(last["run_id"])
    assert run.info.artifact_uri.startswith("mlflow-artifacts:")  # served by the server, not a local folder
    assert keys.ARTIFACT_REPORT in {a.path for a in client.list_artifacts(run.info.run_id)}
    with open(client.download_artifacts(run.info.run_id, keys.ARTIFACT_REPORT)) as handle:
        assert "p-value" in handle.read()
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "mlflow.db").exists()


def at_once(calls: list) -> list[Exception]:
    """Run the calls in threads released together; the exceptions they raised."""
    barrier, errors = threading.Barrier(len(calls)), []

    def run(call) -> None:
        barrier.wait()
        try:
            call()
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return errors


def test_processes_setting_the_same_new_tag_or_alias_at_once_all_succeed(on_server):
    """PostgreSQL refuses the second of two inserts of one new key (CI's stop 20 died of it): each set is kept.

    Without the second try, 18 of 120 writes of a new registered-model tag (30 rounds of four) failed so.
    """
    client = MlflowClient()
    client.create_registered_model("ema-race")
    run = client.create_run(client.get_experiment_by_name("Default").experiment_id)
    source = f"{run.info.artifact_uri}/model"
    version = RegisteredVersion.from_entity(client.create_model_version("ema-race", source, run.info.run_id))
    for round_ in range(10):
        tag, alias = f"ema.race.{round_}", f"race{round_}"
        assert at_once([partial(set_version_tags, version, {tag: f"writer {i}"}) for i in range(4)]) == []
        assert at_once([partial(set_alias, version, alias)] * 4) == []
        assert client.get_model_version("ema-race", "1").tags[tag].startswith("writer ")
        assert str(client.get_model_version_by_alias("ema-race", alias).version) == "1"


@pytest.mark.slow
def test_demo_through_the_server(on_server):
    output = invoke("demo", "--hidden", "16", "--epochs", "1", "--no-progress")
    assert all(f"\n{query:>5} " in output for query in ("M1", "M6", "S"))
    client = MlflowClient()
    target = client.get_model_version_by_alias(keys.TARGET_MODEL_NAME, keys.TARGET_ALIAS)
    assert json.loads(target.tags[keys.TAG_LAST_AUDIT])["query"] == "S"  # the demo audits S last


@pytest.mark.slow
def test_two_calibrations_at_once_through_the_server_register_one(on_server, tmp_path):
    """Without a sqlite file to lock, the processes take the registry lease (``ema.claim.<key>``)."""
    invoke("train", "--hidden", "16", "--epochs", "1", "--model-name", "ema-team-lease", "--no-progress")
    command = ["calibrate", "--model", "models:/ema-team-lease@target", "--k", "70", "--no-progress"]
    results = ema_processes([command] * 2, tmp_path, MLFLOW_TRACKING_URI=on_server)
    assert_all_succeeded(results)
    assert sorted(out.split(" calibration model")[0] for _, out, _ in results) == [
        "reused cached",
        "trained and registered",
    ]
    client = MlflowClient()
    assert len(calibration_versions(client, 70)) == 1
    tags = client.get_registered_model(keys.CALIBRATION_MODEL_NAME).tags
    assert not [tag for tag in tags if tag.startswith(keys.TAG_CLAIM_PREFIX)]  # released


@pytest.mark.slow
def test_grid_with_two_workers_through_the_server_trains_each_model_once(on_server, one_thread):
    """The workers are separate processes on one server: the registry lease keeps each model to one training."""
    client = MlflowClient()
    before = versions_by_cache_key(client)  # the session's other tests registered calibrations too
    cells, parent = grid_cells("--workers", "2")
    after = versions_by_cache_key(client)
    assert {name: len(after[name]) - len(before[name]) for name in TRAINED} == TRAINED
    assert all(len(set(found)) == len(found) for found in after.values())
    experiment, _ = grid_parents(client, "benchmark")
    children = audit_children(client, experiment.experiment_id, parent)
    assert sorted(c.info.run_id for c in children) == sorted(cells["run_id"])
    claims = [
        tag
        for name in TRAINED
        for tag in client.get_registered_model(name).tags
        if tag.startswith(keys.TAG_CLAIM_PREFIX)
    ]
    assert not claims
