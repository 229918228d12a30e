"""Split and query files: ``.npz`` with arrays ``x``, ``y`` (integers), optional ``index`` and ``features``;
``.csv`` and ``.parquet`` tables (:mod:`ema.data.tables`).

``x`` holds images (uint8, (n, H, W) or (n, H, W, C), any size) or a table of numbers (n, d),
whose column names an optional ``features`` array of strings gives.

Query, reference and calibration-member files come from users: :func:`read_set` checks
what each array's header declares against what the archive can hold before reading it,
so a small hostile file never makes it allocate more than the file can expand to, and
never unpickles.
"""

from __future__ import annotations

import errno
import os
import uuid
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ema.data.arrays import ArraySet
from ema.data.limits import DEFAULT_MAX_QUERY, check_set_size
from ema.data.tables import DEFAULT_LABEL_COLUMN, TABLE_SUFFIXES, check_finite_cells, read_feature_table
from ema.errors import InputError
from ema.inputs import IMAGE_CHANNELS, text_columns

REQUIRED_ARRAYS = ("x", "y")
#: Positions in the source (0..n-1 when a file leaves it out); a table's column names; a table's text columns
#: (``text``: their cells as strings, (N, k); ``text_columns``: their positions in ``x``, whose cells there are 0).
OPTIONAL_ARRAYS = ("index", "features", "text", "text_columns")
#: How files start: a zip archive (an .npz; an empty archive), a single .npy array, a pickle.
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
NPY_MAGIC = b"\x93NUMPY"
PICKLE_MAGIC = b"\x80"
#: Deflate expands data at most about 1032-fold: an honest member holds at most this many bytes per stored byte.
MAX_DEFLATE_RATIO = 1032
#: .npy header versions whose header numpy's public API reads (numpy writes 1.0 unless the header is huge).
NPY_VERSIONS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
#: Compression methods numpy.savez / savez_compressed write.
NPZ_COMPRESSIONS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)


def write_set(data: ArraySet, path: Path, *, overwrite: bool = True) -> Path:
    """Write one set as a compressed ``.npz``; the file appears whole or not at all.

    The arrays go to a new file of a unique name in ``path``'s folder, which then takes
    ``path``'s place in one step. With ``overwrite=False`` nothing already at ``path`` (a file,
    a link, a folder) is ever replaced, not even one that appears while the set is written.

    Raises
    ------
    FileExistsError
        With ``overwrite=False``, if something is at ``path``.
    OSError
        If the folder does not exist or cannot be written.
    """
    path = Path(path)
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.partial")
    try:
        with partial.open("xb") as handle:
            features = {} if data.features is None else {"features": np.array(data.features, dtype=str)}
            np.savez_compressed(handle, y=data.y, index=data.index, **features, **_input_arrays(data.x))
        if overwrite:
            os.replace(partial, path)
        else:
            _publish_new(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def _input_arrays(x: np.ndarray) -> dict[str, np.ndarray]:
    """A set's inputs as ``.npz`` arrays without pickled objects: ``x``, and a table's text apart (see
    :data:`OPTIONAL_ARRAYS`)."""
    text = text_columns(x)
    if not text.any():
        return {"x": x}
    numbers = np.zeros(x.shape, dtype=np.float64)
    numbers[:, ~text] = x[:, ~text]
    return {"x": numbers, "text": x[:, text].astype(str), "text_columns": np.flatnonzero(text)}


def _with_text(arrays: dict[str, np.ndarray], *, where: str) -> np.ndarray:
    """``x`` with a table's text columns put back (an object array), as :func:`_input_arrays` set them apart."""
    if "text" not in arrays:
        return arrays["x"]
    positions, width = arrays["text_columns"], arrays["x"].shape[1]
    if len(np.unique(positions)) != len(positions) or not ((positions >= 0) & (positions < width)).all():
        raise InputError(
            f"{where}: expected `text_columns` as distinct columns of `x` (0..{width - 1}), got "
            f"{positions.tolist()[:8]}"
        )
    x = arrays["x"].astype(object)
    x[:, positions] = arrays["text"].astype(object)
    return x


def _publish_new(partial: Path, path: Path) -> None:
    """Give the written ``partial`` the name ``path`` unless something is there: a hard link fails if it is."""
    try:
        os.link(partial, path)
    except FileExistsError:
        raise
    except OSError:  # a filesystem without hard links: check, then move (a writer racing us could still lose)
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, "File exists", str(path)) from None
        os.replace(partial, path)


