"""``ema history`` and ``ema compare``: audits read back from the tracking store."""

from ema.tracking.history import audit_history, compare_runs, version_trail
from ema.tracking.registry import registered_model

__all__ = ["audit_history", "compare_runs", "registered_model", "version_trail"]
