"""Which data a run draws its splits from."""

from __future__ import annotations

from pathlib import Path

from ema.data.presets import PRESETS, preset_splits
from ema.data.splits import Splits

#: Every data source a run can draw its splits from (see :mod:`ema.data.presets`).
DATA_SOURCES = tuple(PRESETS)
DEFAULT_DATA = "mnist-embedded"


def load_splits(data: str = DEFAULT_DATA, seed: int = 0, root: str | Path | None = None) -> Splits:
    """The splits of a data source under a split seed.

    Parameters
    ----------
    data : str
        One of :data:`DATA_SOURCES`.
    seed : int, default 0
        Seed of the split draw.
    root : str or Path, optional
        The folder holding the source's files; not given for ``mnist-embedded``.

    Raises
    ------
    InputError
        If ``data`` is unknown, or its files are missing or malformed.
    """
    return preset_splits(data, seed, root)