def holds_set(path: Path, data: ArraySet) -> bool:
    """Whether ``path`` is a set file holding exactly ``data``'s arrays (inputs, labels, positions, features).

    Anything else (a missing or unreadable file, another format, other values) is False.
    """
    try:
        found = read_set(path)
    except (InputError, OSError):
        return False
    same = all(np.array_equal(getattr(found, name), getattr(data, name)) for name in ("x", "y", "index"))
    return same and found.features == data.features


def read_set(
    path: Path,
    *,
    role: str = "set file",
    max_images: int = DEFAULT_MAX_QUERY,
    label_column: str = DEFAULT_LABEL_COLUMN,
    allow_missing: bool = False,
    option: str | None = None,
) -> ArraySet:
    """Read and validate a set file (``.npz``, ``.csv``, ``.parquet``) written by :func:`write_set` or by a user.

    ``.csv`` and ``.parquet`` files are tables whose labels are in ``label_column``
    (:func:`ema.data.tables.read_feature_table`); any other name is read as an ``.npz``.
    ``allow_missing``: a table's missing numbers (NaN) are kept, not refused (infinite ones always are); ``option``:
    what a refusal names as letting them through (None: no option of the command does).
    ``role`` names the file where it is missing, with the option that gave it
    (``"reference file (--reference)"``), so that a user with several files knows which one.

    Raises
    ------
    InputError
        If the file is missing (:func:`check_set_file`), or as :func:`_read_npz` and
        :func:`~ema.data.tables.read_feature_table` refuse it.
    """
    path = Path(path)
    check_set_file(path, role)
    if path.suffix in TABLE_SUFFIXES:
        return read_feature_table(
            path, label_column=label_column, max_images=max_images, allow_missing=allow_missing, option=option
        )
    return _read_npz(path, max_images=max_images, allow_missing=allow_missing, option=option)


def check_set_file(path: Path, role: str) -> None:
    """Refuse a missing set file by its ``role``; a relative path with the absolute one it was looked for at.

    ``mlflow run`` runs an entry point in the project's folder, not the caller's: a relative
    path then names a file there, and only the absolute path shows it.

    >>> check_set_file(Path("no/such.npz"), "reference file (--reference)")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ema.errors.InputError: reference file (--reference) no/such.npz does not exist (looked for /.../no/such.npz; ...
    """
    if path.is_file():
        return
    where = (
        ""
        if path.is_absolute()
        else (
            f" (looked for {path.absolute()}; under `mlflow run` a relative path is read from the project's folder: "
            "pass an absolute path there)"
        )
    )
    raise InputError(f"{role} {path} does not exist{where}")


def resolved_if_present(path: str | Path) -> str:
    """``path`` absolute (links resolved), as lineage records it and caches key it; a missing one as given, so that
    reading it says which path was given and where it was looked for (:func:`check_set_file`)."""
    return str(Path(path).resolve()) if Path(path).exists() else str(path)


def _read_npz(
    path: Path, *, max_images: int = DEFAULT_MAX_QUERY, allow_missing: bool = False, option: str | None = None
) -> ArraySet:
    """Read and validate an ``.npz`` set that exists (:func:`read_set` checked).

    Never unpickles: object arrays are refused. Each array's declared shape and dtype
    are checked against the size its archive member stores, and that size against what
    its compressed bytes can expand to, and the number of images against ``max_images``,
    before anything is allocated: a small file that inflates to millions of images is
    refused from its headers.

    Raises
    ------
    InputError
        If the file is empty, not an ``.npz`` (a ``.npy``, a pickle, other bytes),
        a damaged archive, lacks an array, declares more data than it holds or more than
        ``max_images`` images, or an array has the wrong dtype or shape, or the set is empty.
    """
    expected = (
        f"{path}: expected an .npz file (or a .csv or .parquet table) with arrays x (uint8 images "
        "(N, H, W[, C]) or numbers (N, features)), y (integers, N) and optionally index (integers, N), as "
        "numpy.savez writes"
    )
    with path.open("rb") as handle:
        head = handle.read(len(NPY_MAGIC))
    if not head.startswith(ZIP_MAGICS):
        raise InputError(f"{expected}, got {_describe_start(head)}")
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            members = {info.filename.removesuffix(".npy"): info for info in infos if info.filename.endswith(".npy")}
            missing = [name for name in REQUIRED_ARRAYS if name not in members]
            if missing:
                raise InputError(
                    f"{path}: expected arrays {list(REQUIRED_ARRAYS)}, missing {missing} (found {sorted(members)})"
                )
            present = [name for name in (*REQUIRED_ARRAYS, *OPTIONAL_ARRAYS) if name in members]
            declared = {name: _declared_array(archive, members[name], path) for name in present}
            _check_declared(declared, path)
            check_set_size(declared["x"][0][0], limit=max_images, where=str(path))
            arrays = {name: _read_member(archive, members[name]) for name in present}
    except InputError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError, RuntimeError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise InputError(f"{expected}, got a damaged or unreadable archive: {message}") from exc
    if arrays["x"].shape[0] == 0:
        raise InputError(f"{path}: expected at least one sample, got an empty set")
    index = arrays.get("index", np.arange(len(arrays["y"]), dtype=np.int64)).astype(np.int64)
    features = tuple(arrays["features"].tolist()) if "features" in arrays else None
    if arrays["x"].dtype.kind == "f":
        check_finite_cells(arrays["x"], features, where=str(path), allow_missing=allow_missing, option=option)
    x = _with_text(arrays, where=str(path))
    return ArraySet(path.stem, x, arrays["y"].astype(np.int64), index, features, str(path))


