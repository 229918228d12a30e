"""Issue 23, critical: a model planted in the registry under a helper's name must not run in the auditor.

The auditor finds its own helper models (calibration, the KS ratio's query and calibration-set
models) by the version tag ``ema.cache_key``, which anyone who reads the registry can copy. A
planted pyfunc whose ``load_context`` writes a canary file, registered under each helper name
with every tag of the real version, must neither run nor change the audit's numbers, and the
audit must say that it ignored a foreign entry.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from ema.run_warnings import gather_run_warnings
from ema.tracking import keys
from ema.tracking.helper_cache import TAG_HELPER, files_digest, find_entry
from ema.training.spec import TrainSpec
from ema.workflows.audit import AuditConfig, audit
from ema.workflows.train import train_target
from tests.conftest import module_store

HELPER_NAMES = (keys.CALIBRATION_MODEL_NAME, "ema-query-model", "ema-calset-model")


class CanaryModel(mlflow.pyfunc.PythonModel):
    """What an attacker registers: loading it writes a file (it could run any command)."""

    def __init__(self, canary: str) -> None:
        self.canary = canary

    def load_context(self, context) -> None:
        Path(self.canary).write_text("planted code ran")

    def predict(self, context, model_input, params=None):
        return np.full((len(model_input), 10), 0.1, dtype=np.float32)


@pytest.fixture(scope="module")
def audited(tmp_path_factory, template_db):
    """A store with a small target, audited once by EMA and the KS ratio (which trains all three helpers)."""
    with module_store(tmp_path_factory, template_db) as uri:
        trained = train_target(TrainSpec(epochs=3), progress=False)
        first = audit(AuditConfig(model_uri=trained.version.uri, query="M1", method="both"), progress=False)
        yield uri, trained.version, first


def recorded(name: str):
    """The newest version of ``name`` that the auditor's own run recorded (the real helper)."""
    client = MlflowClient()
    versions = client.search_model_versions(f"name = '{name}'")
    return max((v for v in versions if TAG_HELPER in client.get_run(v.run_id).data.tags), key=lambda v: int(v.version))


def plant(name: str, canary: Path, like=None) -> str:
    """Register a canary pyfunc under ``name`` with every tag of version ``like`` (default: the real helper's) and
    the metrics of its run; its number."""
    like = like or recorded(name)
    with mlflow.start_run():
        mlflow.log_metrics(MlflowClient().get_run(like.run_id).data.metrics)
        info = mlflow.pyfunc.log_model(name="model", python_model=CanaryModel(str(canary)))
    canary.unlink()  # MLflow loads a python_model once while logging it: the canary works
    tags = MlflowClient().get_model_version(name, like.version).tags
    return str(mlflow.register_model(info.model_uri, name, tags=tags).version)


def numbers(outcome) -> dict:
    return {method: (result.metrics, result.verdict) for method, result in outcome.results.items()}


def test_planted_helpers_with_copied_tags_run_nothing_and_change_nothing(audited, tmp_path):
    _, version, first = audited
    canary = tmp_path / "canary"
    planted = {name: plant(name, canary) for name in HELPER_NAMES}
    again = audit(AuditConfig(model_uri=version.uri, query="M1", method="both"), progress=False)
    assert not canary.exists()
    assert numbers(again) == numbers(first)
    for name, number in planted.items():
        assert any(f"models:/{name}/{number}" in w and "foreign cache entry" in w for w in again.warnings), name
    logged = json.loads(MlflowClient().get_run(again.run_id).data.tags[keys.TAG_WARNINGS])
    assert any("foreign cache entry" in w for w in logged)


def test_a_planted_helper_with_a_forged_run_record_is_still_not_run(audited, tmp_path):
    """Even a planted run that claims the entry (copying the run tag's form) loads as weights only, and fails."""
    _, version, first = audited
    canary = tmp_path / "canary"
    name = keys.CALIBRATION_MODEL_NAME
    real = recorded(name)
    number = plant(name, canary)
    forge_record(name, number, real, tmp_path)
    again = audit(AuditConfig(model_uri=version.uri, query="M1", method="both"), progress=False)
    assert not canary.exists()
    assert numbers(again) == numbers(first)
    assert any(f"models:/{name}/{number}" in w for w in again.warnings)


def test_find_entry_ignores_versions_whose_run_did_not_record_them(audited, tmp_path):
    """The unlearning and grid-target caches look up entries the same way: a copied version tag is not enough."""
    name = keys.CALIBRATION_MODEL_NAME
    key = recorded(name).tags[keys.TAG_CACHE_KEY]
    number = plant(name, tmp_path / "canary")
    with gather_run_warnings() as foreign:
        entry = find_entry(name, key)
    assert entry is not None and entry.version.version != number
    assert [w for w in foreign if f"models:/{name}/{number}" in w]
    assert find_entry("ema-target", "no-such-key") is None


