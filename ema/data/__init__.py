"""Image data as numpy arrays: embedded sources, on-disk loaders, splits, calibration corruption, files."""

from ema.data.arrays import ArraySet, fingerprint
from ema.data.splits import EMBEDDED_SIZES, PAPER_SIZES, QUERY_NAMES, Splits, SplitSizes, draw_splits, make_splits

__all__ = [
    "EMBEDDED_SIZES",
    "PAPER_SIZES",
    "QUERY_NAMES",
    "ArraySet",
    "SplitSizes",
    "Splits",
    "draw_splits",
    "fingerprint",
    "make_splits",
]