def _describe_start(head: bytes) -> str:
    """What a file that is not a zip archive looks like, from its first bytes."""
    if not head:
        return "an empty file"
    if head.startswith(NPY_MAGIC):
        return "a .npy file (one array, as numpy.save writes); write the arrays with numpy.savez"
    if head.startswith(PICKLE_MAGIC):
        return "what looks like a pickle, which is never loaded"
    return f"a file starting with bytes {head!r}, not a zip archive"


def _declared_array(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype a member's .npy header declares, after checking it can hold them; reads only the header."""
    where = f"{path}: member {info.filename}"
    if info.compress_type not in NPZ_COMPRESSIONS:
        raise InputError(
            f"{where}: expected a stored or deflated member, as numpy.savez writes, got compression method "
            f"{info.compress_type}"
        )
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version not in NPY_VERSIONS:
            raise InputError(f"{where}: expected an .npy header of version 1.0 or 2.0, got {version}")
        shape, _, dtype = NPY_VERSIONS[version](member)
        header_size = member.tell()
    if dtype.hasobject:
        hint = " (write the names with .astype(str))" if info.filename == "features.npy" else ""
        raise InputError(f"{where}: expected numpy arrays without pickled objects, got dtype {dtype}{hint}")
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
    stored = info.file_size - header_size
    most = info.compress_size * (MAX_DEFLATE_RATIO if info.compress_type == zipfile.ZIP_DEFLATED else 1)
    if declared != stored or info.file_size > most or info.compress_size > path.stat().st_size:
        raise InputError(
            f"{where}: declares an array of shape {shape} and dtype {dtype} ({declared} bytes), but the archive "
            f"holds {stored} bytes of data ({info.compress_size} compressed); the file is truncated or forged"
        )
    return shape, dtype


def _check_declared(declared: dict, path: Path) -> None:
    """Refuse wrong shapes and dtypes from the headers alone, before reading any data."""
    shape, dtype = declared["x"]
    is_image = dtype == np.uint8 and (len(shape) == 3 or (len(shape) == 4 and shape[3] in IMAGE_CHANNELS))
    is_table = dtype.kind in "iuf" and len(shape) == 2
    if not (is_image or is_table):
        raise InputError(
            f"{path}: expected `x` as uint8 images of shape (n, height, width[, channels]) or numbers of shape "
            f"(n, features), got {dtype} of shape {shape}"
        )
    for name in ("y", "index"):
        if name not in declared:
            continue
        other_shape, other_dtype = declared[name]
        if other_dtype.kind not in "iu" or other_shape != (shape[0],):
            raise InputError(
                f"{path}: expected `{name}` as integers of shape ({shape[0]},), got {other_dtype} of shape "
                f"{other_shape}"
            )
    if ("text" in declared) != ("text_columns" in declared):
        raise InputError(f"{path}: expected `text` and `text_columns` together (a table's text columns), got one")
    if "text" in declared:
        (text_shape, text_dtype), (where_shape, where_dtype) = declared["text"], declared["text_columns"]
        fits = text_shape == (shape[0], *where_shape)
        if not is_table or text_dtype.kind != "U" or where_dtype.kind not in "iu" or not fits:
            raise InputError(
                f"{path}: expected `text` as strings of shape ({shape[0]}, k) and `text_columns` as k integers (the "
                f"columns of a table `x` they fill), got {text_dtype} of shape {text_shape} and {where_dtype} of "
                f"shape {where_shape}"
            )
    if "features" in declared:
        names_shape, names_dtype = declared["features"]
        if not is_table or names_dtype.kind != "U" or names_shape != (shape[1],):
            raise InputError(
                f"{path}: expected `features` as {shape[1] if is_table else 'no'} strings naming the columns of a "
                f"table `x`, got {names_dtype} of shape {names_shape}"
            )


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """The array of a member whose header :func:`_declared_array` has checked."""
    with archive.open(info) as member:
        return np.lib.format.read_array(member, allow_pickle=False)
