"""``ema history`` and ``ema compare``: audits read back from the tracking store."""

from ema.tracking.history import audit_history, compare_runs, version_trail

__all__ = ["audit_history", "compare_runs", "version_trail"]
