"""Reading audits back: a model's audit history across runs and versions, and runs side by side."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import socket

import pandas as pd
from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from ema.errors import InputError
from ema.tracking import keys
from ema.tracking.runs import PROJECT_ENTRY_POINT_TAG
from ema.tracking.search import quoted
from ema.tracking.trail import OPTIONS, OPTIONS_WHERE_SET, RETAINED, retained_interval, trail_rows

#: The column of ``ema history --verdict V`` naming the methods of each audit that said V.
SAID_BY = "said_by"
#: The column of ``ema history --all`` saying why a failed audit failed (its run's tag ``ema.error``).
ERROR = "error"
HISTORY_COLUMNS = (
    "started",
    "run_id",
    "version",
    "query",
    "method",
    "rho_ema",
    "rho_ema_ks",
    "verdict",
    SAID_BY,
    "status",
    ERROR,
)
#: The status shown for a RUNNING run whose process, on this host, no longer exists.
STALE = "STALE (process gone)"


def audit_history(
    model_name: str,
    *,
    query: str | None = None,
    verdict: str | None = None,
    include_all: bool = False,
    max_results: int = 1000,
) -> pd.DataFrame:
    """The audit runs of ``model_name`` (all versions, all experiments), newest first.

    Only FINISHED audits unless ``include_all``; then FAILED and RUNNING ones too, a RUNNING
    run whose process is gone marked :data:`STALE`, and the column :data:`ERROR` says why each
    failed one failed. Runs nested in an audit (a calibration it
    trained) are not audits and never listed. ``verdict`` keeps the audits where any method said it,
    not only the first one, whose verdict is the run's (an ``ema+calibrated`` run's is EMA's even where
    the calibrated auditor says ``memorized``): the column ``said_by`` then names the methods that did.
    """
    filters = [f"params.{keys.PARAM_MODEL_NAME} = {quoted('model name', model_name)}"]
    if query is not None:
        filters.append(f"params.{keys.PARAM_QUERY} = {quoted('query', query)}")
    if not include_all:
        filters.append("attributes.status = 'FINISHED'")
    client = MlflowClient()
    experiments = [e.experiment_id for e in client.search_experiments()]
    search = {"order_by": ["attributes.start_time DESC"], "max_results": max_results}
    runs = audit_runs(client, experiments, " and ".join(filters), verdict, max_results)
    if include_all and query is None and verdict is None:  # audits killed before their params were logged
        named = f"tags.`{keys.TAG_AUDITED_MODEL}` = {quoted('model name', model_name)}"
        early = client.search_runs(experiments, filter_string=named, **search)
        early = [r for r in early if not r.data.params and is_audit(r.data.tags)]
        runs = sorted([*runs, *early], key=lambda run: -run.info.start_time)[:max_results]
    rows = [history_row(run, verdict) for run in runs]
    columns = [c for c in HISTORY_COLUMNS if (c != SAID_BY or verdict is not None) and (c != ERROR or include_all)]
    return pd.DataFrame(rows, columns=columns)


def audit_runs(
    client: MlflowClient, experiments: list[str], filter_string: str, verdict: str | None, max_results: int
) -> list[Run]:
    """The newest ``max_results`` audit runs that match ``filter_string`` and, given a ``verdict``, where some method
    said it (:func:`methods_saying`: a search filter cannot OR the tags ``verdict.<method>``), read page by page."""
    found: list[Run] = []
    token = None
    while len(found) < max_results:
        page = client.search_runs(
            experiments,
            filter_string=filter_string,
            order_by=["attributes.start_time DESC"],
            max_results=max_results,
            page_token=token,
        )
        found += [r for r in page if is_audit(r.data.tags) and (verdict is None or methods_saying(r, verdict))]
        token = page.token
        if not token:
            break
    return found[:max_results]


def history_row(run: Run, verdict: str | None) -> dict[str, object]:
    """One audit run as a row of :func:`audit_history`; ``said_by`` where a ``verdict`` was asked for."""
    method = run.data.params.get(keys.PARAM_METHOD, "")
    return {
        "started": dt.datetime.fromtimestamp(run.info.start_time / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "run_id": run.info.run_id,
        "version": run.data.params.get(keys.PARAM_MODEL_VERSION, ""),
        "query": run.data.params.get(keys.PARAM_QUERY, ""),
        "method": method,
        "rho_ema": run.data.metrics.get(keys.METRIC_RHO_EMA, math.nan),
        "rho_ema_ks": run.data.metrics.get(keys.METRIC_RHO_EMA_KS, math.nan),
        "verdict": verdicts_text(run.data.tags, method),
        **({SAID_BY: ", ".join(methods_saying(run, verdict))} if verdict is not None else {}),
        "status": STALE if is_stale(run.info.status, run.data.tags) else run.info.status,
        ERROR: run.data.tags.get(keys.TAG_ERROR),
    }


def methods_saying(run: Run, verdict: str) -> list[str]:
    """The methods of an audit run whose verdict is ``verdict`` (tags ``verdict.<method>``), in its plan's order.

    A run logged before the per-method tags has the first method's as ``verdict``.
    """
    tags = run.data.tags
    methods = run_methods(tags, run.data.params.get(keys.PARAM_METHOD, ""))
    first = {methods[0]: tags.get(keys.TAG_VERDICT)} if methods else {}
    said = {method: tags.get(f"{keys.TAG_VERDICT}.{method}", first.get(method)) for method in methods}
    return [method for method, given in said.items() if given == verdict]


def run_methods(tags: dict[str, str], method: str) -> list[str]:
    """The single methods an audit run ran, in its plan's order (the first one's verdict is the run's).

    Read from the run's tag ``ema.methods``; a run logged before it existed, from its ``method`` param
    (``ema+calibrated``).
    """
    return tags[keys.TAG_METHODS].split(",") if keys.TAG_METHODS in tags else method.split("+")


def verdicts_text(tags: dict[str, str], method: str) -> str:
    """The run's verdict (its first method's), then, for a combination, each other method's in brackets:
    ``memorized (calibrated inconclusive)``, ``memorized (ks-ratio not_memorized)`` for ``both``.
    """
    methods = run_methods(tags, method)
    others = [
        f"{name} {tags[f'{keys.TAG_VERDICT}.{name}']}" for name in methods[1:] if f"{keys.TAG_VERDICT}.{name}" in tags
    ]
    return tags.get(keys.TAG_VERDICT, "") + (f" ({', '.join(others)})" if others else "")


def is_audit(tags: dict[str, str]) -> bool:
    """An audit run: tagged so, or (runs logged before the tag existed) carrying a verdict.

    An evaluation run that mirrors the audit nested under it (tag ``ema.audit_run``) is not one:
    the audit is listed once, as itself.
    """
    if keys.TAG_AUDIT_RUN in tags:
        return False
    default = keys.RUN_KIND_AUDIT if keys.TAG_VERDICT in tags else ""
    return tags.get(keys.TAG_RUN_KIND, default) == keys.RUN_KIND_AUDIT


def is_stale(status: str, tags: dict[str, str]) -> bool:
    """A RUNNING run started by a process of this host that no longer exists (killed, crashed)."""
    if status != "RUNNING" or tags.get(keys.TAG_HOST) != socket.gethostname() or keys.TAG_PID not in tags:
        return False
    try:
        os.kill(int(tags[keys.TAG_PID]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError):
        return False
    return False


#: Characters of an MLflow run id; ``ema compare`` heads its columns with the first 8.
RUN_ID_LENGTH = 32


def compare_runs(run_ids: list[str]) -> pd.DataFrame:
    """Params, metrics and the verdict of audit runs side by side: one column per run, headed by its id's first 8.

    Raises
    ------
    InputError
        If a run does not exist, or is not an audit (:func:`is_audit`: a training, calibration or grid
        parent run, an evaluation run mirroring an audit), named with what it is.
    """
    client = MlflowClient()
    columns = {}
    for run_id in run_ids:
        try:
            run = client.get_run(run_id)
        except MlflowException as exc:
            whole = "" if len(run_id) >= RUN_ID_LENGTH else f" (give the whole id: {RUN_ID_LENGTH} characters)"
            raise InputError(f"run {run_id!r} does not exist in this tracking store{whole}") from exc
        if not is_audit(run.data.tags):
            raise InputError(
                f"expected runs of `ema audit`, got run {run_id} ({_what_run(run)}), which is not an audit: "
                f"{_compare_instead(run)}"
            )
        values = {f"param {k}": v for k, v in run.data.params.items()}
        methods = run_methods(run.data.tags, run.data.params.get(keys.PARAM_METHOD, ""))
        values.update({f"metric {k}": v for k, v in per_method_metrics(run.data.metrics, methods).items()})
        values.update(
            {
                "run name": run.info.run_name,
                "status": run.info.status,
                "verdict": run.data.tags.get(keys.TAG_VERDICT, ""),
            }
        )
        columns[run_id[:8]] = values
    return pd.DataFrame(columns).sort_index().fillna("")


def per_method_metrics(metrics: dict[str, float], methods: list[str]) -> dict[str, float]:
    """A run's metrics as ``ema compare`` lines them up: a number several methods log (:data:`keys.METRICS_PER_METHOD`)
    only per method, ``flag_rate.ema`` beside ``flag_rate.calibrated``, never as the bare ``flag_rate``, which means
    EMA's flags in one run and the calibrated auditor's in another.

    A run logged before every method's value was kept per method has the bare key (its first method's) and a later
    method's ``<key>.<method>`` only where it differed: the bare value stands for the others.
    """
    shown = dict(metrics)
    for key in keys.METRICS_PER_METHOD:
        if key not in shown:
            continue
        value = shown.pop(key)
        if methods and f"{key}.{methods[0]}" not in shown:
            shown.update({f"{key}.{method}": value for method in methods if f"{key}.{method}" not in shown})
    return shown


def _what_run(run: Run) -> str:
    """What a run is, in words: its name, and the ``mlflow run`` entry point and the parent run where it has them."""
    tags = run.data.tags
    words = [f"named {run.info.run_name!r}"]
    if PROJECT_ENTRY_POINT_TAG in tags:
        words.append(f"entry point {tags[PROJECT_ENTRY_POINT_TAG]!r}")
    if keys.TAG_PARENT_RUN in tags:
        words.append(f"nested in run {tags[keys.TAG_PARENT_RUN]}")
    return ", ".join(words)


def _compare_instead(run: Run) -> str:
    """What to compare instead of a run that is not an audit."""
    if keys.TAG_AUDIT_RUN in run.data.tags:
        return f"it mirrors the results of audit run {run.data.tags[keys.TAG_AUDIT_RUN]}: compare that one"
    return "compare the audit runs `ema history --model NAME` lists"


#: The trail table's leading columns; its numbers, options and run id follow (:func:`trail_table`).
TRAIL_COLUMNS = ("version", "time", "query", "data", "run_method", "method", "verdict")


def version_trail(model_name: str, *, query: str) -> pd.DataFrame:
    """Every recorded audit of ``query`` on every version of ``model_name``, one row per method, oldest first.

    Read from the versions' trail tags (``ema.audit.<query>.<time>.<run>``), which each audit
    adds and none overwrites: which version was audited when, by which methods, with what
    results and options (:mod:`ema.tracking.trail`; older records, EMA's only, read as one row).
    ``query`` is a named set (``M1``), a query file's tag name (``file-<fingerprint>``) or the
    file's name as ``ema history`` shows it (``patients.csv``). An audit of the same data under another
    name (its query fingerprint that of an audit of ``query``: the evaluator's ``dataset`` of M1's rows) is
    listed too, under its own name; data no audit of ``query`` recorded is not known by that name.
    """
    client = MlflowClient()
    prefix = f"{keys.TAG_AUDIT_PREFIX}{query}."
    versions = client.search_model_versions(f"name = {quoted('model name', model_name)}")
    if not versions:
        raise InputError(f"registered model {model_name!r} has no versions in this tracking store")
    records = [
        (int(version.version), key, json.loads(value))
        for version in versions
        for key, value in (version.tags or {}).items()
        if key.startswith(keys.TAG_AUDIT_PREFIX)
    ]
    named = [key.startswith(prefix) or record.get("query") == query for _, key, record in records]
    fingerprints = {
        record.get("query_fingerprint") for (_, _, record), is_named in zip(records, named, strict=True) if is_named
    }
    rows = [
        {"version": number, **row}
        for (number, _, record), is_named in zip(records, named, strict=True)
        if is_named or record.get("query_fingerprint") in fingerprints - {None}
        for row in trail_rows(record)
    ]
    return trail_table(rows)


def trail_table(rows: list[dict]) -> pd.DataFrame:
    """Trail rows as a table sorted by time and version (a run's methods in its plan's order).

    Columns: :data:`TRAIL_COLUMNS`; every number a row has, in the order first met (the
    retained share and its interval as one column, ``retained``); the options of
    :data:`~ema.tracking.trail.OPTIONS`, then those of :data:`~ema.tracking.trail.OPTIONS_WHERE_SET`
    that some row set; ``run_id``.
    """
    fixed = {*TRAIL_COLUMNS, "options", "run_id"}
    numbers = list(dict.fromkeys("retained" if k in RETAINED else k for row in rows for k in row if k not in fixed))
    where_set = [name for name in OPTIONS_WHERE_SET if any(row["options"].get(name) is not None for row in rows)]
    options = [*OPTIONS, *where_set]
    table = pd.DataFrame(
        [
            {
                **{column: row.get(column) for column in TRAIL_COLUMNS},
                **{k: retained_interval(row) if k == "retained" else row.get(k) for k in numbers},
                **{name: row["options"].get(name) for name in options},
                "run_id": row.get("run_id"),
            }
            for row in rows
        ],
        columns=[*TRAIL_COLUMNS, *numbers, *options, "run_id"],
    )
    return table.sort_values(["time", "version"], kind="stable").reset_index(drop=True)
