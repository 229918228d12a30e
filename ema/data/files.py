"""Split and query files: ``.npz`` with arrays ``x`` (uint8, N x 28 x 28), ``y`` (int64), ``index`` (int64).

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

from ema.data.arrays import IMAGE_SHAPE, ArraySet
from ema.data.limits import DEFAULT_MAX_QUERY, check_set_size
from ema.errors import InputError

REQUIRED_ARRAYS = ("x", "y")
#: Positions in the source; 0..n-1 when a file leaves it out.
OPTIONAL_ARRAYS = ("index",)
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
            np.savez_compressed(handle, x=data.x, y=data.y, index=data.index)
        if overwrite:
            os.replace(partial, path)
        else:
            _publish_new(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


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
    """Whether ``path`` is a set file holding exactly ``data``'s arrays (images, labels, positions).

    Anything else (a missing or unreadable file, another format, other values) is False.
    """
    try:
        found = read_set(path, image_shape=data.x.shape[1:3])
    except (InputError, OSError):
        return False
    return all(np.array_equal(getattr(found, name), getattr(data, name)) for name in ("x", "y", "index"))


def read_set(
    path: Path, *, image_shape: tuple[int, int] = IMAGE_SHAPE, max_images: int = DEFAULT_MAX_QUERY
) -> ArraySet:
    """Read and validate a query file written by :func:`write_set` or by a user.

    Never unpickles: object arrays are refused. Each array's declared shape and dtype
    are checked against the size its archive member stores, and that size against what
    its compressed bytes can expand to, and the number of images against ``max_images``,
    before anything is allocated: a small file that inflates to millions of images is
    refused from its headers.

    Raises
    ------
    InputError
        If the file is missing, empty, not an ``.npz`` (a ``.npy``, a pickle, other bytes),
        a damaged archive, lacks an array, declares more data than it holds or more than
        ``max_images`` images, or an array has the wrong dtype or shape, or the set is empty.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"query file {path} does not exist")
    height, width = image_shape
    expected = (
        f"{path}: expected an .npz file with arrays x (uint8, N x {height} x {width}), y (int64, N) and "
        "optionally index (int64, N), as numpy.savez writes"
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
            _check_declared(declared, path, image_shape)
            check_set_size(declared["x"][0][0], limit=max_images, where=str(path))
            arrays = {name: _read_member(archive, members[name]) for name in present}
    except InputError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError, RuntimeError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise InputError(f"{expected}, got a damaged or unreadable archive: {message}") from exc
    if arrays["x"].shape[0] == 0:
        raise InputError(f"{path}: expected at least one image, got an empty query set")
    index = arrays.get("index", np.arange(len(arrays["y"]), dtype=np.int64))
    return ArraySet(path.stem, arrays["x"], arrays["y"], index)


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
        raise InputError(f"{where}: expected numpy arrays without pickled objects, got dtype {dtype}")
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
    stored = info.file_size - header_size
    most = info.compress_size * (MAX_DEFLATE_RATIO if info.compress_type == zipfile.ZIP_DEFLATED else 1)
    if declared != stored or info.file_size > most or info.compress_size > path.stat().st_size:
        raise InputError(
            f"{where}: declares an array of shape {shape} and dtype {dtype} ({declared} bytes), but the archive "
            f"holds {stored} bytes of data ({info.compress_size} compressed); the file is truncated or forged"
        )
    return shape, dtype


def _check_declared(declared: dict, path: Path, image_shape: tuple[int, int]) -> None:
    """Refuse wrong shapes and dtypes from the headers alone, before reading any data."""
    shape, dtype = declared["x"]
    if len(shape) != 3 or shape[1:] != image_shape:
        raise InputError(f"{path}: expected `x` of shape (n, {image_shape[0]}, {image_shape[1]}), got {shape}")
    if dtype != np.uint8:
        raise InputError(f"{path}: expected `x` as uint8 images of shape (n, height, width), got {dtype} of {shape}")
    for name in ("y", *(n for n in OPTIONAL_ARRAYS if n in declared)):
        other_shape, other_dtype = declared[name]
        if other_dtype != np.int64 or other_shape != (shape[0],):
            raise InputError(
                f"{path}: expected `{name}` as int64 of shape ({shape[0]},), got {other_dtype} of shape {other_shape}"
            )


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """The array of a member whose header :func:`_declared_array` has checked."""
    with archive.open(info) as member:
        return np.lib.format.read_array(member, allow_pickle=False)
