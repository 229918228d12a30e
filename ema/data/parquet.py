"""Query tables: a labelled set as Parquet, one row per sample, for engines that read tables (Spark).

A query table is a Parquet file, or a folder of them (as Spark writes), of one of two kinds:

- **images**: ``label`` and ``index`` (integers); ``pixels`` (binary): one uint8 image, row-major,
  height x width x channels bytes; ``height``, ``width`` and ``channels`` (integers), its shape.
  A table without the three shape columns (as tables were written before them) holds 28 x 28
  grey images;
- **features**: a label column (``label`` unless ``--label-column`` names another), an optional
  ``index`` (0..n-1 when absent), and one numeric column per feature: the table
  :func:`ema.data.files.read_set` reads from a ``.parquet`` file.

Bytes rather than a list of numbers: a batch of images is one ``np.frombuffer`` away from the
uint8 array an oracle takes, and a million 28 x 28 images stay 784 MB before compression. The
shape goes in every row rather than in the file's key-value metadata: Spark keeps columns through
whatever is done to a table (filtered, unioned, rewritten) but drops that metadata, and a column
that holds one value costs a few bytes per row group once Parquet has dictionary-encoded it.
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
from ema.data.tables import DEFAULT_LABEL_COLUMN, INDEX_COLUMN, labelled_set
from ema.errors import InputError
from ema.inputs import IMAGE_CHANNELS, listed_names

#: Column -> what it holds, for an image table; the order the exporter writes (the shape columns follow).
QUERY_COLUMNS = {"label": "integer class label", "index": "integer position in the source", "pixels": "image bytes"}
#: An image table's shape columns: all three or none.
SHAPE_COLUMNS = ("height", "width", "channels")
#: The shape of the images of a table without shape columns: 28 x 28, grey.
LEGACY_IMAGE_SHAPE = (*IMAGE_SHAPE, 1)
#: Rows per Parquet row group: the unit a table is split into for parallel readers.
ROWS_PER_GROUP = 8192
#: The file the exporter writes inside the table's folder (Spark's naming).
PART_FILE = "part-00000.parquet"
#: Spark's simple type names that hold integers, and numbers a feature column may hold.
SPARK_INTEGER_TYPES = ("tinyint", "smallint", "int", "bigint")
SPARK_NUMBER_TYPES = (*SPARK_INTEGER_TYPES, "float", "double")


def table_kind(columns: Iterable[str]) -> str:
    """``"image"`` for a table with a ``pixels`` column, else ``"table"`` (features)."""
    return "image" if "pixels" in columns else "table"


def images_from_bytes(
    pixels: Iterable[bytes], shape: tuple[int, int, int] = LEGACY_IMAGE_SHAPE, *, where: str = "query table"
) -> np.ndarray:
    """uint8 images of ``shape`` (height, width, channels) from ``pixels`` values, in one copy.

    Grey images (one channel) come as (n, H, W), others as (n, H, W, C), as sets hold them.

    Raises
    ------
    InputError
        If a value is not H x W x C bytes (another image size, or not an image).
    """
    values = list(pixels)
    sizes = {len(value) for value in values}
    if sizes - {int(np.prod(shape))}:
        raise _wrong_size(where, shape, sorted(sizes))
    return np.frombuffer(b"".join(values), dtype=np.uint8).reshape(len(values), *_array_shape(shape))


def image_shape(shapes: Iterable[tuple], *, where: str) -> tuple[int, int, int]:
    """The one (height, width, channels) of a table's rows, from the distinct values of its shape columns.

    No rows: the legacy shape (nothing is decoded).

    Raises
    ------
    InputError
        If rows hold images of several shapes, or a shape that is not positive sizes and 1-4 channels.
    """
    distinct = sorted(set(map(tuple, shapes)), key=str)
    if len(distinct) > 1:
        raise InputError(
            f"{where}: expected images of one shape (height, width, channels) in every row, got "
            f"{len(distinct)} shapes such as {distinct[:3]}; write one table per image size, or resize the images"
        )
    shape = distinct[0] if distinct else LEGACY_IMAGE_SHAPE
    if any(size is None or size < 1 for size in shape) or shape[2] not in IMAGE_CHANNELS:
        raise InputError(
            f"{where}: expected height and width >= 1 and channels in {IMAGE_CHANNELS} in every row, got {shape}"
        )
    return tuple(int(size) for size in shape)


def _array_shape(shape: tuple[int, int, int]) -> tuple[int, ...]:
    return shape[:2] if shape[2] == 1 else shape


def unreadable_table(where: str, reason: str) -> InputError:
    """The error for a query table that is not Parquet or is corrupt, as every engine words it."""
    return InputError(f"could not read query table {where} as Parquet: {reason}")


def _wrong_size(where: str, shape: tuple[int, int, int], sizes: list[int]) -> InputError:
    size = "x".join(map(str, _array_shape(shape)))
    return InputError(
        f"{where}: expected `pixels` of {int(np.prod(shape))} bytes (a {size} uint8 image), got values of "
        f"{sizes[:5]} bytes"
    )


def to_arrow(data: ArraySet, label_column: str = DEFAULT_LABEL_COLUMN) -> pa.Table:
    """One set as a query table in memory: images with their shape, or a table's feature columns.

    A table's labels go in ``label_column``, so that the audit reads it with the ``--label-column``
    its other files take; images' labels are always in ``label``.
    """
    ids = {"label": pa.array(data.y), "index": pa.array(data.index)}
    if data.kind == "table":
        ids = {label_column: ids["label"], "index": ids["index"]}
        features = {name: pa.array(data.x[:, i]) for i, name in enumerate(data.features)}
        reserved = [name for name in data.features if name in QUERY_COLUMNS]
        if reserved:
            raise InputError(
                f"{data.name}: expected feature names other than {listed_names(list(QUERY_COLUMNS))} for a query "
                f"table, got {listed_names(reserved)}; rename those columns"
            )
        return pa.table({**ids, **features})
    shape = data.x.shape[1:] if data.x.ndim == 4 else (*data.x.shape[1:], 1)
    flat = np.ascontiguousarray(data.x).reshape(len(data), -1)
    offsets = np.arange(len(data) + 1, dtype=np.int64) * np.int64(flat.shape[1])  # 64-bit: chunks over 2 GB
    pixels = pa.Array.from_buffers(pa.large_binary(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(flat)])
    sizes = {
        name: pa.array(np.full(len(data), size, dtype=np.int32))
        for name, size in zip(SHAPE_COLUMNS, shape, strict=True)
    }
    return pa.table({**ids, "pixels": pixels, **sizes})


def write_table(chunks: Iterable[ArraySet], out_dir: Path, *, label_column: str = DEFAULT_LABEL_COLUMN) -> Path:
    """Write sets, one after another, as one query table ``out_dir/part-00000.parquet``; returns ``out_dir``.

    Chunks are written as they come, so a table larger than memory can be written from a
    generator; all must be of one kind and shape (or feature columns). The file appears whole
    or not at all. A table of features keeps its labels in ``label_column``.

    Raises
    ------
    InputError
        If a chunk is not like the first (another image shape, other features), or there is none.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / PART_FILE
    partial = path.with_name(path.name + ".partial")
    writer, first = None, None
    try:
        for chunk in chunks:
            first = chunk if first is None else first
            if (chunk.x.shape[1:], chunk.features) != (first.x.shape[1:], first.features):
                raise InputError(
                    f"{chunk.name}: expected every chunk of a query table to be like the first ({first.describe()}), "
                    f"got {chunk.describe()}"
                )
            table = to_arrow(chunk, label_column)
            writer = writer or pq.ParquetWriter(partial, table.schema)
            writer.write_table(table, row_group_size=ROWS_PER_GROUP)
        if writer is None:
            raise InputError(f"expected at least one set to write as query table {out_dir}, got none")
        writer.close()
    except BaseException:
        if writer is not None:
            writer.close()
        partial.unlink(missing_ok=True)
        raise
    partial.replace(path)
    return out_dir


