"""``check_auditor``: the conformance suite every auditor passes, after scikit-learn's ``check_estimator``.

Workflows, reports and grids handle every method alike; each check below is one property they
rely on without looking at the method. A failure raises :class:`CheckFailed`, an
``AssertionError`` whose message names the auditor's class and the check.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence

import numpy as np

from ema.auditors.base import Auditor, is_calibrated
from ema.auditors.result import VERDICTS, AuditResult, is_pvalue
from ema.errors import InputError, NotCalibratedError


class CheckFailed(AssertionError):
    """An auditor broke one of :func:`check_auditor`'s checks.

    Attributes
    ----------
    check : str
        The check's name, e.g. ``"inputs_not_mutated"``.
    """

    def __init__(self, auditor: object, check: str, detail: str) -> None:
        super().__init__(f"{type(auditor).__name__} fails check_auditor's {check!r} check: {detail}")
        self.check = check


def _require(condition: bool, auditor: object, check: str, detail: str) -> None:
    """Raise :class:`CheckFailed` for ``check`` unless ``condition`` holds."""
    if not condition:
        raise CheckFailed(auditor, check, detail)


def check_auditor(
    auditor: Auditor,
    *,
    calibration_args: Sequence[object],
    query_proba: np.ndarray,
    query_labels: np.ndarray,
) -> None:
    """Check that an auditor behaves as every caller of an auditor assumes.

    The auditor given is not changed: each run works on a deep copy of it. Checks, in order:

    * ``protocol``: it has a ``method`` and ``calibrate``, ``audit`` and ``to_dict`` methods;
    * ``refuses_before_calibrate``: ``audit`` and ``to_dict`` raise
      :class:`~ema.errors.NotCalibratedError` before ``calibrate``;
    * ``calibrate_returns_self``;
    * ``inputs_not_mutated``: every calibration and query array is unchanged by calibrate and audit;
    * ``returns_audit_result``: ``audit`` returns an :class:`~ema.auditors.AuditResult` carrying
      the auditor's ``method`` (``method_name``);
    * ``verdict_in_vocabulary``: the verdict is one of :data:`~ema.auditors.VERDICTS`;
    * ``json_serialisable``: ``to_dict()`` and the result's ``to_dict()`` pass ``json.dumps``;
    * ``pvalues_in_unit_interval``: every p-value metric (:func:`~ema.auditors.result.is_pvalue`)
      lies in [0, 1] (NaN does not);
    * ``deterministic``: a second fresh copy on the same inputs gives the same result and export
      (seed any randomness, e.g. ``random_state=0``).

    Parameters
    ----------
    auditor : Auditor
        An auditor not yet calibrated, configured as it should be checked.
    calibration_args : sequence
        Its ``calibrate`` arguments, positionally (they differ by method: see :class:`~ema.auditors.Auditor`).
    query_proba : ndarray of shape (n_query, n_classes)
        A target's probabilities on a query set, for ``audit``.
    query_labels : ndarray of shape (n_query,)
        The query set's labels.

    Raises
    ------
    CheckFailed
        An ``AssertionError`` naming the auditor's class and the first check it fails.
    InputError
        If ``auditor`` is already calibrated (pass a fresh one).

    Examples
    --------
    >>> from ema.auditors import EMAAuditor, check_auditor
    >>> p = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    >>> y = np.array([0, 1, 1, 0])
    >>> check_auditor(EMAAuditor(), calibration_args=(p[:2], y[:2], p[2:], y[2:]), query_proba=p, query_labels=y)
    """
    _require(
        isinstance(auditor, Auditor), auditor, "protocol", "expected a `method` and `calibrate`, `audit`, `to_dict`"
    )
    if is_calibrated(auditor):
        raise InputError(f"expected an auditor not yet calibrated, got a calibrated {type(auditor).__name__}")
    inputs = {f"calibration_args[{i}]": arg for i, arg in enumerate(calibration_args)}
    inputs.update(query_proba=query_proba, query_labels=query_labels)
    snapshot = copy.deepcopy(inputs)
    _check_refuses_before_calibrate(copy.deepcopy(auditor), query_proba, query_labels)
    first, result = _calibrate_and_audit(copy.deepcopy(auditor), calibration_args, query_proba, query_labels)
    changed = [name for name, value in inputs.items() if not _same_array(value, snapshot[name])]
    _require(not changed, auditor, "inputs_not_mutated", f"calibrate() or audit() changed {changed}")
    _check_result(first, result)
    second, repeated = _calibrate_and_audit(copy.deepcopy(auditor), calibration_args, query_proba, query_labels)
    _check_same_outcome(auditor, (first, result), (second, repeated))


def _check_refuses_before_calibrate(auditor: Auditor, query_proba: np.ndarray, query_labels: np.ndarray) -> None:
    """``audit`` and ``to_dict`` of a fresh auditor raise NotCalibratedError, not another error or nothing."""
    calls = {"audit": lambda: auditor.audit(query_proba, query_labels), "to_dict": auditor.to_dict}
    for name, call in calls.items():
        try:
            call()
        except NotCalibratedError:
            continue
        except Exception as exc:  # any other error is the failure being checked for
            detail = f"{name}() before calibrate() raised {type(exc).__name__} ({exc}), expected NotCalibratedError"
            raise CheckFailed(auditor, "refuses_before_calibrate", detail) from exc
        raise CheckFailed(auditor, "refuses_before_calibrate", f"{name}() before calibrate() did not raise")


def _calibrate_and_audit(
    auditor: Auditor, calibration_args: Sequence[object], query_proba: np.ndarray, query_labels: np.ndarray
) -> tuple[Auditor, AuditResult]:
    """Calibrate (which must return the auditor itself), then audit the query."""
    fitted = auditor.calibrate(*calibration_args)
    _require(fitted is auditor, auditor, "calibrate_returns_self", f"calibrate() returned {type(fitted).__name__}")
    return auditor, auditor.audit(query_proba, query_labels)


def _check_result(auditor: Auditor, result: object) -> None:
    """The result's type, method, verdict, JSON form and p-values."""
    _require(
        isinstance(result, AuditResult),
        auditor,
        "returns_audit_result",
        f"audit() returned {type(result).__name__}, expected AuditResult",
    )
    _require(
        result.method == auditor.method,
        auditor,
        "method_name",
        f"the result's method is {result.method!r}, the auditor's {auditor.method!r}",
    )
    _require(
        result.verdict in VERDICTS,
        auditor,
        "verdict_in_vocabulary",
        f"verdict {result.verdict!r} is not one of {VERDICTS}",
    )
    for name, data in (("to_dict()", auditor.to_dict()), ("the result's to_dict()", result.to_dict())):
        try:
            json.dumps(data)
        except (TypeError, ValueError) as exc:
            raise CheckFailed(auditor, "json_serialisable", f"json.dumps({name}) failed: {exc}") from exc
    outside = {name: value for name, value in result.metrics.items() if is_pvalue(name) and not 0.0 <= value <= 1.0}
    _require(not outside, auditor, "pvalues_in_unit_interval", f"p-values outside [0, 1]: {outside}")


