"""An audit run's ``report.html`` and ``figures/``: what the workflow knows, handed to :mod:`ema.reports`.

The audit workflow calls :func:`report_artifacts` once, with the artifacts it logs last;
this module builds the report's inputs from what the workflow already holds (the config,
the resolved target, the query data, the tags the auditors produced, the method table's metric
vocabulary) and draws nothing itself.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import TYPE_CHECKING

import numpy as np

from ema.auditors.result import AuditResult
from ema.data.corruption import corruption_as_applied
from ema.errors import InputError
from ema.reports.audit import render_audit_report
from ema.signals import SIGNALS, compute_scores
from ema.tracking import keys
from ema.validation import redact_url
from ema.workflows.audit_config import absolute_path
from ema.workflows.methods import metric_vocabulary

if TYPE_CHECKING:
    from ema.workflows.audit_config import AuditConfig
    from ema.workflows.audit_session import AuditSession
    from ema.workflows.target import Target

#: AuditConfig field -> the `ema audit` option that sets it (fields with a value of their own are below).
CLI_FLAGS = {
    "model_uri": "--model",
    "model_url": "--model-url",
    "query": "--query",
    "query_file": "--query-file",
    "query_table": "--query-table",
    "method": "--method",
    "test": "--test",
    "alpha": "--alpha",
    "threshold_mode": "--threshold-mode",
    "k": "--k",
    "cal_seed": "--cal-seed",
    "calibration_name": "--calibration-name",
    "outputs": "--outputs",
    "output_name": "--output-name",
    "calibration_outputs": "--calibration-outputs",
    "recipe_file": "--recipe",
    "reference_file": "--reference",
    "members_file": "--members",
    "augment": "--augment",
    "margin": "--margin",
    "certify_level": "--certify-level",
    "timeout": "--timeout",
    "request_timeout": "--request-timeout",
    "http_concurrency": "--http-concurrency",
    "http_format": "--http-format",
    "input_dtype": "--input-dtype",
    "engine": "--engine",
    "spark_master": "--spark-master",
    "membership_out": "--membership-out",
    "label_column": "--label-column",
    "calibration_file": "--calibration-file",
    "image_size": "--image-size",
    "pixel_order": "--pixel-order",
    "device": "--device",
    "mark_key": "--mark-key",
    "queries": "--queries",
}
#: AuditConfig fields that name files: written absolute, so that the command runs from any folder.
FILE_FIELDS = (
    "query_file",
    "query_table",
    "calibration_file",
    "recipe_file",
    "reference_file",
    "members_file",
    "mark_key",
    "membership_out",
)
#: AuditConfig fields the report says in words, not in its command.
NOT_OPTIONS = ("query_file_temporary",)
#: What the report says before its command when the query file was a temporary copy (the evaluator's DataFrame).
TEMPORARY_QUERY = (
    "The audited data was a DataFrame given to mlflow.models.evaluate, written for this audit to a temporary "
    "query file that was deleted after it: no command reruns this audit as it is. To rerun it, give the evaluator "
    "config key query_file (a path where the evaluator keeps the table); the command below then reads that file. "
    "The command as it would read:"
)
#: Always written, even at their defaults: what was audited, on what, how (``ema audit``'s default device,
#: ``auto``, is not the library's, ``cpu``).
ALWAYS = ("model_uri", "model_url", "query", "query_file", "query_table", "method", "device")


def reproduce_command(config: AuditConfig) -> str:
    """The ``ema audit`` command line that asks for the same audit: the target, the query, the method, and
    every option that differs from its default. Files given by relative paths are written absolute
    (:func:`~ema.workflows.audit_config.absolute_path`), as the run's params record them, so that
    the command runs from any folder.

    An option `ema audit` does not offer (``corruption``, set by grids) is appended as a
    shell comment, so the line stays runnable and says what it cannot set. Secrets in URLs
    are shown as ``***`` (:func:`ema.validation.redact_url`): the reader puts their own back.
    """
    words = ["ema", "audit"]
    unset = []
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if value is None or field.name in NOT_OPTIONS or (field.name not in ALWAYS and value == field.default):
            continue
        if field.name in FILE_FIELDS:
            value = absolute_path(value)
        if field.name == "strict":
            words.append("--strict")
        elif field.name == "figures":
            words.append("--no-figures")
        elif field.name == "allow_missing":
            words.append("--allow-missing")
        elif field.name in CLI_FLAGS:
            words += [CLI_FLAGS[field.name], redact_url(str(value))]
        elif field.name == "transform":
            words += value.as_options()
        elif field.name == "input_shape":
            words += ["--input-shape", ",".join(map(str, value[1:]))]
        elif field.name == "calibration":
            words += [
                "--calibration-model",
                value.model_uri,
                "--calibration-members",
                absolute_path(value.members_file),
                "--calibration-nonmembers",
                absolute_path(value.nonmembers_file),
            ]
        else:
            unset.append(f"{field.name}={value}")
    line = shlex.join(words)
    return f"{line}  # not an ema audit option: {', '.join(unset)}" if unset else line


def _corruption(config: AuditConfig, target: Target) -> str:
    """The calibration's corruption as it acts: a table's rows get noise only, whatever the protocol's name."""
    data = target.calibration_data
    applied = corruption_as_applied(config.corruption, data.kind) if data is not None else config.corruption
    return (
        config.corruption
        if applied == config.corruption
        else f"{applied} ({config.corruption}; a table has no rotation)"
    )


