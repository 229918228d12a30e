"""Query tables: a labelled image set as Parquet, one row per image, for engines that read tables (Spark).

A query table is a Parquet file, or a folder of them (as Spark writes), with three columns:

- ``label`` (integer): the class label;
- ``index`` (integer): the image's position in its source;
- ``pixels`` (binary): the image, 28 x 28 uint8 values 0-255, row-major (784 bytes).

Bytes rather than a list of numbers: a batch of images is one ``np.frombuffer`` away from the
uint8 array an oracle takes, and a million images stay 784 MB before compression.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ema.data.arrays import IMAGE_SHAPE, ArraySet
from ema.data.limits import DEFAULT_MAX_QUERY, check_set_size
from ema.errors import InputError

#: Column -> what it holds; the order the exporter writes.
QUERY_COLUMNS = {"label": "integer class label", "index": "integer position in the source", "pixels": "784 bytes"}
#: Bytes of one image in the ``pixels`` column.
IMAGE_BYTES = int(np.prod(IMAGE_SHAPE))
#: Rows per Parquet row group: the unit a table is split into for parallel readers.
ROWS_PER_GROUP = 8192
#: The file the exporter writes inside the table's folder (Spark's naming).
PART_FILE = "part-00000.parquet"
#: Spark's simple type names that hold integers.
SPARK_INTEGER_TYPES = ("tinyint", "smallint", "int", "bigint")
QUERY_SCHEMA = pa.schema([("label", pa.int64()), ("index", pa.int64()), ("pixels", pa.binary())])


def images_from_bytes(pixels: Iterable[bytes], *, where: str = "query table") -> np.ndarray:
    """uint8 images of shape (n, 28, 28) from ``pixels`` values (784 bytes each), in one copy.

    Raises
    ------
    InputError
        If a value is not 784 bytes (another image size, or not an image).
    """
    values = list(pixels)
    sizes = {len(value) for value in values}
    if sizes - {IMAGE_BYTES}:
        raise _wrong_size(where, sorted(sizes))
    return np.frombuffer(b"".join(values), dtype=np.uint8).reshape(len(values), *IMAGE_SHAPE)


def unreadable_table(where: str, reason: str) -> InputError:
    """The error for a query table that is not Parquet or is corrupt, as every engine words it."""
    return InputError(f"could not read query table {where} as Parquet: {reason}")


def _wrong_size(where: str, sizes: list[int]) -> InputError:
    return InputError(
        f"{where}: expected `pixels` of {IMAGE_BYTES} bytes (a {IMAGE_SHAPE[0]}x{IMAGE_SHAPE[1]} uint8 image), "
        f"got values of {sizes[:5]} bytes"
    )


def to_arrow(data: ArraySet) -> pa.Table:
    """One set as a query table in memory."""
    flat = np.ascontiguousarray(data.x).reshape(len(data), -1)
    if flat.shape[1] != IMAGE_BYTES:
        raise InputError(f"{data.name}: expected {IMAGE_SHAPE} images for a query table, got {data.x.shape[1:]}")
    offsets = np.arange(len(data) + 1, dtype=np.int32) * np.int32(IMAGE_BYTES)
    pixels = pa.Array.from_buffers(pa.binary(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(flat)])
    return pa.Table.from_arrays([pa.array(data.y), pa.array(data.index), pixels], schema=QUERY_SCHEMA)


def write_table(chunks: Iterable[ArraySet], out_dir: Path) -> Path:
    """Write sets, one after another, as one query table ``out_dir/part-00000.parquet``; returns ``out_dir``.

    Chunks are written as they come, so a table larger than memory can be written from a
    generator. The file appears whole or not at all.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / PART_FILE
    partial = path.with_name(path.name + ".partial")
    with pq.ParquetWriter(partial, QUERY_SCHEMA) as writer:
        for chunk in chunks:
            writer.write_table(to_arrow(chunk), row_group_size=ROWS_PER_GROUP)
    partial.replace(path)
    return out_dir


def read_table(path: str | Path, *, max_images: int = DEFAULT_MAX_QUERY) -> ArraySet:
    """Read a local query table (a Parquet file or folder) whole, for the in-process engine.

    The row count comes from the Parquet metadata first: a table of more than ``max_images``
    rows is refused before any row is read.

    Raises
    ------
    InputError
        If the path is missing, not Parquet, holds more than ``max_images`` rows, lacks a
        column, or holds images of another size.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"expected a query table (a Parquet file or folder) at {path}, found nothing there")
    try:
        check_set_size(ds.dataset(path, format="parquet").count_rows(), limit=max_images, where=str(path))
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise unreadable_table(str(path), str(exc).splitlines()[0]) from exc
    check_columns({field.name: field.type for field in table.schema}, where=str(path))
    empty = [name for name in QUERY_COLUMNS if table.column(name).null_count]
    if empty:
        raise InputError(f"{path}: expected a value in every row, got nulls in columns {empty}")
    return ArraySet(
        path.name,
        _images_from_arrow(table.column("pixels"), where=str(path)),
        table.column("label").to_numpy().astype(np.int64),
        table.column("index").to_numpy().astype(np.int64),
    )


def _images_from_arrow(column: pa.ChunkedArray, *, where: str) -> np.ndarray:
    """The ``pixels`` column as uint8 images (n, 28, 28), straight from Arrow's buffers (no Python bytes per row)."""
    pixels = column.cast(pa.binary()).combine_chunks()
    offsets = np.frombuffer(pixels.buffers()[1], dtype=np.int32)[pixels.offset : pixels.offset + len(pixels) + 1]
    sizes = np.unique(np.diff(offsets))
    if sizes.size and (sizes != IMAGE_BYTES).any():
        raise _wrong_size(where, sizes.tolist())
    data = np.frombuffer(pixels.buffers()[2] or b"", dtype=np.uint8)[offsets[0] : offsets[-1]]
    return data.reshape(len(pixels), *IMAGE_SHAPE)


def check_columns(types: dict[str, object], *, where: str) -> None:
    """Refuse a table without the query columns, or with the wrong kinds (``types``: name -> Arrow type or name).

    Spark's types are passed by their simple names (``bigint``, ``binary``), Arrow's as types.
    """
    missing = [name for name in QUERY_COLUMNS if name not in types]
    if missing:
        raise InputError(
            f"{where}: expected columns {', '.join(f'{k} ({v})' for k, v in QUERY_COLUMNS.items())}, "
            f"missing {missing}; found {sorted(types)}"
        )
    wrong = {
        name: str(types[name])
        for name, ok in (("label", _is_integer), ("index", _is_integer), ("pixels", _is_binary))
        if not ok(types[name])
    }
    if wrong:
        raise InputError(f"{where}: expected integer label and index and binary pixels, got types {wrong}")


def _is_integer(kind: object) -> bool:
    if isinstance(kind, pa.DataType):
        return pa.types.is_integer(kind)
    return str(kind) in SPARK_INTEGER_TYPES


def _is_binary(kind: object) -> bool:
    if isinstance(kind, pa.DataType):
        return pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
    return str(kind) == "binary"
