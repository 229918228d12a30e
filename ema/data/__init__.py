"""Image data as numpy arrays: embedded sources, on-disk loaders, splits, calibration corruption, files."""

from ema.data.arrays import ArraySet, fingerprint
from ema.data.splits import EMBEDDED_SIZES, PAPER_SIZES, QUERY_NAMES, Splits, SplitSizes, draw_splits, make_splits

__all__ = [
    "ArraySet",
    "fingerprint",
    "Splits",
    "SplitSizes",
    "EMBEDDED_SIZES",
    "PAPER_SIZES",
    "draw_splits",
    "make_splits",
    "QUERY_NAMES",
]
