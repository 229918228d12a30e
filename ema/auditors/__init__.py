"""Auditors: plain values over numpy arrays, with ``calibrate`` and ``audit``."""

from ema.auditors.ema import EMAAuditor
from ema.auditors.result import MEMORIZED, NOT_MEMORIZED, AuditResult

__all__ = ["EMAAuditor", "AuditResult", "MEMORIZED", "NOT_MEMORIZED"]