def test_a_helper_whose_files_changed_after_its_run_recorded_them_is_ignored(audited, monkeypatch):
    from ema.tracking import helper_cache

    name = "ema-query-model"
    real = recorded(name)
    source = MlflowClient().get_logged_model(real.source.removeprefix("models:/")).artifact_location
    weights = Path(source.removeprefix("file://")) / "artifacts" / "weights.pt"
    weights.write_bytes(weights.read_bytes() + b"\0")  # changed in the artifact store, not in the registry
    monkeypatch.setattr(helper_cache, "_DOWNLOADS", {})  # a new process would download the files anew
    with gather_run_warnings() as foreign:
        entry = find_entry(name, real.tags[keys.TAG_CACHE_KEY])
    assert entry is None or entry.version.version != str(real.version)
    assert [w for w in foreign if f"models:/{name}/{real.version}" in w and "digest mismatch" in w]


def test_a_planted_unlearned_version_with_copied_tags_and_metrics_is_not_reused(audited, tmp_path):
    from ema.training.unlearn_spec import UnlearnSpec
    from ema.workflows.unlearn import UnlearnConfig, unlearn_cached

    _, version, _ = audited
    config = UnlearnConfig(
        model_uri=version.uri, forget="M4", spec=UnlearnSpec(method="finetune", epochs=1), alias=None
    )
    first, _ = unlearn_cached(config, progress=False)
    canary = tmp_path / "canary"
    planted = plant(version.name, canary, like=first.version)
    with gather_run_warnings() as foreign:
        again, reused = unlearn_cached(config, progress=False)
    assert reused and again.version.version == first.version.version
    assert [w for w in foreign if f"models:/{version.name}/{planted}" in w]
    assert not canary.exists()


def forge_record(name: str, number: str, claimed_from, tmp_path: Path) -> None:
    """Give a planted version's run the auditor's run tag with its own files' digest, as a store writer can."""
    claimed = json.loads(MlflowClient().get_run(claimed_from.run_id).data.tags[TAG_HELPER])
    planted = MlflowClient().get_model_version(name, number)
    files = mlflow.artifacts.download_artifacts(artifact_uri=f"models:/{name}/{number}", dst_path=str(tmp_path / "f"))
    forged = {**claimed, "version": number, "digest": files_digest(Path(files))}
    MlflowClient().set_tag(planted.run_id, TAG_HELPER, json.dumps(forged))


def test_a_forged_grid_target_with_a_forged_run_record_runs_nothing(audited, tmp_path):
    """Grid targets are found like helpers, and scored as weights in the recipe's network, never as a pyfunc."""
    from ema.oracle import LocalOracle
    from ema.workflows.grid_targets import GRID_TARGET_NAME, ensure_target
    from ema.workflows.target import resolve_target

    spec = TrainSpec(epochs=1)
    options = {"data": "mnist-embedded", "data_seed": 0, "data_root": None, "progress": False}
    real, cached = ensure_target(spec, **options)
    assert not cached
    canary = tmp_path / "canary"
    planted = plant(GRID_TARGET_NAME, canary, like=real.version)
    forge_record(GRID_TARGET_NAME, planted, real.version, tmp_path)
    with gather_run_warnings() as foreign:
        again, cached = ensure_target(spec, **options)
    assert cached and again.version.version == real.version.version
    assert [w for w in foreign if f"models:/{GRID_TARGET_NAME}/{planted}" in w]
    target = resolve_target(again.version.uri, own_files=again.path)
    oracle = target.oracle()
    assert isinstance(oracle, LocalOracle)
    images = target.splits().query("M1").x[:50]
    pyfunc = resolve_target(again.version.uri).oracle()  # the real version's own pyfunc: the same numbers
    np.testing.assert_allclose(oracle.predict_proba(images), pyfunc.predict_proba(images), atol=1e-6)
    assert not canary.exists()


def test_a_planted_unlearned_version_with_a_forged_run_record_is_not_reused_nor_run(audited, tmp_path):
    from ema.experiments.unlearning.runner import Version, audited_target
    from ema.oracle import LocalOracle
    from ema.training.unlearn_spec import UnlearnSpec
    from ema.workflows.target import resolve_target
    from ema.workflows.unlearn import UnlearnConfig, unlearn_cached

    _, version, _ = audited
    spec = UnlearnSpec(method="finetune", epochs=1)
    config = UnlearnConfig(model_uri=version.uri, forget="M5", spec=spec, alias=None)
    first, _ = unlearn_cached(config, progress=False)
    canary = tmp_path / "canary"
    planted = plant(version.name, canary, like=first.version)
    forge_record(version.name, planted, first.version, tmp_path)
    with gather_run_warnings() as foreign:
        again, reused = unlearn_cached(config, progress=False)
    assert reused and again.version.version == first.version.version
    assert [w for w in foreign if f"models:/{version.name}/{planted}" in w]
    target = resolve_target(version.uri)
    row = audited_target(target, Version("finetune", None, again.version, again.metrics, again.files))
    assert isinstance(row.oracle(), LocalOracle) and row.version == again.version
    images = target.splits().query("M5").x[:50]
    np.testing.assert_allclose(
        row.oracle().predict_proba(images), resolve_target(again.version.uri).oracle().predict_proba(images), atol=1e-6
    )
    assert not canary.exists()