def _check_same_outcome(
    auditor: Auditor, first: tuple[Auditor, AuditResult], second: tuple[Auditor, AuditResult]
) -> None:
    """Two fresh auditors on the same inputs: the same export, set-level outcome and per-sample arrays."""
    (first_auditor, first_result), (second_auditor, second_result) = first, second
    parts = {
        "to_dict()": (json.dumps(first_auditor.to_dict()), json.dumps(second_auditor.to_dict())),
        "result (verdict, metrics, thresholds)": (
            json.dumps(first_result.to_dict()),
            json.dumps(second_result.to_dict()),
        ),
    }
    differ = [name for name, (one, other) in parts.items() if one != other]
    columns = (first_result.sample_columns(), second_result.sample_columns())
    if columns[0].keys() != columns[1].keys() or not all(_same_array(columns[0][k], columns[1][k]) for k in columns[0]):
        differ.append("per-sample scores, flags or membership")
    _require(not differ, auditor, "deterministic", f"two fresh auditors on the same inputs gave different {differ}")


def _same_array(first: object, second: object) -> bool:
    """Same shape, dtype and values (NaN equal to NaN)."""
    first, second = np.asarray(first), np.asarray(second)
    return (
        first.shape == second.shape
        and first.dtype == second.dtype
        and bool(np.array_equal(first, second, equal_nan=first.dtype.kind in "fc"))
    )
