"""A model version's audit trail: the record each audit adds to the version, and that record read back as rows.

A record (the value of the version's tag ``ema.audit.<query>.<time>.<run>``, and of ``ema.last_audit``)
holds what was asked (query, fingerprint, the run's ``--method``), each method's verdict and headline
numbers (``results``, a list in the run's plan order), the options that change a verdict
(``options``), the run and the time. Its top level also keeps the run's verdict and the first
method's metrics, as records did before ``results`` existed (EMA's only): those older records
still read, as one row each, and readers of the top level (``ema.last_audit``'s ``verdict``,
``rho_ema``) read on.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence

#: The numbers of a record written before ``results`` existed: its top level, its one method's.
LEGACY_NUMBERS = ("rho_ema", "rho_ema_ks", "p_removed")
#: The calibrated auditor's retained share and its interval, shown as one column ``retained``: ``0.12 [0.05, 0.30]``.
RETAINED = ("retained_fraction", "retained_ci_low", "retained_ci_high")
#: The options every row shows, in order: input scaling, calibration source and route, references, the margin a
#: method certified with, strict.
OPTIONS = ("input", "calibration", "route", "members", "nonmembers", "margin", "strict")
#: The record's key naming the method that certified with its ``margin`` and ``level`` (None: no method did).
CERTIFIED_BY = "certified_by"
#: Options a row shows only where some audit of the table set them (``level``: the one-sided level a method
#: certified its margin at; EMA's ``alpha``, ``test``, ``k``, ``threshold_mode`` and the ``cal_seed``, recorded
#: only where not the default).
OPTIONS_WHERE_SET = (
    "level",
    "label_column",
    "allow_missing",
    "calibration_file",
    "image_size",
    "augment",
    "alpha",
    "test",
    "k",
    "threshold_mode",
    "cal_seed",
)


def trail_record(
    query: str,
    fingerprint: str,
    method: str,
    answers: Sequence[Mapping[str, object]],
    first_metrics: Mapping[str, float],
    options: Mapping[str, object],
    run_id: str,
    when: time.struct_time,
) -> str:
    """The audit as a model-version tag value (JSON): what was asked, every method's answer, where to look.

    Parameters
    ----------
    query, fingerprint : str
        The query's name and content hash.
    method : str
        The run's ``--method`` (a combination has several answers); the first answer's verdict is the run's.
    answers : sequence of mapping
        One per method, in the order of the run's plan: ``method``, ``verdict`` and its headline numbers
        (:func:`answer`).
    first_metrics : mapping of str to float
        Every metric of the first method, kept on the top level as records kept them before ``answers``.
    options : mapping of str to object
        The options that change a verdict (:data:`OPTIONS`, :data:`OPTIONS_WHERE_SET`); None where unset.
    run_id : str
    when : time.struct_time
        UTC.
    """
    first = answers[0]
    return json.dumps(
        {
            "query": query,
            "query_fingerprint": fingerprint,
            "method": first["method"],
            "run_method": method,
            **first_metrics,
            "verdict": first["verdict"],
            "results": list(answers),
            "options": dict(options),
            "run_id": run_id,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", when),
        },
        sort_keys=True,
    )


def answer(method: str, verdict: str, metrics: Mapping[str, float], numbers: Sequence[str]) -> dict[str, object]:
    """One method's answer in a record: its verdict and the ``numbers`` of its ``metrics`` that are finite."""
    kept = {key: float(metrics[key]) for key in numbers if key in metrics and math.isfinite(metrics[key])}
    return {"method": method, "verdict": verdict, **kept}


def trail_rows(record: Mapping[str, object]) -> list[dict[str, object]]:
    """One row per method of a record: time, query, its data (size and fingerprint's first 8 characters: two
    sets named alike tell apart), the run's method, the method, verdict, numbers, options, run.

    A record from before ``results`` existed reads as one row: its method, verdict and
    :data:`LEGACY_NUMBERS`, no options.
    """
    results = record.get("results") or [
        {
            "method": record.get("method"),
            "verdict": record.get("verdict"),
            **{key: record[key] for key in LEGACY_NUMBERS if record.get(key) is not None},
        }
    ]
    n_query = record.get("n_query")
    common = {
        "time": record.get("time"),
        "query": record.get("query"),
        "data": f"{int(n_query) if n_query is not None else '?'} {str(record.get('query_fingerprint', ''))[:8]}",
        "run_method": record.get("run_method", record.get("method")),
    }
    options = record.get("options") or {}
    return [
        {**common, **given, "options": method_options(options, given.get("method")), "run_id": record.get("run_id")}
        for given in results
    ]


def method_options(options: Mapping[str, object], method: object) -> Mapping[str, object]:
    """A record's options as they apply to one of its methods: the margin and level only on the row of the method
    that certified with them (:data:`CERTIFIED_BY`; a record from before it was kept shows them on every row)."""
    if options.get(CERTIFIED_BY, method) == method:
        return options
    return {**options, "margin": None, "level": None}


def retained_interval(row: Mapping[str, object]) -> str:
    """A row's retained share with its interval, ``0.12 [0.05, 0.30]``; empty when the row has none."""
    values = [row.get(key) for key in RETAINED]
    if any(value is None or value != value for value in values):
        return ""
    fraction, low, high = values
    return f"{fraction:.2f} [{low:.2f}, {high:.2f}]"
