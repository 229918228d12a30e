"""Audit a query set against a model reached only as a black box."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from ema.auditors.calibrated import CalibratedAuditor
from ema.auditors.ema import EMAAuditor
from ema.auditors.ks_ratio import KSRatioAuditor
from ema.auditors.result import AuditResult
from ema.data.arrays import ArraySet
from ema.data.corruption import CORRUPTIONS, DEFAULT_CORRUPTION, check_quality
from ema.data.files import read_set
from ema.data.splits import EXPECTED_VERDICTS
from ema.errors import InputError
from ema.inputs import InputTransform
from ema.oracle import (
    ACCESS_LABEL_ONLY,
    ACCESS_PROBABILITIES,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_TIMEOUT,
    OUTPUT_KINDS,
    Oracle,
    Predictions,
    PyfuncOracle,
)
from ema.signals import LABEL_ONLY_SIGNALS, PAPER_SIGNALS
from ema.stats import EMA_TESTS
from ema.thresholds import THRESHOLD_MODES
from ema.tracking import keys
from ema.tracking.registry import RegisteredVersion, set_version_tags
from ema.tracking.runs import log_artifacts_atomically, log_batch, log_dataset, start_run
from ema.validation import check_choice, check_finite, check_model_name, check_open_unit
from ema.workflows.cached_models import cached_model, registered_oracle
from ema.workflows.calibrate import CalibrationPlan, ensure_plan, fit_thresholds
from ema.workflows.target import Target, resolve_target


@dataclass(frozen=True)
class AuditOutcome:
    """An audit run's results, by auditor; the configured method's first auditor gives the verdict."""

    run_id: str
    query: str
    method: str
    expected_verdict: str | None
    access: str
    results: dict[str, AuditResult]

    @property
    def primary(self) -> AuditResult:
        """The result whose verdict is the run's."""
        return self.results[METHOD_PLANS[self.method][0]]


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


def audit_record(query_name: str, query: ArraySet, result: AuditResult, run_id: str, when: time.struct_time) -> str:
    """The audit as a model-version tag value: what was asked, what came out, where to look."""
    return json.dumps(
        {
            "query": query_name,
            "query_fingerprint": query.fingerprint,
            "method": result.method,
            **result.metrics,
            "verdict": result.verdict,
            "run_id": run_id,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", when),
        },
        sort_keys=True,
    )


def record_on_version(config: AuditConfig, outcome: AuditOutcome, data: ArraySet, version: RegisteredVersion) -> None:
    """Add the audit to the version's trail: a tag of its own (never overwriting an earlier audit's), and last_audit.

    The trail tag is ``ema.audit.<query>.<UTC time>.<run id prefix>``, so that audits of the
    same query, even in the same second from two processes, each keep their record.
    """
    when = time.gmtime()
    record = audit_record(outcome.query, data, outcome.primary, outcome.run_id, when)
    query_key = config.query if config.query is not None else f"file-{data.fingerprint}"
    trail_key = f"{keys.TAG_AUDIT_PREFIX}{query_key}.{time.strftime('%Y%m%dT%H%M%SZ', when)}.{outcome.run_id[:8]}"
    set_version_tags(version, {trail_key: record, keys.TAG_LAST_AUDIT: record})


