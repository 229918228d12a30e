"""Audit a query set against a model reached only as a black box."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd

from ema.auditors.calibrated import CalibratedAuditor
from ema.auditors.ema import EMAAuditor, check_alpha
from ema.auditors.ks_ratio import KSRatioAuditor
from ema.auditors.result import AuditResult
from ema.data.arrays import ArraySet
from ema.data.corruption import DEFAULT_CORRUPTION
from ema.data.files import read_set
from ema.data.splits import EXPECTED_VERDICTS
from ema.errors import InputError
from ema.inputs import InputTransform
from ema.oracle import ACCESS_LABEL_ONLY, ACCESS_PROBABILITIES, Oracle, Predictions, PyfuncOracle
from ema.signals import LABEL_ONLY_METRICS, PAPER_METRICS
from ema.tracking import keys
from ema.tracking.registry import set_version_tags
from ema.tracking.runs import log_artifacts_atomically, log_batch, log_dataset, start_run
from ema.workflows.calibrate import CalibrationPlan, ensure_plan, fit_thresholds
from ema.workflows.models import cached_model, registered_oracle
from ema.workflows.target import Target, resolve_target


@dataclass(frozen=True)
class AuditOutcome:
    run_id: str
    query: str
    result: AuditResult
    expected_verdict: str | None
    access: str
    results: dict[str, AuditResult]


@dataclass(frozen=True)
class SuppliedCalibration:
    """An already-trained calibration model and the calibration samples it was / was not trained on."""

    model_uri: str
    members_file: str
    nonmembers_file: str

    def thresholds(self, transform: InputTransform) -> dict:
        oracle = PyfuncOracle(self.model_uri, transform=transform)
        return fit_thresholds(oracle, read_set(self.members_file), read_set(self.nonmembers_file)).to_dict()


def membership_table(query: ArraySet, results: dict[str, AuditResult]) -> pd.DataFrame:
    """One row per query sample: index, label, then each method's metrics, flags and M (prefixed after the first)."""
    columns = {"index": query.index, "label": query.y}
    for position, (method, result) in enumerate(results.items()):
        prefix = "" if position == 0 else f"{method}_"
        columns.update({f"{prefix}{name}": values for name, values in result.sample_columns().items()})
    return pd.DataFrame(columns)


