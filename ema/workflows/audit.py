"""Audit a query set against a model reached only as a black box: one run, its metrics, tags and artifacts.

``AuditConfig`` and ``SuppliedCalibration`` are defined in :mod:`ema.workflows.audit_config`,
the methods (names, plans, runners, metrics) in the method table :mod:`ema.workflows.methods`;
they are re-exported here, the audit's public face. Where the query is scored is a row of the
engine table :mod:`ema.workflows.engines`, picked by ``config.engine``.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ema.auditors.result import INCONCLUSIVE, NOT_MEMORIZED, VERDICT_CODES, AuditResult
from ema.data.splits import EXPECTED_VERDICTS
from ema.limits import check_deadline
from ema.oracle import Oracle
from ema.run_warnings import gather_run_warnings
from ema.tracking import keys
from ema.tracking.registry import audited_model_tag
from ema.tracking.runs import log_artifacts_atomically, log_batch, start_run
from ema.workflows.audit_config import AuditConfig, SuppliedCalibration
from ema.workflows.audit_gates import check_gates
from ema.workflows.audit_methods import fit_calibrated
from ema.workflows.audit_session import Scored
from ema.workflows.audit_trail import record_on_version, trail_options
from ema.workflows.engines import engine_row
from ema.workflows.methods import METHODS, method_plan
from ema.workflows.references import is_forget_set
from ema.workflows.reporting import report_artifacts
from ema.workflows.target import Target

#: Why an audit whose inputs surely do not reach the model as in training says ``inconclusive`` (its tag says which).
WITHHELD = "(verdict withheld: the inputs do not reach the model as its training data did; see ema.verdict_withheld)"


@dataclass(frozen=True)
class AuditOutcome:
    """An audit run's results, by auditor; the configured method's first auditor gives the verdict."""

    run_id: str
    query: str
    method: str
    expected_verdict: str | None
    access: str
    results: dict[str, AuditResult]
    warnings: tuple[str, ...] = ()
    #: The warnings for which every verdict was withheld (``inconclusive``); empty when none was.
    withheld: tuple[str, ...] = ()

    @property
    def primary(self) -> AuditResult:
        """The result whose verdict is the run's."""
        return self.results[method_plan(self.method)[0]]


def audit(
    config: AuditConfig, *, oracle: Oracle | None = None, tag_version: bool = True, progress: bool = True
) -> AuditOutcome:
    """Query the target through its oracle, run the configured auditors, and log their metrics and verdict.

    The options are checked before the run starts: a refused option leaves no run. Every check of
    the model and the data runs inside the audit run, so bad input there leaves a FAILED run (named,
    with its params, once the target is found) and no artifacts; artifacts are logged last, after
    every number is computed. A registered target's version is tagged with the audit afterwards
    (its audit history), unless ``tag_version`` is False (a grid records itself on the version
    once, for all its cells).
    ``oracle`` replaces the target's own (a grid scores every cell through one).
    ``config.engine`` names the row of the engine table (:mod:`ema.workflows.engines`) that
    scores the query: in this process, or on Spark; the run's metrics, tags and verdict are the same.
    ``config.device`` is resolved before the run starts: a device this machine lacks leaves no run.
    """
    asked_device = config.device  # the report's command repeats it: auto reruns on a GPU where there is one
    config = config.resolved_device().validate()
    if oracle is not None:
        oracle.forget_warnings()  # shared by a grid's cells: each cell's record holds what its own scoring found
    tags = {
        keys.TAG_RUN_KIND: keys.RUN_KIND_AUDIT,
        keys.TAG_ENGINE: config.engine,
        **audited_model_tag(config.model_uri),
    }
    with start_run(f"audit {config.method}", tags=tags) as run:
        score = engine_row(config.engine).score
        with gather_run_warnings() as logged, score(config, oracle, progress) as scored:
            session, results, tags = scored.session, scored.results, dict(scored.tags)
            expected = expected_verdict(
                config, session.target, scored.fingerprint if session.data is not None else None
            )
            gates = check_gates(session, results, scored.query_correct)
            warnings = gates.warnings + [message for message in logged if message not in gates.warnings]
            if gates.withheld:
                tags[keys.TAG_WITHHELD] = "; ".join(gates.withheld)
                results = _inconclusive(results, method_plan(config.method), WITHHELD, "as computed")
            elif config.strict and warnings:
                tags[keys.TAG_STRICT] = f"{len(warnings)} warning(s): the verdict is inconclusive"
                because = f"under --strict ({tags[keys.TAG_STRICT]})"
                results = _inconclusive(results, method_plan(config.method)[:1], because, "without --strict")
            tags[keys.TAG_WARNINGS] = json.dumps(warnings)
            missing = scored.missing_cells()
            if config.allow_missing:
                log_batch(params={f"{keys.PARAM_MISSING_CELLS_PREFIX}{name}": n for name, n in missing.items()})
            options = trail_options(config, session, tags, results)
            report = report_artifacts(
                session, results, tags, warnings, run.info.run_id, scored.fingerprint, missing, device=asked_device
            )
            check_deadline("write the audit's results")
            log_artifacts_atomically(
                {
                    keys.ARTIFACT_CALIBRATION: {m: r.thresholds for m, r in results.items()},
                    **scored.membership,
                    **report,
                }
            )
            # the verdict last: a run stopped before it (a signal, a full disk) is FAILED and states none
            _log_results(config, results, tags, scored, expected)
    outcome = AuditOutcome(
        run.info.run_id,
        config.query_name,
        config.method,
        expected,
        scored.access,
        results,
        tuple(warnings),
        tuple(gates.withheld),
    )
    if tag_version and session.target.version is not None:
        record_on_version(config, outcome, scored.fingerprint, session.target.version, options)
    return outcome


