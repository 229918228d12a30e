"""``ema data``: what a data source holds, and its splits written as query files."""

from __future__ import annotations

from pathlib import Path

from ema.data.arrays import ArraySet
from ema.data.catalog import SourceDescription, describe_source
from ema.data.files import read_set, write_set
from ema.data.limits import DEFAULT_MAX_QUERY
from ema.data.parquet import write_table
from ema.data.presets import DEFAULT_DATA, load_splits
from ema.data.sources import ImageFormat
from ema.data.tables import DEFAULT_LABEL_COLUMN
from ema.errors import InputError

__all__ = ["EXPORT_FORMATS", "SourceDescription", "describe_source", "export_query", "export_splits"]

#: What ``ema data export`` writes: Parquet query tables (:mod:`ema.data.parquet`), for the Spark engine.
EXPORT_FORMATS = ("parquet",)


def export_splits(
    out_dir: Path, data: str, seed: int = 0, root: str | Path | None = None, image: ImageFormat = ImageFormat()
) -> dict[Path, ArraySet]:
    """Write every split of ``data`` under ``seed`` (images in ``image``) to ``out_dir`` as ``.npz``; returns what
    went where."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return {
        write_set(arrays, out_dir / f"{name}.npz"): arrays
        for name, arrays in load_splits(data, seed, root, image).as_dict().items()
    }


def export_query(
    out_dir: Path,
    *,
    query: str | None = None,
    query_file: str | Path | None = None,
    data: str = DEFAULT_DATA,
    seed: int = 0,
    root: str | Path | None = None,
    image: ImageFormat = ImageFormat(),
    max_query: int = DEFAULT_MAX_QUERY,
    label_column: str = DEFAULT_LABEL_COLUMN,
) -> ArraySet:
    """Write one query (a named set of ``data``'s splits, or a query file) as a Parquet query table ``out_dir``.

    A query file is read only when it holds at most ``max_query`` images (a table's labels in
    ``label_column``). Returns the set
    written. ``ema audit --query-table out_dir`` audits it, in-process or on Spark.
    """
    if (query is None) == (query_file is None):
        raise InputError(f"expected exactly one of a query name or a query file, got {query!r} and {query_file!r}")
    if query_file is not None:
        arrays = read_set(query_file, role="query file", max_images=max_query, label_column=label_column)
    else:
        arrays = load_splits(data, seed, root, image).query(query)
    write_table([arrays], out_dir, label_column=label_column)
    return arrays
