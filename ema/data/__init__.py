"""Image data as numpy arrays: embedded sources, splits, calibration corruption, files."""

from ema.data.arrays import ArraySet, fingerprint
from ema.data.splits import QUERY_NAMES, Splits, make_splits

__all__ = ["ArraySet", "fingerprint", "Splits", "make_splits", "QUERY_NAMES"]
