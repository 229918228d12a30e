"""Concurrent users: real `ema` processes started at once on one store (issue 11, groups 2 and 3).

Each process is bounded in time; a test that waits longer than that fails rather than hangs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from ema.tracking import keys
from ema.tracking.runs import configure
from ema.training.spec import TrainSpec
from ema.workflows.train import train_target
from tests.conftest import open_store

ROOT = Path(__file__).resolve().parents[2]
#: Seconds any one batch of concurrent processes may take (they take 10-40 s on two busy cores).
DEADLINE = 240
#: The smallest target worth auditing: one epoch of a 16-unit MLP (~1 s), so each process's training is short.
TINY_SPEC = TrainSpec(hidden=(16,), epochs=1)


def ema_processes(argv_list: list[list[str]], cwd: Path, **env: str) -> list[tuple[int, str, str]]:
    """Start one `ema` process per argv at once in ``cwd``; (exit code, stdout, stderr) of each, within DEADLINE."""
    environment = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID")}
    environment.update(PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **env)
    command = [sys.executable, "-c", "from ema_cli.cli import run; run()"]
    processes = [
        subprocess.Popen(
            [*command, *argv],
            cwd=cwd,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in argv_list
    ]
    deadline, results = time.monotonic() + DEADLINE, []
    try:
        for process in processes:
            out, err = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append((process.returncode, out, err))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return results


def assert_all_succeeded(results: list[tuple[int, str, str]]) -> None:
    for code, out, err in results:
        assert code == 0, f"exit {code}\nstdout: {out}\nstderr: {err}"
        assert "Traceback" not in err, err


def assert_all_found_no_such_model(results: list[tuple[int, str, str]]) -> None:
    """Every command opened the store and said it holds no model ``none`` (exit 3); none failed on the store."""
    for code, out, err in results:
        assert code == 3 and "registered model 'none' does not exist" in err, (
            f"exit {code}\nstdout: {out}\nstderr: {err}"
        )
        assert "Traceback" not in err, err


def test_four_commands_at_once_on_a_fresh_folder_all_answer_and_a_fifth_after(tmp_path):
    """Three commands at once used to leave a half-migrated store (`table _alembic_tmp_tags already exists`); each
    `calibrate` creates the experiment if it is missing, and it is created once."""
    calibrate = ["calibrate", "--model", "models:/none/1", "--no-progress"]
    assert_all_found_no_such_model(ema_processes([calibrate] * 4, tmp_path))
    assert_all_found_no_such_model(ema_processes([["history", "--model", "none"]], tmp_path))
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [e.name for e in client.search_experiments()].count(keys.DEFAULT_EXPERIMENT) == 1


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, template_db):
    """(folder, store URI, target version URI): a tiny target registered in a store of its own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", "")
        patch.chdir(os.getcwd())
        folder = tmp_path_factory.mktemp("concurrent")
        uri = open_store(folder, template_db)
        configure()
        outcome = train_target(TINY_SPEC, progress=False)
        yield folder, uri, outcome.version.uri
        while mlflow.active_run():
            mlflow.end_run()


def calibration_keys() -> dict[str, list[str]]:
    """Cache key -> the calibration versions registered under it."""
    found: dict[str, list[str]] = {}
    for version in MlflowClient().search_model_versions(f"name = '{keys.CALIBRATION_MODEL_NAME}'"):
        found.setdefault(version.tags[keys.TAG_CACHE_KEY], []).append(str(version.version))
    return found


def calibrate_run_cache_tags() -> list[str]:
    """The ema.calibration_cache tags of the k=90 calibrate runs, sorted."""
    client = MlflowClient()
    experiment = client.get_experiment_by_name(keys.DEFAULT_EXPERIMENT).experiment_id
    runs = client.search_runs([experiment], filter_string="attributes.run_name LIKE 'calibrate k=90%'")
    return sorted(r.data.tags.get(keys.TAG_CACHE, "") for r in runs)


def test_three_calibrations_at_once_register_one_version(tiny):
    folder, uri, target = tiny
    before = calibration_keys()
    results = ema_processes(
        [["calibrate", "--model", target, "--k", "90", "--no-progress"]] * 3, folder, MLFLOW_TRACKING_URI=uri
    )
    assert_all_succeeded(results)
    new = {key: versions for key, versions in calibration_keys().items() if key not in before}
    assert len(new) == 1 and len(next(iter(new.values()))) == 1, new
    assert sum("trained and registered" in out for _, out, _ in results) == 1
    assert sum("reused cached" in out for _, out, _ in results) == 2
    assert calibrate_run_cache_tags() == ["hit", "hit", "miss"]
    alias = MlflowClient().get_model_version_by_alias(keys.CALIBRATION_MODEL_NAME, keys.CALIBRATION_ALIAS)
    assert [str(alias.version)] == next(iter(new.values()))  # an explicit `ema calibrate` moves the alias


@pytest.mark.slow
def test_three_cold_audits_at_once_through_leases_train_each_model_once_and_move_no_alias(tiny):
    """Forced onto the registry lease (the claim a tracking server uses), with the KS-ratio models too."""
    folder, uri, target = tiny
    client = MlflowClient()
    alias_before = {
        str(v.version) for v in client.search_model_versions(f"name = '{keys.CALIBRATION_MODEL_NAME}'") if v.aliases
    }
    before = calibration_keys()
    audit = ["audit", "--model", target, "--query", "M6", "--k", "70", "--method", "both", "--no-progress"]
    results = ema_processes([audit] * 3, folder, MLFLOW_TRACKING_URI=uri, EMA_SINGLE_FLIGHT="lease")
    assert_all_succeeded(results)
    new = {key: versions for key, versions in calibration_keys().items() if key not in before}
    assert len(new) == 1 and len(next(iter(new.values()))) == 1, new
    for name in ("ema-query-model", "ema-calset-model"):
        assert len(client.search_model_versions(f"name = '{name}'")) == 1
        assert not client.get_registered_model(name).aliases
    after = {
        str(v.version) for v in client.search_model_versions(f"name = '{keys.CALIBRATION_MODEL_NAME}'") if v.aliases
    }
    assert after == alias_before
    claims = {
        tag
        for name in (keys.CALIBRATION_MODEL_NAME, "ema-query-model", "ema-calset-model")
        for tag in client.get_registered_model(name).tags
        if tag.startswith(keys.TAG_CLAIM_PREFIX)
    }
    assert not claims  # released