def _log_results(
    config: AuditConfig, results: dict[str, AuditResult], tags: dict[str, str], scored: Scored, expected: str | None
) -> None:
    first = method_plan(config.method)[0]
    primary = results[first]
    log_batch(
        metrics={**merged_metrics(results), **verdict_codes(results, first)},
        tags={
            **tags,
            keys.TAG_VERDICT: primary.verdict,
            keys.TAG_METHODS: ",".join(results),
            **{f"{keys.TAG_VERDICT}.{m}": r.verdict for m, r in results.items()},
            keys.TAG_ACCESS: scored.access,
            keys.TAG_OUTPUTS_DETECTED: scored.detected,
            **({keys.TAG_EXPECTED_VERDICT: expected} if expected else {}),
        },
    )


def verdict_codes(results: dict[str, AuditResult], primary: str) -> dict[str, float]:
    """The verdicts as metrics (``ema.auditors.result.VERDICT_CODES``): the run's as ``verdict_code``, each
    method's as ``verdict_code.<method>``, so that the MLflow UI's compare page plots and tabulates them.
    """
    return {
        keys.METRIC_VERDICT_CODE: VERDICT_CODES[results[primary].verdict],
        **{f"{keys.METRIC_VERDICT_CODE}.{m}": VERDICT_CODES[r.verdict] for m, r in results.items()},
    }


def _inconclusive(
    results: dict[str, AuditResult], methods: tuple[str, ...], because: str, otherwise: str
) -> dict[str, AuditResult]:
    """``results`` with the verdicts of ``methods`` set to inconclusive, ``because`` (words).

    Each evidence sentence says so first, then what it said ``otherwise``: "certified: ..." under an
    inconclusive verdict would read as a certificate.
    """
    changed = dict(results)
    for method in methods:
        result = results[method]
        thresholds = result.thresholds
        if "evidence" in thresholds:
            thresholds = {**thresholds, "evidence": f"inconclusive {because}; {otherwise}: {thresholds['evidence']}"}
        changed[method] = dataclasses.replace(result, verdict=INCONCLUSIVE, thresholds=thresholds)
    return changed


def expected_verdict(config: AuditConfig, target: Target, fingerprint: str | None) -> str | None:
    """What a correct auditor says about a named query set of our splits (None for files).

    The forget set of an unlearned version should read as removed, whatever its name, known by the
    ``fingerprint`` of the query as read (a table with every column of its file, before the model's
    were picked out; None: a Spark table this process never holds, known by its name only).
    """
    if fingerprint is not None and is_forget_set(target, fingerprint):
        return NOT_MEMORIZED
    return EXPECTED_VERDICTS.get(config.query) if config.query is not None else None


def merged_metrics(results: dict[str, AuditResult]) -> dict[str, float]:
    """All methods' finite metrics in one dict, a number two methods share kept apart by method.

    A key of :data:`~ema.tracking.keys.METRICS_PER_METHOD` (``flag_rate``, ``n_query``), or any key two methods of
    the run log, is written for every method that logs it as ``<key>.<method>`` (``flag_rate.ema``,
    ``flag_rate.calibrated``), whatever the values, and as ``<key>`` with the first (primary) method's value only:
    EMA's flag rate and the calibrated auditor's are different numbers, and a compare page lines up keys.
    Any other key holds the value of the one method that logs it.
    """
    finite = {m: {k: v for k, v in r.metrics.items() if np.isfinite(v)} for m, r in results.items()}
    logged_by = Counter(key for metrics in finite.values() for key in metrics)
    primary = next(iter(finite), None)
    merged: dict[str, float] = {}
    for method, metrics in finite.items():
        for key, value in metrics.items():
            if key not in keys.METRICS_PER_METHOD and logged_by[key] == 1:
                merged[key] = value
                continue
            merged[f"{key}.{method}"] = value
            if method == primary:
                merged[key] = value
    return merged


__all__ = [
    "METHODS",
    "AuditConfig",
    "AuditOutcome",
    "SuppliedCalibration",
    "audit",
    "fit_calibrated",
    "merged_metrics",
]