@dataclass(frozen=True, kw_only=True)
class AuditConfig:
    """What an audit is asked to do: built once (by the CLI, a grid or a caller), validated, passed down.

    Attributes
    ----------
    model_uri, model_url
        The target: a pyfunc URI (``models:/NAME@ALIAS``, ``runs:/...``, a path) and/or a
        scoring server's ``/invocations`` URL (predictions then come from the server).
    query, query_file
        Exactly one: a named query set of the target's splits, or an ``.npz`` file.
    method, test, alpha, threshold_mode
        Which auditors run (:data:`METHODS`), EMA's test, the significance level and the
        threshold granularity.
    k, cal_seed, corruption, calibration_name
        The calibration plan: quality k, seed, corruption protocol, registered name.
    outputs, recipe_file, transform
        What the model returns, how the calibration model is trained, how inputs are scaled.
    calibration, reference_file
        An already-trained calibration model; the calibrated auditor's reference non-members.
    timeout, request_timeout
        Over HTTP: seconds the whole scoring, and one request, may take (wall time).
    """

    model_uri: str | None = None
    model_url: str | None = None
    query: str | None = None
    query_file: str | None = None
    method: str = "ema"
    test: str = "t"
    alpha: float = 0.1
    threshold_mode: str = "global"
    k: int = 100
    cal_seed: int = 0
    corruption: str = DEFAULT_CORRUPTION
    calibration_name: str = keys.CALIBRATION_MODEL_NAME
    outputs: str = "auto"
    recipe_file: str | None = None
    transform: InputTransform | None = None
    calibration: SuppliedCalibration | None = None
    reference_file: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT

    @property
    def query_name(self) -> str:
        """The name runs and records use: the named set, or the query file's name."""
        return self.query if self.query is not None else Path(self.query_file).name

    def validate(self) -> AuditConfig:
        """Check every option before any work; returns ``self``."""
        if (self.query is None) == (self.query_file is None):
            raise InputError(
                f"expected exactly one of a query name or a query file, got query={self.query!r}, "
                f"query_file={self.query_file!r}"
            )
        if self.model_uri is None and self.model_url is None:
            raise InputError(
                "expected a model: a pyfunc URI (--model) or a scoring server URL (--model-url), got neither"
            )
        check_choice("method", self.method, METHODS)
        check_choice("test", self.test, EMA_TESTS)
        check_choice("threshold_mode", self.threshold_mode, THRESHOLD_MODES)
        check_choice("outputs", self.outputs, OUTPUT_KINDS)
        check_choice("corruption", self.corruption, tuple(CORRUPTIONS))
        check_open_unit("alpha", self.alpha)
        check_quality(self.k)
        check_model_name("calibration name", self.calibration_name)
        check_finite("timeout", self.timeout, minimum=0.0, open_minimum=True)
        check_finite("request timeout", self.request_timeout, minimum=0.0, open_minimum=True)
        return self

    def params(self, target: Target) -> dict[str, object]:
        """The run's params: the options, and the target as resolved."""
        return {
            keys.PARAM_METHOD: self.method,
            keys.PARAM_TEST: self.test,
            keys.PARAM_ALPHA: self.alpha,
            keys.PARAM_QUERY: self.query_name,
            keys.PARAM_K: self.k,
            keys.PARAM_CAL_SEED: self.cal_seed,
            keys.PARAM_CORRUPTION: self.corruption,
            keys.PARAM_MODEL_URI: target.model_uri or "",
            keys.PARAM_MODEL_URL: target.model_url or "",
            keys.PARAM_MODEL_NAME: target.version.name if target.version else "",
            keys.PARAM_MODEL_VERSION: target.version.version if target.version else "",
            keys.PARAM_THRESHOLD_MODE: self.threshold_mode,
            keys.PARAM_OUTPUTS: self.outputs,
        }


@dataclass(frozen=True)
class AuditRequest:
    """One audit's configuration with what it resolved to: the target, the query data, the oracle."""

    config: AuditConfig
    target: Target
    data: ArraySet
    oracle: Oracle
    progress: bool

    @cached_property
    def calibration_plan(self) -> CalibrationPlan:
        """Made once per audit: every method of the audit shares it."""
        return CalibrationPlan.for_target(
            self.target,
            k=self.config.k,
            cal_seed=self.config.cal_seed,
            model_name=self.config.calibration_name,
            corruption=self.config.corruption,
        )

    def thresholds(self) -> tuple[dict, dict[str, str]]:
        """EMA's thresholds and the tags saying where they came from."""
        supplied = self.config.calibration
        if supplied is not None:
            return supplied.thresholds(self.target.recipe.transform), {
                keys.TAG_CACHE: "supplied",
                keys.TAG_CALIBRATION_VERSION: supplied.model_uri,
            }
        outcome = ensure_plan(self.calibration_plan, progress=self.progress)
        return outcome.thresholds, {
            keys.TAG_CACHE: outcome.cache,
            keys.TAG_CALIBRATION_VERSION: outcome.version.uri,
        }


def run_ema(request: AuditRequest, predictions: Predictions) -> tuple[AuditResult, dict[str, str]]:
    """The paper's auditor; correctness alone when the model returns labels only."""
    thresholds, tags = request.thresholds()
    predictions = predictions.with_classes(int(thresholds["n_classes"]))
    signals = LABEL_ONLY_SIGNALS if predictions.access == ACCESS_LABEL_ONLY else PAPER_SIGNALS
    config = request.config
    auditor = EMAAuditor.from_dict(
        thresholds, signals=signals, threshold_mode=config.threshold_mode, test=config.test, alpha=config.alpha
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
        keys.TAG_KS_RATIO_CACHE: f"query-model {'hit' if query_cached else 'miss'}, calset-model "
        f"{'hit' if calset_cached else 'miss'}"
    }
    return auditor.audit(predictions.proba, request.data.y), tags