def audit_lineage(
    config: AuditConfig,
    target: Target,
    n_query: int,
    fingerprint: str,
    tags: dict[str, str],
    run_id: str,
    missing: dict[str, int] | None = None,
) -> dict[str, object]:
    """Where the audit's inputs came from, as label -> value (None: not known for this target); ``missing``: the
    missing cells of each set read (:meth:`~ema.workflows.audit_session.Scored.missing_cells`)."""
    version = target.version
    version_tags = version.tags if version else {}
    supplied = config.calibration is not None
    return {
        "Model": target.label,
        "Model URI (version pinned)": _shown(target.model_uri),
        "Model URI as given": _shown(config.model_uri) if config.model_uri != target.model_uri else None,
        "Scoring server": _shown(target.model_url),
        "Registered model": version.name if version else None,
        "Model version": version.version if version else None,
        "Run that trained the model": version.run_id if version else None,
        "Training data": version_tags.get(keys.TAG_DATA_SOURCE),
        "Training data fingerprint": version_tags.get(keys.TAG_DATA_FINGERPRINT),
        # a query file calibrated on the auditor's own file uses no split: naming the default one would mislead
        "Splits (named queries, calibration set)": f"{target.data}, data seed {target.data_seed}"
        if config.query is not None or target.calibration_data is None
        else None,
        "Query set": f"{config.query_name} ({n_query} samples)",
        "Query fingerprint": fingerprint,
        "Missing cells": missing_words(missing or {}) if config.allow_missing else None,
        "Engine": config.engine,
        "Membership table": tags.get(keys.TAG_MEMBERSHIP_URI),
        "Calibration version": tags.get(keys.TAG_CALIBRATION_VERSION),
        "Calibration cache": tags.get(keys.TAG_CACHE),
        "Calibration plan": None
        if supplied
        else f"k={config.k}, cal_seed={config.cal_seed}, corruption={_corruption(config, target)}",
        "Member reference": tags.get(keys.TAG_MEMBER_REFERENCE),
        "Non-member reference": tags.get(keys.TAG_NONMEMBER_REFERENCE) or tags.get(keys.TAG_REFERENCE),
        "Strict mode": tags.get(keys.TAG_STRICT),
        "KS-ratio models": tags.get(keys.TAG_KS_RATIO_CACHE),
        "Audit run": run_id,
    }


def missing_words(missing: dict[str, int]) -> str:
    """The missing cells of each set read, with ``--allow-missing``, as the report says them."""
    counts = ", ".join(f"{name} {n}" for name, n in missing.items()) or "no set counted here"
    total = sum(missing.values())
    if not total:
        return f"none ({counts}); --allow-missing was given"
    return f"{total} ({counts}): sent to the model as NaN (--allow-missing), nothing filled in"


def _shown(uri: str | None) -> str | None:
    """A URI or URL as the report shows it: without its secrets."""
    return redact_url(uri) if uri is not None else None


def reference_scores(session: AuditSession, results: dict[str, AuditResult]) -> dict[str, dict[str, np.ndarray]]:
    """The signals of the member and non-member references, for the report's pictures.

    Only references this audit already scored through the target (for the gates or an
    auditor) are used: the report never queries the model. Scores that are not signals
    (the KS ratio's distances) have no reference.
    """
    names = sorted({name for result in results.values() for name in result.scores if name in SIGNALS})
    found = {}
    for label, attribute, reference in (
        ("members (reference)", "member_proba", "members"),
        ("non-members (reference)", "nonmember_proba", "nonmembers"),
    ):
        proba = session.__dict__.get(attribute)  # scored already (a cached property), or not at all
        if proba is None or not names:
            continue
        try:
            found[label] = compute_scores(proba, getattr(session, reference).data.y, names)
        except InputError:
            continue  # e.g. a label-only model's outputs: the report shows the query alone
    return found


def report_artifacts(
    session: AuditSession,
    results: dict[str, AuditResult],
    tags: dict[str, str],
    warnings: list[str],
    run_id: str,
    fingerprint: str,
    missing: dict[str, int],
    *,
    device: str | None = None,
) -> dict[str, str | bytes]:
    """``report.html`` and its figures (``figures/<method>_scores.svg``, ``figures/attack_roc.svg``), as artifacts.

    ``results`` in the audit's order: the first method's verdict is the run's. ``warnings``:
    every warning of the audit (the gates' and the auditors'). ``fingerprint``: the query's, as
    the run records it. ``missing``: the missing cells of each set read
    (:meth:`~ema.workflows.audit_session.Scored.missing_cells`). The command pins the model
    version the alias pointed to, so that it audits the same model later, and says ``device``
    as it was asked (``auto``; default: the session's, resolved): the device resolved here would
    pin a rerun on a GPU machine to the CPU.
    A method whose query scores stayed on Spark's executors gets no figure; with
    ``config.figures`` False none is drawn.
    """
    config, target = session.config, session.target
    pinned = dataclasses.replace(config, model_uri=target.model_uri or config.model_uri, device=device or config.device)
    n_query = next(iter(results.values())).n_query
    report = render_audit_report(
        results,
        query=config.query_name,
        lineage=audit_lineage(config, target, n_query, fingerprint, tags, run_id, missing),
        command=reproduce_command(pinned),
        command_note=TEMPORARY_QUERY if config.query_file_temporary else None,
        references=reference_scores(session, results) if config.figures else None,
        warnings=warnings,
        title=f"Audit of {config.query_name} on {target.label}",
        draw_figures=config.figures,
        vocabulary=metric_vocabulary(),
        query_kind=session.data.kind if session.data is not None else None,  # on Spark the rows stay in the executors
    )
    figures = {f"{keys.ARTIFACT_FIGURES_DIR}/{name}": png for name, png in report.figures.items()}
    return {keys.ARTIFACT_REPORT: report.html, **figures}