def read_table(
    path: str | Path,
    *,
    max_images: int = DEFAULT_MAX_QUERY,
    label_column: str = DEFAULT_LABEL_COLUMN,
    allow_missing: bool = False,
    option: str | None = None,
) -> ArraySet:
    """Read a local query table (a Parquet file or folder) whole, for the in-process engine.

    The row count comes from the Parquet metadata first: a table of more than ``max_images``
    rows is refused before any row is read. A table of features has its labels in ``label_column``.

    Raises
    ------
    InputError
        If the path is missing, not Parquet, holds more than ``max_images`` rows, lacks a
        column, holds images of several shapes or of another size than its shape columns say,
        or (a table of features) a value that is not a finite number (a missing one, NaN or null, is kept as
        NaN with ``allow_missing``; a refusal names ``option`` as what lets it through).
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"expected a query table (a Parquet file or folder) at {path}, found nothing there")
    try:
        check_set_size(ds.dataset(path, format="parquet").count_rows(), limit=max_images, where=str(path), unit="rows")
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise unreadable_table(str(path), str(exc).splitlines()[0]) from exc
    types = {field.name: field.type for field in table.schema}
    if check_columns(types, where=str(path), label_column=label_column) == "table":
        frame = table.to_pandas()
        return labelled_set(
            frame, path.name, label_column=label_column, where=str(path), allow_missing=allow_missing, option=option
        )
    shape_columns = [column for column in SHAPE_COLUMNS if column in types]
    empty = [column for column in (*QUERY_COLUMNS, *shape_columns) if table.column(column).null_count]
    if empty:
        raise InputError(f"{path}: expected a value in every row, got nulls in columns {empty}")
    shape = LEGACY_IMAGE_SHAPE
    if shape_columns:
        sizes = np.stack([table.column(column).to_numpy() for column in SHAPE_COLUMNS], axis=1)
        shape = image_shape(map(tuple, np.unique(sizes, axis=0).tolist()), where=str(path))
    return ArraySet(
        path.name,
        _images_from_arrow(table.column("pixels"), shape, where=str(path)),
        table.column("label").to_numpy().astype(np.int64),
        table.column("index").to_numpy().astype(np.int64),
    )


def _images_from_arrow(column: pa.ChunkedArray, shape: tuple[int, int, int], *, where: str) -> np.ndarray:
    """The ``pixels`` column as uint8 images of ``shape``, straight from Arrow's buffers (no Python bytes per row)."""
    pixels = column.cast(pa.large_binary()).combine_chunks()
    offsets = np.frombuffer(pixels.buffers()[1], dtype=np.int64)[pixels.offset : pixels.offset + len(pixels) + 1]
    sizes = np.unique(np.diff(offsets))
    if sizes.size and (sizes != int(np.prod(shape))).any():
        raise _wrong_size(where, shape, sizes.tolist())
    data = np.frombuffer(pixels.buffers()[2] or b"", dtype=np.uint8)[offsets[0] : offsets[-1]]
    return data.reshape(len(pixels), *_array_shape(shape))


