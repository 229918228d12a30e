"""Auditors: plain values over numpy arrays, with ``calibrate`` and ``audit``.

Every auditor follows the :class:`Auditor` protocol (:mod:`ema.auditors.base`): ``__init__``
stores configuration, ``calibrate(...)`` returns ``self``, ``audit(proba, labels)`` returns an
:class:`AuditResult`, ``to_dict()`` exports the calibration as JSON.

Adding an auditor
-----------------
Write one module here with one class: a ``method`` name; ``__init__`` that only stores its
options; ``calibrate(...)`` that validates its arrays (:func:`ema.signals.check_probabilities`),
sets fitted attributes whose names end in ``_`` and returns ``self``; ``audit(proba, labels)``
that first calls :func:`ema.auditors.base.check_calibrated` and returns an :class:`AuditResult`
whose verdict is one of :data:`VERDICTS` and whose p-values are named ``p_*``; and ``to_dict()``
with JSON-ready values. Seed any randomness (``random_state=0``). Then add one line for it to
the list of built-in auditors in ``tests/core/test_check_auditor.py``, which runs
:func:`check_auditor` on it, and one row for its method to the method table
(:mod:`ema.workflows.methods`): its name, runner, engines and metrics, each metric a
:class:`~ema.auditors.metrics.Metric` with its kind and meaning. The CLI, the report, the
gates and the grids read the method from that row.
"""

from ema.auditors.base import Auditor
from ema.auditors.calibrated import CalibratedAuditor
from ema.auditors.conformance import CheckFailed, check_auditor
from ema.auditors.ema import EMAAuditor
from ema.auditors.ks_ratio import KSRatioAuditor
from ema.auditors.result import INCONCLUSIVE, MEMORIZED, NOT_MEMORIZED, VERDICTS, AuditResult

__all__ = [
    "INCONCLUSIVE",
    "MEMORIZED",
    "NOT_MEMORIZED",
    "VERDICTS",
    "AuditResult",
    "Auditor",
    "CalibratedAuditor",
    "CheckFailed",
    "EMAAuditor",
    "KSRatioAuditor",
    "check_auditor",
]
