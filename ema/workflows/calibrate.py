"""Train the calibration model f_cal with the target's recipe and pick EMA's thresholds; cached."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import mlflow
import numpy as np

from ema.auditors.ema import EMAAuditor
from ema.data.arrays import ArraySet
from ema.data.corruption import corrupt
from ema.signals import METRICS
from ema.tracking import keys
from ema.tracking.registry import RegisteredVersion, find_cached_version, log_and_register_torch_model, resolve_version, set_alias
from ema.tracking.runs import log_artifacts_atomically, read_json_artifact, start_run
from ema.training.spec import TrainSpec
from ema.workflows.sources import target_recipe, target_splits


@dataclass(frozen=True)
class CalibrationOutcome:
    version: RegisteredVersion
    thresholds: dict
    cached: bool


def calibration_halves(calibration: ArraySet, seed: int) -> tuple[ArraySet, ArraySet]:
    """Split the calibration set in two seeded halves: f_cal's training data, and held-out data."""
    order = np.random.default_rng(seed).permutation(len(calibration))
    half = len(calibration) // 2
    return calibration.take(order[:half], "calibration-train"), calibration.take(order[half:], "calibration-test")


def calibration_cache_key(spec: TrainSpec, calibration: ArraySet, k: int, cal_seed: int) -> str:
    """Same recipe, same clean calibration data, same quality k and seed: same calibration model."""
    payload = json.dumps(
        {"spec": spec.to_dict(), "data": calibration.fingerprint, "k": k, "cal_seed": cal_seed}, sort_keys=True
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def fit_calibration(spec: TrainSpec, members: ArraySet, nonmembers: ArraySet, *, progress: bool) -> tuple[object, EMAAuditor]:
    """Train f_cal on ``members`` and fit thresholds for every metric we know."""
    from ema.training.fit import fit, predict_proba

    model = fit(spec, members.pixels(), members.y, progress=progress, desc="train calibration")
    auditor = EMAAuditor(metrics=tuple(METRICS)).calibrate(
        predict_proba(model, members.pixels()), members.y, predict_proba(model, nonmembers.pixels()), nonmembers.y
    )
    return model, auditor


def train_calibration(
    target: RegisteredVersion, spec: TrainSpec, clean: ArraySet, *, k: int, cal_seed: int, cache_key: str, model_name: str, progress: bool
) -> CalibrationOutcome:
    """Train f_cal, fit thresholds and register the model, logging into the active run."""
    mlflow.log_params({**spec.to_dict(), keys.PARAM_K: k, keys.PARAM_CAL_SEED: cal_seed, keys.PARAM_MODEL_URI: target.uri})
    mlflow.set_tag(keys.TAG_CACHE, "miss")
    members, nonmembers = calibration_halves(corrupt(clean, k, cal_seed), cal_seed)
    model, auditor = fit_calibration(spec, members, nonmembers, progress=progress)
    thresholds = auditor.to_dict()
    mlflow.log_metrics({f"calibration_ba_{m}": entry["balanced_accuracy"] for m, entry in thresholds["metrics"].items()})
    log_artifacts_atomically({keys.ARTIFACT_THRESHOLDS: thresholds})
    version = log_and_register_torch_model(
        model,
        members.pixels()[:2],
        name=model_name,
        alias=keys.CALIBRATION_ALIAS,
        tags={
            keys.TAG_ROLE: "calibration",
            keys.TAG_CACHE_KEY: cache_key,
            keys.TAG_TRAIN_SPEC: spec.to_json(),
            keys.TAG_CALIBRATION_K: str(k),
            keys.TAG_CALIBRATION_SEED: str(cal_seed),
            keys.TAG_DATA_FINGERPRINT: clean.fingerprint,
        },
    )
    mlflow.set_tag(keys.TAG_CALIBRATION_VERSION, version.uri)
    return CalibrationOutcome(version, thresholds, cached=False)


def _lookup(target: RegisteredVersion, k: int, cal_seed: int, model_name: str):
    spec = target_recipe(target)
    clean = target_splits(target).calibration
    cache_key = calibration_cache_key(spec, clean, k, cal_seed)
    cached = find_cached_version(model_name, cache_key)
    hit = None
    if cached is not None:
        hit = CalibrationOutcome(cached, read_json_artifact(cached.run_id, keys.ARTIFACT_THRESHOLDS), cached=True)
    return spec, clean, cache_key, hit


def ensure_calibration(
    target: RegisteredVersion,
    *,
    k: int = 100,
    cal_seed: int = 0,
    model_name: str = keys.CALIBRATION_MODEL_NAME,
    progress: bool = True,
) -> CalibrationOutcome:
    """The calibration matching the target's recipe and calibration data; trained (in a run of its own) only when not cached."""
    spec, clean, cache_key, hit = _lookup(target, k, cal_seed, model_name)
    if hit is not None:
        return hit
    with start_run(calibration_run_name(target, k)):
        return train_calibration(target, spec, clean, k=k, cal_seed=cal_seed, cache_key=cache_key, model_name=model_name, progress=progress)


def calibration_run_name(target: RegisteredVersion, k: int) -> str:
    return f"calibrate k={k} {target.name} v{target.version}"


def calibrate(
    model_uri: str,
    *,
    k: int = 100,
    cal_seed: int = 0,
    model_name: str = keys.CALIBRATION_MODEL_NAME,
    progress: bool = True,
) -> CalibrationOutcome:
    """``ema calibrate``: one run that either trains the calibration or records the cache hit it reused."""
    with start_run(f"calibrate k={k} {model_uri}"):
        target = resolve_version(model_uri)
        spec, clean, cache_key, hit = _lookup(target, k, cal_seed, model_name)
        if hit is None:
            return train_calibration(target, spec, clean, k=k, cal_seed=cal_seed, cache_key=cache_key, model_name=model_name, progress=progress)
        mlflow.log_params({keys.PARAM_K: k, keys.PARAM_CAL_SEED: cal_seed, keys.PARAM_MODEL_URI: target.uri})
        mlflow.set_tags({keys.TAG_CACHE: "hit", keys.TAG_CALIBRATION_VERSION: hit.version.uri})
        log_artifacts_atomically({keys.ARTIFACT_THRESHOLDS: hit.thresholds})
        set_alias(hit.version, keys.CALIBRATION_ALIAS)
        return hit
