"""Warnings that a verdict cannot be trusted as it stands, for every method (EMA included).

They come from the target's behaviour on the references, scored through the same oracle: an
accuracy near chance or far below what was recorded when the target was trained (inputs scaled
or normalised unlike training), a query classified far worse than the non-member reference (it
reaches the model unlike the references), outputs that match the labels far better in another
class order, signals that barely separate members from non-members, flags that fire on nearly
every non-member (EMA's verdict is then no evidence either way), and a calibration model that
generalises unlike the target. The auditors' own warnings are added after them.

Two of them can say the audit's inputs surely do not reach the model as its training data did:
outputs that match the labels far better in another class order, and an input scaling (or pixel
order) under which the target does far better, each by :data:`~ema.auditors.reference_gates.DECISIVE_GAIN`
and with a sign test's p at most :data:`~ema.auditors.reference_gates.DECISIVE_P` (a few reference
samples decide nothing). Every verdict would then be about a model fed the wrong inputs, so the
audit withholds them (:attr:`Gates.withheld`: each method's verdict becomes ``inconclusive``), with
or without ``--strict``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ema.auditors.calibrated import CalibratedAuditor
from ema.auditors.ema import EMAAuditor
from ema.auditors.reference_gates import (
    ACCURACY_GAP_LIMIT,
    INPUT_MISMATCH_HINT,
    label_order_warning,
    query_accuracy_warning,
    reference_gate_warnings,
)
from ema.auditors.result import AuditResult
from ema.tracking import keys
from ema.tracking.runs import run_metrics
from ema.workflows.audit_session import AuditSession
from ema.workflows.input_scaling import scaling_suggestion


@dataclass(frozen=True)
class Gates:
    """What the gates found: every warning, each once, in a stable order; and those of them for which the audit
    withholds its verdicts (the inputs surely do not reach the model as in training)."""

    warnings: list[str]
    withheld: list[str] = field(default_factory=list)


def check_gates(session: AuditSession, results: dict[str, AuditResult], query_correct: int | None = None) -> Gates:
    """Every warning of the audit, the gates' first, and those that withhold its verdicts.

    ``query_correct``: how many query samples the target classified right (None: the query
    gate does not run, as on Spark, where the query's predictions stay in the executors).
    """
    proba, labels = session.nonmember_proba, session.nonmembers.data.y
    reference_accuracy = float((proba.argmax(axis=1) == labels).mean())
    warnings = reference_gate_warnings(
        proba.shape[1],
        labels,
        reference_accuracy=reference_accuracy,
        **_ema_separation(results),
        nonmember_flag_rate=_ema_nonmember_flag_rate(results, proba, labels),
        separation_of="EMA's signals on its calibration halves",
    )
    held_out = _recorded_held_out_accuracy(session)
    if held_out is not None and held_out - reference_accuracy > ACCURACY_GAP_LIMIT:
        warnings.append(
            f"target accuracy on the non-member reference ({reference_accuracy:.3f}) is far below its recorded "
            f"held-out accuracy ({held_out:.3f}): {INPUT_MISMATCH_HINT}"
        )
    if query_correct is not None and (
        query := query_accuracy_warning(query_correct, len(session.data), reference_accuracy)
    ):
        warnings.append(query)
    withheld = []
    for mismatch in (
        label_order_warning(proba, labels),
        scaling_suggestion(session.oracle, session.nonmembers.data, proba),
    ):
        if mismatch is not None:
            (withheld if mismatch.decisive else warnings).append(mismatch.warning)
    warnings += withheld + _transfer_warnings(results)
    for result in results.values():
        warnings += list(result.thresholds.get("warnings", []))
    return Gates(list(dict.fromkeys(warnings)), withheld)


def _recorded_held_out_accuracy(session: AuditSession) -> float | None:
    """The held-out accuracy the target's training run logged (a workbench target), else None."""
    version = session.target.version
    if version is None or not version.run_id:
        return None
    return run_metrics(version.run_id).get(keys.METRIC_HELD_OUT_ACCURACY)


def _ema_separation(results: dict[str, AuditResult]) -> dict[str, float]:
    """How well EMA's signals separate the calibration model's halves, as the gate reads it: their best AUC (logged as
    ``mia_auc.<signal>``), which reads no threshold. Their thresholds' best balanced accuracy is picked on those same
    samples, so on a few hundred it clears the limit by chance (0.553 with AUCs of 0.495-0.52 on 75 + 75); it stands
    in only for thresholds calibrated before the AUC was kept. Empty without EMA."""
    if EMAAuditor.method not in results:
        return {}
    entries = results[EMAAuditor.method].thresholds.get("signals", {}).values()
    aucs = [entry["attack"]["auc"] for entry in entries if "attack" in entry]
    if aucs:
        return {"auc": max(aucs)}
    return {"balanced_accuracy": max((entry["balanced_accuracy"] for entry in entries), default=None)}


def _ema_nonmember_flag_rate(results: dict[str, AuditResult], proba: np.ndarray, labels: np.ndarray) -> float | None:
    """The share of the non-member reference that EMA's thresholds flag as members."""
    if EMAAuditor.method not in results:
        return None
    thresholds = results[EMAAuditor.method].thresholds
    auditor = EMAAuditor.from_dict(thresholds, threshold_mode=thresholds["mode"])
    return float(auditor.audit(proba, labels).membership.mean())


def _transfer_warnings(results: dict[str, AuditResult]) -> list[str]:
    """The transfer route's guard, in words, when it did not trust the calibration model."""
    result = results.get(CalibratedAuditor.method)
    diagnostics = result.thresholds.get("diagnostics", {}) if result is not None else {}
    if diagnostics.get("transfer_trusted", True):
        return []
    return [
        f"the calibration model generalises unlike the target (accuracy gap {diagnostics['transfer_gap']:+.3f}, "
        f"tolerance {diagnostics['transfer_tolerance']}): H0 retained was not tested, so the calibrated auditor "
        "cannot say not_memorized; give --members FILE (samples the target was trained on)"
    ]
