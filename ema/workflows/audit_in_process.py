"""The in-process engine (the default): the query is read, scored through the oracle and audited in this process.

Every method runs here: each runner of the method table gets the query's predictions
(:func:`run_methods`), and the per-sample membership table is logged as ``membership.csv``.
A row of the engine table (:mod:`ema.workflows.engines`); it takes every option of an audit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd

from ema.auditors.result import AuditResult
from ema.data.arrays import ArraySet, check_has_classes, check_within_classes, in_query_layout
from ema.inputs import InputSpec, align_columns, listed_names, numeric_columns
from ema.limits import seconds_left
from ema.oracle import ACCESS_PROBABILITIES, Oracle, Predictions
from ema.tracking import keys
from ema.tracking.runs import log_batch, log_dataset
from ema.workflows.audit_config import AuditConfig
from ema.workflows.audit_session import AuditSession, Scored, found_target, log_audit_params, read_calibration_file
from ema.workflows.methods import check_access, method_plan, method_spec
from ema.workflows.references import scored


@contextmanager
def score_in_process(config: AuditConfig, oracle: Oracle | None, progress: bool) -> Iterator[Scored]:
    """Find the target, log the run's params, read and record the query data, score it here and audit it."""
    target = found_target(config)
    log_audit_params(config, target)  # before the query is read: a refused query's run is found by its model
    data = target.query_set(
        query=config.query,
        query_file=config.query_file,
        query_table=config.query_table,
        max_images=config.max_query,
        label_column=config.label_column,
    )
    target = read_calibration_file(config, target)  # after the query, which is what is audited: its refusal first
    if config.query_limit is not None:
        data = data.take(np.arange(min(config.query_limit, len(data))))
    log_batch(params={keys.PARAM_QUERY_FINGERPRINT: data.fingerprint, **config.query_params(target, data.kind)})
    log_dataset(data, name=f"query {config.query_name}", context="query")
    oracle = oracle or target.oracle(
        outputs=config.outputs,
        output_name=config.output_name,
        timeout=seconds_left(config.timeout),
        request_timeout=config.request_timeout,
        http_concurrency=config.http_concurrency,
        http_format=config.http_format,
    )
    session = AuditSession(config, target, data, oracle.with_progress(progress), progress)
    session.check_augment()
    # refuses a query the model's signature does not take, first, then one of labels the model has no class of
    predictions = scored(session.oracle, data, role="query file" if config.query_file else "query")
    session = dataclasses.replace(session, data=in_model_columns(data, session.oracle.input_spec))
    if target.calibration_data is not None:
        session = with_calibration_file(session, predictions)
    results, tags = run_methods(session, predictions)
    yield Scored(
        session,
        results,
        tags,
        predictions.access,
        predictions.detected,
        data.fingerprint,
        {keys.ARTIFACT_MEMBERSHIP: membership_table(data, results)},
        int((predictions.proba.argmax(axis=1) == data.y).sum()),
    )


def in_model_columns(data: ArraySet, spec: InputSpec) -> ArraySet:
    """A table with only the columns the model's signature names, in its order (without its text columns where the
    signature names none: such a model takes numbers); anything else as it is.

    The columns it leaves out (an ID, a ward) were logged when the query was scored. Every file laid
    out like the query (calibration, members, non-members) then needs only the model's columns,
    and the calibration clone trains on the features the target takes, not on the file's others.
    """
    if data.kind != "table":
        return data
    if spec.columns is None:
        x, kept, left_out = numeric_columns(data.x, data.features, where=data.name, taker="the model")
        return ArraySet(data.name, x, data.y, data.index, kept) if left_out else data
    x, _ = align_columns(data.x, data.features, spec, where=data.where)
    return ArraySet(data.name, x, data.y, data.index, tuple(spec.columns))


def with_calibration_file(session: AuditSession, predictions: Predictions) -> AuditSession:
    """``session`` with its target's calibration file in the query's layout, refused before any calibration model is
    trained (and registered) when it lacks one of the classes the model output on the query, or has others.
    """
    calibration = in_query_layout(session.target.calibration_data, session.data, role="calibration file")
    n_classes, role = predictions.proba.shape[1], "calibration file"
    if predictions.access == ACCESS_PROBABILITIES:
        check_within_classes(calibration, n_classes, role=role)
        of_what = f"the model's {n_classes} classes (0..{n_classes - 1})"
        check_has_classes(calibration, np.arange(n_classes), role=role, of_what=of_what)
    else:  # a label-only model's classes are those it answered, whatever their numbers
        answered = np.flatnonzero(predictions.proba.any(axis=0))
        of_what = f"the {answered.size} classes the model answered on the query ({listed_names(answered.tolist())})"
        check_has_classes(calibration, answered, role=role, of_what=of_what)
    return dataclasses.replace(session, target=dataclasses.replace(session.target, calibration_data=calibration))


def run_methods(session: AuditSession, predictions: Predictions) -> tuple[dict[str, AuditResult], dict[str, str]]:
    """Every auditor the method asks for, in order; their results and the tags they produced.

    Refused before any runs when one of them needs what the model does not return.
    """
    check_access(session.config.method, predictions.access)
    results, tags = {}, {}
    for method in method_plan(session.config.method):
        results[method], method_tags = method_spec(method).runner(session, predictions)
        tags.update(method_tags)
    return results, tags


def membership_table(query: ArraySet, results: dict[str, AuditResult]) -> pd.DataFrame:
    """One row per query sample: index, label, then each method's metrics, flags and M (prefixed after the first)."""
    columns = {"index": query.index, "label": query.y}
    for position, (method, result) in enumerate(results.items()):
        prefix = "" if position == 0 else f"{method}_"
        columns.update({f"{prefix}{name}": values for name, values in result.sample_columns().items()})
    return pd.DataFrame(columns)
