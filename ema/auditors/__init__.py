"""Auditors: plain values over numpy arrays, with ``calibrate`` and ``audit``."""

from ema.auditors.calibrated import CalibratedAuditor
from ema.auditors.ema import EMAAuditor
from ema.auditors.ks_ratio import KSRatioAuditor
from ema.auditors.result import INCONCLUSIVE, MEMORIZED, NOT_MEMORIZED, VERDICTS, AuditResult

__all__ = [
    "INCONCLUSIVE",
    "MEMORIZED",
    "NOT_MEMORIZED",
    "VERDICTS",
    "AuditResult",
    "CalibratedAuditor",
    "EMAAuditor",
    "KSRatioAuditor",
]