def run_calibrated(request: AuditRequest, predictions: Predictions) -> tuple[AuditResult, dict[str, str]]:
    """The calibrated auditor: reference non-members scored on the target, member behaviour from f_cal."""
    _require_probabilities("calibrated", predictions)
    auditor, tags = fit_calibrated(
        request.target,
        request.oracle,
        request.calibration_plan,
        alpha=request.config.alpha,
        threshold_mode=request.config.threshold_mode,
        reference_file=request.config.reference_file,
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
        keys.TAG_CACHE: outcome.cache,
        keys.TAG_CALIBRATION_VERSION: outcome.version.uri,
        keys.TAG_REFERENCE: reference_file or "calibration set (clean), scored on the target",
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
    config: AuditConfig, *, oracle: Oracle | None = None, tag_version: bool = True, progress: bool = True
) -> AuditOutcome:
    """Query the target through its oracle, run the configured auditors, and log their metrics and verdict.

    Every check runs inside the audit run, so bad input leaves a FAILED run and no
    artifacts; artifacts are logged last, after every number is computed. A registered
    target's version is tagged with the audit afterwards (its audit history), unless
    ``tag_version`` is False (a grid records itself on the version once, for all its cells).
    ``oracle`` replaces the target's own (a grid scores every cell through one).
    """
    with start_run(f"audit {config.method}", tags={keys.TAG_RUN_KIND: keys.RUN_KIND_AUDIT}) as run:
        config.validate()
        request = _resolve(config, oracle, progress)
        target, data = request.target, request.data
        predictions = request.oracle.predict(data.x)
        results, tags = _run_methods(request, predictions)
        _log_results(config, results, tags, predictions)
        log_artifacts_atomically(
            {
                keys.ARTIFACT_CALIBRATION: {m: r.thresholds for m, r in results.items()},
                keys.ARTIFACT_MEMBERSHIP: membership_table(data, results),
            }
        )
    outcome = AuditOutcome(
        run.info.run_id, config.query_name, config.method, expected_verdict(config), predictions.access, results
    )
    if tag_version and target.version is not None:
        record_on_version(config, outcome, data, target.version)
    return outcome


def _resolve(config: AuditConfig, oracle: Oracle | None, progress: bool) -> AuditRequest:
    """Find the target, log the run's params, read and record the query data."""
    target = resolve_target(
        config.model_uri, model_url=config.model_url, recipe_file=config.recipe_file, transform=config.transform
    )
    data = target.query_set(query=config.query, query_file=config.query_file)
    log_batch(
        tags={keys.TAG_RUN_NAME: f"audit {config.query_name} {config.method} {target.label}"},
        params={**config.params(target), keys.PARAM_QUERY_FINGERPRINT: data.fingerprint},
    )
    log_dataset(data, name=f"query {config.query_name}", context="query")
    oracle = oracle or target.oracle(
        outputs=config.outputs, timeout=config.timeout, request_timeout=config.request_timeout
    )
    return AuditRequest(config, target, data, oracle, progress)


def _run_methods(request: AuditRequest, predictions: Predictions) -> tuple[dict[str, AuditResult], dict[str, str]]:
    """Every auditor the method asks for, in order; their results and the tags they produced."""
    results, tags = {}, {}
    for method in METHOD_PLANS[request.config.method]:
        results[method], method_tags = RUNNERS[method](request, predictions)
        tags.update(method_tags)
    return results, tags


def _log_results(
    config: AuditConfig, results: dict[str, AuditResult], tags: dict[str, str], predictions: Predictions
) -> None:
    primary = results[METHOD_PLANS[config.method][0]]
    expected = expected_verdict(config)
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


def expected_verdict(config: AuditConfig) -> str | None:
    """What a correct auditor says about a named query set of our splits (None for files)."""
    return EXPECTED_VERDICTS.get(config.query) if config.query is not None else None


def merged_metrics(results: dict[str, AuditResult]) -> dict[str, float]:
    """All methods' metrics in one dict; on a shared key (flag_rate, n_query) the first method wins."""
    merged: dict[str, float] = {}
    for result in results.values():
        merged.update({k: v for k, v in result.metrics.items() if k not in merged and np.isfinite(v)})
    return merged