def check_columns(types: dict[str, object], *, where: str, label_column: str = DEFAULT_LABEL_COLUMN) -> str:
    """The kind of a query table (``"image"`` or ``"table"``) from its columns' types (name -> Arrow type or
    Spark's simple type name), after refusing missing columns and wrong types.

    Raises
    ------
    InputError
        An image table without ``label``, ``index`` or ``pixels``, with some but not all shape
        columns, or with a column of the wrong type; a table of features without its label
        column, or with a column that does not hold numbers.
    """
    if table_kind(types) == "table":
        _check_feature_columns(types, where=where, label_column=label_column)
        return "table"
    shape_columns = [name for name in SHAPE_COLUMNS if name in types]
    required = [*QUERY_COLUMNS, *(SHAPE_COLUMNS if shape_columns else ())]
    missing = [name for name in required if name not in types]
    if missing:
        raise InputError(
            f"{where}: expected columns {', '.join(f'{k} ({v})' for k, v in QUERY_COLUMNS.items())}, and "
            f"{', '.join(SHAPE_COLUMNS)} (integers) or none of them, missing {missing}; found {sorted(types)}"
        )
    kinds = {
        "label": _is_integer,
        "index": _is_integer,
        "pixels": _is_binary,
        **dict.fromkeys(shape_columns, _is_integer),
    }
    wrong = {name: str(types[name]) for name, ok in kinds.items() if not ok(types[name])}
    if wrong:
        raise InputError(
            f"{where}: expected integer label, index and shape columns and binary pixels, got types {wrong}"
        )
    return "image"


def _check_feature_columns(types: dict[str, object], *, where: str, label_column: str) -> None:
    if label_column not in types:
        raise InputError(
            f"{where}: expected a query table of images (columns label, index, pixels) or of features with a label "
            f"column {label_column!r} (name it with --label-column), got columns {listed_names(sorted(types))}"
        )
    not_numbers = [
        name
        for name, kind in types.items()
        if not (_is_integer(kind) if name in (label_column, INDEX_COLUMN) else _is_number(kind) or _is_text(kind))
    ]
    if not_numbers:
        raise InputError(
            f"{where}: expected numbers or text in every column of a table of features (integers in "
            f"{label_column!r} and {INDEX_COLUMN!r}), got {listed_names([f'{n} ({types[n]})' for n in not_numbers])}; "
            "encode them as numbers or text first, or name an image table's image column `pixels`"
        )


def _is_integer(kind: object) -> bool:
    if isinstance(kind, pa.DataType):
        return pa.types.is_integer(kind)
    return str(kind) in SPARK_INTEGER_TYPES


def _is_number(kind: object) -> bool:
    if isinstance(kind, pa.DataType):
        return pa.types.is_integer(kind) or pa.types.is_floating(kind)
    return str(kind) in SPARK_NUMBER_TYPES


def _is_text(kind: object) -> bool:
    """Text, or categories of text (pandas' categorical: a Parquet dictionary, which Spark reads as text)."""
    if isinstance(kind, pa.DataType):
        if pa.types.is_dictionary(kind):
            return _is_text(kind.value_type)
        return pa.types.is_string(kind) or pa.types.is_large_string(kind)
    return str(kind) == "string"


def _is_binary(kind: object) -> bool:
    if isinstance(kind, pa.DataType):
        return pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
    return str(kind) == "binary"
