"""Audit a query set against a registered target reached only as a black box."""

from __future__ import annotations

from dataclasses import dataclass

import mlflow
import pandas as pd

from ema.auditors.ema import EMAAuditor, check_alpha
from ema.auditors.result import AuditResult
from ema.data.arrays import ArraySet
from ema.data.splits import EXPECTED_VERDICTS
from ema.errors import InputError
from ema.oracle import PyfuncOracle
from ema.signals import PAPER_METRICS
from ema.tracking import keys
from ema.tracking.registry import resolve_version
from ema.tracking.runs import log_artifacts_atomically, start_run
from ema.workflows.calibrate import ensure_calibration
from ema.workflows.sources import query_set

METHODS = ("ema",)


@dataclass(frozen=True)
class AuditOutcome:
    run_id: str
    query: str
    result: AuditResult
    expected_verdict: str | None


def membership_table(query: ArraySet, result: AuditResult) -> pd.DataFrame:
    """One row per query sample: its index, label, each metric, each flag and M."""
    return pd.DataFrame({"index": query.index, "label": query.y, **result.sample_columns()})


def audit(
    model_uri: str,
    *,
    query: str | None = None,
    query_file: str | None = None,
    method: str = "ema",
    alpha: float = 0.1,
    test: str = "t",
    k: int = 100,
    cal_seed: int = 0,
    threshold_mode: str = "global",
    outputs: str = "probabilities",
    calibration_name: str = keys.CALIBRATION_MODEL_NAME,
    oracle: PyfuncOracle | None = None,
    progress: bool = True,
) -> AuditOutcome:
    """Query the target through its pyfunc, flag each sample, and log rho_EMA and the verdict.

    Every check runs inside the audit run, so bad input leaves a FAILED run and no
    artifacts; artifacts are logged last, after every number is computed.
    """
    name = query if query is not None else str(query_file)
    with start_run(f"audit {name} {method}") as run:
        if method not in METHODS:
            raise InputError(f"expected method in {METHODS}, got {method!r}")
        check_alpha(alpha)
        mlflow.log_params(
            {
                keys.PARAM_METHOD: method,
                keys.PARAM_TEST: test,
                keys.PARAM_ALPHA: alpha,
                keys.PARAM_QUERY: name,
                keys.PARAM_K: k,
                keys.PARAM_CAL_SEED: cal_seed,
                keys.PARAM_MODEL_URI: model_uri,
                keys.PARAM_THRESHOLD_MODE: threshold_mode,
                keys.PARAM_OUTPUTS: outputs,
            }
        )
        target = resolve_version(model_uri)
        mlflow.set_tag("mlflow.runName", f"audit {name} {method} {target.name} v{target.version}")
        data = query_set(target, query=query, query_file=query_file)
        mlflow.log_param(keys.PARAM_QUERY_FINGERPRINT, data.fingerprint)
        calibration = ensure_calibration(target, k=k, cal_seed=cal_seed, model_name=calibration_name, progress=progress)
        mlflow.set_tags(
            {keys.TAG_CACHE: "hit" if calibration.cached else "miss", keys.TAG_CALIBRATION_VERSION: calibration.version.uri}
        )
        auditor = EMAAuditor.from_dict(
            calibration.thresholds, metrics=PAPER_METRICS, threshold_mode=threshold_mode, test=test, alpha=alpha
        )
        oracle = oracle or PyfuncOracle(target.uri, outputs=outputs)
        result = auditor.audit(oracle.predict_proba(data.pixels()), data.y)
        expected = EXPECTED_VERDICTS.get(query) if query is not None else None
        mlflow.log_metrics(result.metrics)
        mlflow.set_tags({keys.TAG_VERDICT: result.verdict, **({keys.TAG_EXPECTED_VERDICT: expected} if expected else {})})
        log_artifacts_atomically(
            {keys.ARTIFACT_THRESHOLDS: result.thresholds, keys.ARTIFACT_MEMBERSHIP: membership_table(data, result)}
        )
    return AuditOutcome(run.info.run_id, name, result, expected)
