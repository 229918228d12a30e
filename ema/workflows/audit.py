"""Audit a query set against a model reached only as a black box."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pandas as pd

from ema.auditors.ema import EMAAuditor, check_alpha
from ema.auditors.result import AuditResult
from ema.data.arrays import ArraySet
from ema.data.files import read_set
from ema.data.splits import EXPECTED_VERDICTS
from ema.errors import InputError
from ema.inputs import InputTransform
from ema.oracle import ACCESS_LABEL_ONLY, Oracle, PyfuncOracle
from ema.signals import LABEL_ONLY_METRICS, PAPER_METRICS
from ema.tracking import keys
from ema.tracking.registry import set_version_tags
from ema.tracking.runs import log_artifacts_atomically, start_run
from ema.workflows.calibrate import ensure_calibration, fit_thresholds
from ema.workflows.target import resolve_target

METHODS = ("ema",)


@dataclass(frozen=True)
class AuditOutcome:
    run_id: str
    query: str
    result: AuditResult
    expected_verdict: str | None
    access: str


@dataclass(frozen=True)
class SuppliedCalibration:
    """An already-trained calibration model and the calibration samples it was / was not trained on."""

    model_uri: str
    members_file: str
    nonmembers_file: str

    def thresholds(self, transform: InputTransform) -> dict:
        oracle = PyfuncOracle(self.model_uri, transform=transform)
        return fit_thresholds(oracle, read_set(self.members_file), read_set(self.nonmembers_file)).to_dict()


def membership_table(query: ArraySet, result: AuditResult) -> pd.DataFrame:
    """One row per query sample: its index, label, each metric, each flag and M."""
    return pd.DataFrame({"index": query.index, "label": query.y, **result.sample_columns()})


def audit_record(query_name: str, query: ArraySet, result: AuditResult, run_id: str) -> str:
    """The audit as a model-version tag value: what was asked, what came out, where to look."""
    return json.dumps(
        {
            "query": query_name,
            "query_fingerprint": query.fingerprint,
            "method": result.method,
            **{k: result.metrics[k] for k in (keys.METRIC_RHO_EMA, keys.METRIC_RHO_EMA_KS) if k in result.metrics},
            "verdict": result.verdict,
            "run_id": run_id,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        sort_keys=True,
    )


def audit(
    model_uri: str | None = None,
    *,
    model_url: str | None = None,
    query: str | None = None,
    query_file: str | None = None,
    method: str = "ema",
    alpha: float = 0.1,
    test: str = "t",
    k: int = 100,
    cal_seed: int = 0,
    threshold_mode: str = "global",
    outputs: str = "auto",
    recipe_file: str | None = None,
    transform: InputTransform | None = None,
    calibration: SuppliedCalibration | None = None,
    calibration_name: str = keys.CALIBRATION_MODEL_NAME,
    oracle: Oracle | None = None,
    progress: bool = True,
) -> AuditOutcome:
    """Query the target through its oracle, flag each sample, and log rho_EMA and the verdict.

    Every check runs inside the audit run, so bad input leaves a FAILED run and no
    artifacts; artifacts are logged last, after every number is computed. A registered
    target's version is tagged with the audit afterwards (its audit history).
    """
    name = query if query is not None else Path(query_file).name
    with start_run(f"audit {name} {method}") as run:
        if method not in METHODS:
            raise InputError(f"expected method in {METHODS}, got {method!r}")
        check_alpha(alpha)
        target = resolve_target(model_uri, model_url=model_url, recipe_file=recipe_file, transform=transform)
        mlflow.set_tag("mlflow.runName", f"audit {name} {method} {target.label}")
        mlflow.log_params(
            {
                keys.PARAM_METHOD: method,
                keys.PARAM_TEST: test,
                keys.PARAM_ALPHA: alpha,
                keys.PARAM_QUERY: name,
                keys.PARAM_K: k,
                keys.PARAM_CAL_SEED: cal_seed,
                keys.PARAM_MODEL_URI: target.model_uri or "",
                keys.PARAM_MODEL_URL: target.model_url or "",
                keys.PARAM_MODEL_NAME: target.version.name if target.version else "",
                keys.PARAM_MODEL_VERSION: target.version.version if target.version else "",
                keys.PARAM_THRESHOLD_MODE: threshold_mode,
                keys.PARAM_OUTPUTS: outputs,
            }
        )
        data = target.query_set(query=query, query_file=query_file)
        mlflow.log_param(keys.PARAM_QUERY_FINGERPRINT, data.fingerprint)
        mlflow.log_input(mlflow.data.from_numpy(data.x, targets=data.y, name=f"query {name}"), context="query")
        if calibration is not None:
            thresholds = calibration.thresholds(target.recipe.transform)
            mlflow.set_tags({keys.TAG_CACHE: "supplied", keys.TAG_CALIBRATION_VERSION: calibration.model_uri})
        else:
            outcome = ensure_calibration(target, k=k, cal_seed=cal_seed, model_name=calibration_name, progress=progress)
            thresholds = outcome.thresholds
            mlflow.set_tags({keys.TAG_CACHE: "hit" if outcome.cached else "miss", keys.TAG_CALIBRATION_VERSION: outcome.version.uri})
        oracle = oracle or target.oracle(outputs=outputs)
        predictions = oracle.predict(data.pixels(), n_classes=int(thresholds["n_classes"]))
        metrics = LABEL_ONLY_METRICS if predictions.access == ACCESS_LABEL_ONLY else PAPER_METRICS
        auditor = EMAAuditor.from_dict(thresholds, metrics=metrics, threshold_mode=threshold_mode, test=test, alpha=alpha)
        result = auditor.audit(predictions.proba, data.y)
        expected = EXPECTED_VERDICTS.get(query) if query is not None else None
        mlflow.log_metrics(result.metrics)
        mlflow.set_tags(
            {
                keys.TAG_VERDICT: result.verdict,
                keys.TAG_ACCESS: predictions.access,
                keys.TAG_OUTPUTS_DETECTED: predictions.detected,
                **({keys.TAG_EXPECTED_VERDICT: expected} if expected else {}),
            }
        )
        log_artifacts_atomically(
            {keys.ARTIFACT_THRESHOLDS: result.thresholds, keys.ARTIFACT_MEMBERSHIP: membership_table(data, result)}
        )
    if target.version is not None:
        record = audit_record(name, data, result, run.info.run_id)
        query_key = query if query is not None else f"file-{data.fingerprint}"
        set_version_tags(target.version, {f"{keys.TAG_AUDIT_PREFIX}{query_key}": record, keys.TAG_LAST_AUDIT: record})
    return AuditOutcome(run.info.run_id, name, result, expected, predictions.access)
