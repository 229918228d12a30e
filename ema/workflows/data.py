"""``ema data``: what a data source holds, and its splits written as query files."""

from __future__ import annotations

from pathlib import Path

from ema.data.arrays import ArraySet
from ema.data.catalog import SourceDescription, describe_source
from ema.data.files import write_set
from ema.data.presets import load_splits

__all__ = ["SourceDescription", "describe_source", "export_splits"]


def export_splits(out_dir: Path, data: str, seed: int = 0, root: str | Path | None = None) -> dict[Path, ArraySet]:
    """Write every split of ``data`` under ``seed`` to ``out_dir`` as ``.npz``; returns what went where."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return {
        write_set(arrays, out_dir / f"{name}.npz"): arrays
        for name, arrays in load_splits(data, seed, root).as_dict().items()
    }