def audit_record(query_name: str, query: ArraySet, result: AuditResult, run_id: str) -> str:
    """The audit as a model-version tag value: what was asked, what came out, where to look."""
    return json.dumps(
        {
            "query": query_name,
            "query_fingerprint": query.fingerprint,
            "method": result.method,
            **result.metrics,
            "verdict": result.verdict,
            "run_id": run_id,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        sort_keys=True,
    )


@dataclass(frozen=True)
class AuditRequest:
    """Everything one audit run needs besides the target's predictions."""

    target: Target
    data: ArraySet
    oracle: Oracle
    alpha: float
    test: str
    k: int
    cal_seed: int
    threshold_mode: str
    calibration_name: str
    supplied: SuppliedCalibration | None
    reference_file: str | None
    progress: bool
    corruption: str = DEFAULT_CORRUPTION

    @cached_property
    def calibration_plan(self) -> CalibrationPlan:
        """Made once per audit: every method of the audit shares it."""
        return CalibrationPlan.for_target(
            self.target, k=self.k, cal_seed=self.cal_seed, model_name=self.calibration_name, corruption=self.corruption
        )

    def thresholds(self) -> tuple[dict, dict[str, str]]:
        """EMA's thresholds and the tags saying where they came from."""
        if self.supplied is not None:
            return self.supplied.thresholds(self.target.recipe.transform), {
                keys.TAG_CACHE: "supplied",
                keys.TAG_CALIBRATION_VERSION: self.supplied.model_uri,
            }
        outcome = ensure_plan(self.calibration_plan, progress=self.progress)
        return outcome.thresholds, {
            keys.TAG_CACHE: "hit" if outcome.cached else "miss",
            keys.TAG_CALIBRATION_VERSION: outcome.version.uri,
        }


def run_ema(request: AuditRequest, predictions: Predictions) -> tuple[AuditResult, dict[str, str]]:
    """The paper's auditor; correctness alone when the model returns labels only."""
    thresholds, tags = request.thresholds()
    predictions = predictions.with_classes(int(thresholds["n_classes"]))
    metrics = LABEL_ONLY_METRICS if predictions.access == ACCESS_LABEL_ONLY else PAPER_METRICS
    auditor = EMAAuditor.from_dict(
        thresholds, metrics=metrics, threshold_mode=request.threshold_mode, test=request.test, alpha=request.alpha
    )
    return auditor.audit(predictions.proba, request.data.y), tags


def run_ks_ratio(request: AuditRequest, predictions: Predictions) -> tuple[AuditResult, dict[str, str]]:
    """Liu & Tsaftaris: compare the target with models trained on the query set and on the calibration set."""
    _require_probabilities("ks-ratio", predictions)
    calibration_set = request.calibration_plan.corrupted()
    query_model, query_cached = cached_model(request.target, "query-model", request.data, progress=request.progress)
    calset_model, calset_cached = cached_model(
        request.target, "calset-model", calibration_set, progress=request.progress
    )
    images = request.data.x
    auditor = KSRatioAuditor().calibrate(query_model.predict_proba(images), calset_model.predict_proba(images))
    tags = {
        "ema.ks_ratio_cache": f"query-model {'hit' if query_cached else 'miss'}, calset-model "
        "{'hit' if calset_cached else 'miss'}"
    }
    return auditor.audit(predictions.proba, request.data.y), tags


def run_calibrated(request: AuditRequest, predictions: Predictions) -> tuple[AuditResult, dict[str, str]]:
    """The calibrated auditor: reference non-members scored on the target, member behaviour from f_cal."""
    _require_probabilities("calibrated", predictions)
    auditor, tags = fit_calibrated(
        request.target,
        request.oracle,
        request.calibration_plan,
        alpha=request.alpha,
        threshold_mode=request.threshold_mode,
        reference_file=request.reference_file,
        progress=request.progress,
    )
    return auditor.audit(predictions.proba, request.data.y), tags


def fit_calibrated(
    target: Target,
    oracle: Oracle,
    plan: CalibrationPlan,
    *,
    alpha: float = 0.1,
    threshold_mode: str = "global",
    reference_file: str | None = None,
    progress: bool = True,
) -> tuple[CalibratedAuditor, dict[str, str]]:
    """Score the reference through the target and the calibration halves through f_cal, and calibrate."""
    reference = read_set(reference_file) if reference_file else target.splits().calibration
    outcome = ensure_plan(plan, progress=progress)
    calibration_model = registered_oracle(outcome.version, target.recipe.transform)
    members, nonmembers = plan.halves()
    auditor = CalibratedAuditor(threshold_mode=threshold_mode, alpha=alpha).calibrate(
        oracle.predict_proba(reference.x),
        reference.y,
        calibration_model.predict_proba(members.x),
        members.y,
        calibration_model.predict_proba(nonmembers.x),
        nonmembers.y,
    )
    tags = {
        keys.TAG_CACHE: "hit" if outcome.cached else "miss",
        keys.TAG_CALIBRATION_VERSION: outcome.version.uri,
        "ema.reference": reference_file or "calibration set (clean), scored on the target",
    }
    return auditor, tags


def _require_probabilities(method: str, predictions: Predictions) -> None:
    if predictions.access != ACCESS_PROBABILITIES:
        raise InputError(
            f"method {method!r} needs class probabilities, got a {predictions.access} model; use --method ema"
        )


RUNNERS = {"ema": run_ema, "ks-ratio": run_ks_ratio, "calibrated": run_calibrated}
#: What each --method runs; the first result gives the run's verdict.
METHOD_PLANS = {"ema": ("ema",), "ks-ratio": ("ks-ratio",), "both": ("ema", "ks-ratio"), "calibrated": ("calibrated",)}
METHODS = tuple(METHOD_PLANS)


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
    reference_file: str | None = None,
    calibration_name: str = keys.CALIBRATION_MODEL_NAME,
    corruption: str = DEFAULT_CORRUPTION,
    oracle: Oracle | None = None,
    tag_version: bool = True,
    progress: bool = True,
) -> AuditOutcome:
    """Query the target through its oracle, run the chosen auditors, and log their metrics and verdict.

    Every check runs inside the audit run, so bad input leaves a FAILED run and no
    artifacts; artifacts are logged last, after every number is computed. A registered
    target's version is tagged with the audit afterwards (its audit history), unless
    ``tag_version`` is False (a grid tags the version once, for all its cells).
    """
    name = query if query is not None else Path(query_file).name
    with start_run(f"audit {name} {method}") as run:
        if method not in METHOD_PLANS:
            raise InputError(f"expected method in {METHODS}, got {method!r}")
        check_alpha(alpha)
        target = resolve_target(model_uri, model_url=model_url, recipe_file=recipe_file, transform=transform)
        log_batch(
            tags={"mlflow.runName": f"audit {name} {method} {target.label}"},
            params={
                keys.PARAM_METHOD: method,
                keys.PARAM_TEST: test,
                keys.PARAM_ALPHA: alpha,
                keys.PARAM_QUERY: name,
                keys.PARAM_K: k,
                keys.PARAM_CAL_SEED: cal_seed,
                keys.PARAM_CORRUPTION: corruption,
                keys.PARAM_MODEL_URI: target.model_uri or "",
                keys.PARAM_MODEL_URL: target.model_url or "",
                keys.PARAM_MODEL_NAME: target.version.name if target.version else "",
                keys.PARAM_MODEL_VERSION: target.version.version if target.version else "",
                keys.PARAM_THRESHOLD_MODE: threshold_mode,
                keys.PARAM_OUTPUTS: outputs,
            },
        )
        data = target.query_set(query=query, query_file=query_file)
        mlflow.log_param(keys.PARAM_QUERY_FINGERPRINT, data.fingerprint)
        log_dataset(data, name=f"query {name}", context="query")
        oracle = oracle or target.oracle(outputs=outputs)
        request = AuditRequest(
            target,
            data,
            oracle,
            alpha,
            test,
            k,
            cal_seed,
            threshold_mode,
            calibration_name,
            calibration,
            reference_file,
            progress,
            corruption,
        )
        predictions = oracle.predict(data.x)
        results, tags = {}, {}
        for name_of_method in METHOD_PLANS[method]:
            results[name_of_method], method_tags = RUNNERS[name_of_method](request, predictions)
            tags.update(method_tags)
        primary = results[METHOD_PLANS[method][0]]
        expected = EXPECTED_VERDICTS.get(query) if query is not None else None
        log_batch(
            metrics=merged_metrics(results),
            tags={
                **tags,
                keys.TAG_VERDICT: primary.verdict,
                **{f"{keys.TAG_VERDICT}.{m}": r.verdict for m, r in results.items()},
                keys.TAG_ACCESS: predictions.access,
                keys.TAG_OUTPUTS_DETECTED: predictions.detected,
                **({keys.TAG_EXPECTED_VERDICT: expected} if expected else {}),
            },
        )
        log_artifacts_atomically(
            {
                keys.ARTIFACT_THRESHOLDS: {m: r.thresholds for m, r in results.items()},
                keys.ARTIFACT_MEMBERSHIP: membership_table(data, results),
            }
        )
    if tag_version and target.version is not None:
        record = audit_record(name, data, primary, run.info.run_id)
        query_key = query if query is not None else f"file-{data.fingerprint}"
        set_version_tags(target.version, {f"{keys.TAG_AUDIT_PREFIX}{query_key}": record, keys.TAG_LAST_AUDIT: record})
    return AuditOutcome(run.info.run_id, name, primary, expected, predictions.access, results)


def merged_metrics(results: dict[str, AuditResult]) -> dict[str, float]:
    """All methods' metrics in one dict; on a shared key (flag_rate, n_query) the first method wins."""
    merged: dict[str, float] = {}
    for result in results.values():
        merged.update({k: v for k, v in result.metrics.items() if k not in merged and np.isfinite(v)})
    return merged
