"""Which data a run draws its splits from."""

from __future__ import annotations

import functools
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

    Notes
    -----
    A source is read once per process and (data, seed, root): a grid audits dozens of cells
    from the same splits. Their arrays are read-only, so no caller can change them for the next.
    """
    return _read_splits(data, seed, str(Path(root).resolve()) if root is not None else None)


@functools.lru_cache(maxsize=4)
def _read_splits(data: str, seed: int, root: str | None) -> Splits:
    splits = preset_splits(data, seed, root)
    for part in splits.as_dict().values():
        for array in (part.x, part.y, part.index):
            array.flags.writeable = False
    return splits
