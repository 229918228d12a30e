"""The medical protocol's calibration quality: (100 - k)% of the calibration images get Gaussian noise.

The benchmark's :func:`ema.data.corruption.corrupt` noises half of the corrupted images and
rotates the other half; the paper's chest X-ray experiment only adds noise. The audit
workflow knows only the benchmark's corruption, so the medical grid brings its own:

- EMA: a calibration model trained here on the noised calibration half, cached in the
  registry under its own key, handed to :func:`ema.workflows.audit.audit` as a
  :class:`~ema.workflows.audit.SuppliedCalibration`.
- the KS ratio: :func:`audit_ks_ratio`, one run per cell, with f_Dcal trained on the noised
  calibration set (cached like the audit workflow's own KS-ratio models).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import mlflow
import numpy as np

from ema.auditors.ks_ratio import KSRatioAuditor
from ema.auditors.result import AuditResult
from ema.data.arrays import ArraySet
from ema.data.corruption import add_gaussian_noise
from ema.data.files import write_set
from ema.data.splits import EXPECTED_VERDICTS
from ema.errors import InputError
from ema.oracle import ACCESS_PROBABILITIES, Oracle
from ema.tracking import keys
from ema.tracking.registry import find_cached_version, log_and_register_classifier
from ema.tracking.runs import log_artifacts_atomically, start_run
from ema.training.recipes import recipe_to_json
from ema.workflows.audit import SuppliedCalibration, membership_table, merged_metrics
from ema.workflows.calibrate import calibration_cache_key, calibration_halves, fit_thresholds
from ema.workflows.models import cached_model
from ema.workflows.target import Target

#: Alias of the newest noise-only calibration model (the benchmark's keeps ``calibration``).
NOISE_CALIBRATION_ALIAS = "calibration-noise"
PARAM_CORRUPTION = "corruption"
NOISE_ONLY = "noise"


def add_noise(data: ArraySet, k: int, seed: int = 0) -> ArraySet:
    """The set at medical calibration quality ``k``: (100 - k)% of the images get Gaussian noise.

    Parameters
    ----------
    data : ArraySet
        Clean images.
    k : int
        Percent of images left clean, 0..100.
    seed : int
        Seeds which images are noised and the noise.

    Examples
    --------
    >>> noisy = add_noise(calibration, 60, seed=0)  # doctest: +SKIP
    """
    if not 0 <= k <= 100:
        raise InputError(f"expected calibration quality k in 0..100 (percent clean), got {k}")
    rng = np.random.default_rng(seed)
    n = len(data)
    chosen = rng.permutation(n)[: round(n * (100 - k) / 100)]
    x = data.x.copy()
    x[chosen] = add_gaussian_noise(x[chosen], rng)
    return ArraySet(f"{data.name}@noise-k{k}", x, data.y, data.index)


def noise_cache_key(target: Target, clean: ArraySet, k: int, cal_seed: int) -> str:
    base = calibration_cache_key(target.recipe, clean, k, cal_seed)
    return hashlib.sha256(json.dumps({"calibration": base, "corruption": NOISE_ONLY}).encode()).hexdigest()[:16]


def noise_calibration(target: Target, *, k: int, cal_seed: int, folder: Path, progress: bool = True) -> SuppliedCalibration:
    """The noise-only calibration model for ``k`` (trained in a run of its own on a cache miss).

    Its two calibration halves are written under ``folder`` for the audit to pick thresholds on.
    """
    clean = target.splits().calibration
    members, nonmembers = calibration_halves(add_noise(clean, k, cal_seed), cal_seed)
    cache_key = noise_cache_key(target, clean, k, cal_seed)
    version = find_cached_version(keys.CALIBRATION_MODEL_NAME, cache_key)
    if version is None:
        with start_run(f"calibrate k={k} noise-only {target.label}"):
            mlflow.log_params(
                {keys.PARAM_K: k, keys.PARAM_CAL_SEED: cal_seed, keys.PARAM_MODEL_URI: target.model_uri, PARAM_CORRUPTION: NOISE_ONLY}
            )
            mlflow.set_tag(keys.TAG_CACHE, "miss")
            classifier = target.recipe.fit(members.pixels(), members.y, progress=progress)
            thresholds = fit_thresholds(classifier, members, nonmembers).to_dict()
            mlflow.log_metrics({f"calibration_ba_{m}": e["balanced_accuracy"] for m, e in thresholds["metrics"].items()})
            log_artifacts_atomically({keys.ARTIFACT_THRESHOLDS: thresholds})
            version = log_and_register_classifier(
                classifier,
                members.pixels()[:2],
                name=keys.CALIBRATION_MODEL_NAME,
                alias=NOISE_CALIBRATION_ALIAS,
                tags={
                    keys.TAG_ROLE: "calibration",
                    keys.TAG_CACHE_KEY: cache_key,
                    keys.TAG_RECIPE: recipe_to_json(target.recipe),
                    keys.TAG_CALIBRATION_K: str(k),
                    keys.TAG_CALIBRATION_SEED: str(cal_seed),
                    keys.TAG_DATA_FINGERPRINT: clean.fingerprint,
                    "ema.corruption": NOISE_ONLY,
                },
            )
    folder.mkdir(parents=True, exist_ok=True)
    members_file = write_set(members, folder / f"calibration-k{k}-members.npz")
    nonmembers_file = write_set(nonmembers, folder / f"calibration-k{k}-nonmembers.npz")
    return SuppliedCalibration(version.uri, str(members_file), str(nonmembers_file))


def audit_ks_ratio(
    target: Target,
    oracle: Oracle,
    query_name: str,
    query: ArraySet,
    calibration_set: ArraySet,
    *,
    k: int,
    cal_seed: int,
    progress: bool = True,
) -> tuple[str, AuditResult]:
    """One KS-ratio audit run with f_Dcal trained on ``calibration_set``; logged as the audit workflow logs.

    Returns the run id and the result.
    """
    method = "ks-ratio"
    with start_run(f"audit {query_name} {method} {target.label}") as run:
        mlflow.log_params(
            {
                keys.PARAM_METHOD: method,
                keys.PARAM_QUERY: query_name,
                keys.PARAM_K: k,
                keys.PARAM_CAL_SEED: cal_seed,
                keys.PARAM_MODEL_URI: target.model_uri or "",
                keys.PARAM_MODEL_NAME: target.version.name if target.version else "",
                keys.PARAM_MODEL_VERSION: target.version.version if target.version else "",
                keys.PARAM_QUERY_FINGERPRINT: query.fingerprint,
                PARAM_CORRUPTION: NOISE_ONLY,
            }
        )
        predictions = oracle.predict(query.pixels())
        if predictions.access != ACCESS_PROBABILITIES:
            raise InputError(f"method {method!r} needs class probabilities, got a {predictions.access} model")
        query_model, query_cached = cached_model(target, "query-model", query, progress=progress)
        calset_model, calset_cached = cached_model(target, "calset-model", calibration_set, progress=progress)
        pixels = query.pixels()
        auditor = KSRatioAuditor().calibrate(query_model.predict_proba(pixels), calset_model.predict_proba(pixels))
        result = auditor.audit(predictions.proba, query.y)
        mlflow.log_metrics(merged_metrics({method: result}))
        expected = EXPECTED_VERDICTS.get(query_name)
        mlflow.set_tags(
            {
                keys.TAG_VERDICT: result.verdict,
                f"{keys.TAG_VERDICT}.{method}": result.verdict,
                "ema.ks_ratio_cache": f"query-model {'hit' if query_cached else 'miss'}, calset-model {'hit' if calset_cached else 'miss'}",
                **({keys.TAG_EXPECTED_VERDICT: expected} if expected else {}),
            }
        )
        log_artifacts_atomically(
            {keys.ARTIFACT_THRESHOLDS: {method: result.thresholds}, keys.ARTIFACT_MEMBERSHIP: membership_table(query, {method: result})}
        )
    return run.info.run_id, result
