"""Query, reference and calibration-member files from users: one clear line each, no huge allocation."""

from __future__ import annotations

import io
import pickle
import resource
import struct
import zipfile

import numpy as np
import pytest

from ema.data.arrays import ArraySet
from ema.data.files import read_set, write_set
from ema.errors import InputError

EXPECTED = (
    r"expected an \.npz file \(or a \.csv or \.parquet table\) with arrays x \(uint8 images \(N, H, W\[, C\]\) or "
    r"numbers \(N, features\)\), y \(integers, N\) and optionally index \(integers, N\)"
)
#: 73 GiB of uint8 images, as a hostile 4.8 kB file once declared.
HUGE_IMAGES = 73 * 2**30 // 784


def sample_set(n: int = 4) -> ArraySet:
    rng = np.random.default_rng(0)
    return ArraySet(
        "q", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), np.arange(n, dtype=np.int64), np.arange(n) + 7
    )


def npy_bytes(shape, dtype, data: bytes = b"") -> bytes:
    """An .npy header declaring ``shape`` and ``dtype``, followed by ``data`` (whatever its length)."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
    )
    return buffer.getvalue() + data


def write_npz(path, members: dict[str, bytes], compression=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(f"{name}.npy", data)
    return path


def honest_members(n: int = 4) -> dict[str, bytes]:
    data = sample_set(n)
    out = {}
    for name in ("x", "y", "index"):
        buffer = io.BytesIO()
        np.save(buffer, getattr(data, name))
        out[name] = buffer.getvalue()
    return out


def patch_sizes(path, *, compressed: int | None = None, uncompressed: int | None = None) -> None:
    """Forge a member's sizes in both the local header and the central directory."""
    raw = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 18), (b"PK\x01\x02", 20)):
        start = raw.find(signature)
        if compressed is not None:
            raw[start + offset : start + offset + 4] = struct.pack("<I", compressed)
        if uncompressed is not None:
            raw[start + offset + 4 : start + offset + 8] = struct.pack("<I", uncompressed)
    path.write_bytes(bytes(raw))


def assert_refused(path, match: str) -> str:
    with pytest.raises(InputError) as excinfo:
        read_set(path)
    message = str(excinfo.value)
    assert "\n" not in message, message
    assert excinfo.match(match)
    return message


def test_read_set_refuses_npy_file(tmp_path):
    np.save(tmp_path / "q.npy", sample_set().x)
    assert_refused(tmp_path / "q.npy", EXPECTED + r", as numpy.savez writes, got a \.npy file \(one array")


def test_read_set_refuses_npy_named_npz(tmp_path):
    path = tmp_path / "q.npz"
    path.write_bytes(npy_bytes((1, 28, 28), np.uint8, bytes(784)))
    assert_refused(path, EXPECTED + r".*got a \.npy file")


def test_read_set_refuses_empty_file(tmp_path):
    (tmp_path / "q.npz").write_bytes(b"")
    assert_refused(tmp_path / "q.npz", EXPECTED + r".*got an empty file$")


def test_read_set_refuses_random_bytes_without_pickle_hint(tmp_path):
    (tmp_path / "q.npz").write_bytes(np.random.default_rng(0).bytes(4096))
    message = assert_refused(tmp_path / "q.npz", EXPECTED + r".*got a file starting with bytes b'.*', not a zip")
    assert "allow_pickle" not in message


def test_read_set_refuses_pickle(tmp_path):
    (tmp_path / "q.npz").write_bytes(pickle.dumps({"x": 1}))
    assert_refused(tmp_path / "q.npz", EXPECTED + r".*got what looks like a pickle, which is never loaded")


def test_read_set_refuses_corrupt_compressed_stream(tmp_path):
    path = tmp_path / "q.npz"
    write_set(sample_set(64), path)
    raw = bytearray(path.read_bytes())
    start = raw.find(b"x.npy") + len("x.npy") + 40  # inside x's deflated data
    raw[start : start + 64] = bytes(64)
    path.write_bytes(bytes(raw))
    assert_refused(path, EXPECTED + r".*got a damaged or unreadable archive: .*(decompress|CRC|Bad)")


def test_read_set_refuses_truncated_archive(tmp_path):
    path = tmp_path / "q.npz"
    write_set(sample_set(64), path)
    path.write_bytes(path.read_bytes()[:-200])
    assert_refused(path, EXPECTED + r".*got a damaged or unreadable archive")


def test_read_set_refuses_tiny_file_declaring_a_huge_array_without_allocating_it(tmp_path):
    members = honest_members()
    members["x"] = npy_bytes((HUGE_IMAGES, 28, 28), np.uint8, bytes(4096))
    path = write_npz(tmp_path / "q.npz", members)
    assert path.stat().st_size < 10_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert_refused(
        path,
        rf"member x\.npy: declares an array of shape \({HUGE_IMAGES}, 28, 28\) and dtype uint8 \(\d+ bytes\), "
        r"but the archive holds 4096 bytes of data .*truncated or forged",
    )
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB: nothing near 73 GiB


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_read_set_refuses_forged_member_size(tmp_path, compression):
    """The zip directory lies too: a member claims 2 GiB of data that its compressed bytes cannot hold."""
    members = honest_members()
    members["x"] = npy_bytes((2**31 // 784, 28, 28), np.uint8, bytes(1000))
    path = write_npz(tmp_path / "q.npz", members, compression)
    header = len(npy_bytes((2**31 // 784, 28, 28), np.uint8))
    patch_sizes(path, uncompressed=header + 2**31 // 784 * 784)
    assert_refused(path, r"member x\.npy: declares an array .* truncated or forged")


def test_read_set_refuses_forged_compressed_size_beyond_the_file(tmp_path):
    members = honest_members()
    path = write_npz(tmp_path / "q.npz", members, zipfile.ZIP_STORED)
    patch_sizes(path, compressed=2**30, uncompressed=2**30)
    assert_refused(path, r"member x\.npy: declares .* holds 1073741696 bytes .*truncated or forged")


def test_read_set_checks_dtypes_and_shapes_from_headers(tmp_path):
    members = honest_members()
    members["y"] = npy_bytes((4,), np.float64, bytes(32))
    assert_refused(write_npz(tmp_path / "a.npz", members), r"expected `y` as integers of shape \(4,\), got float64")
    members = honest_members()
    members["index"] = npy_bytes((5,), np.int64, bytes(40))
    assert_refused(
        write_npz(tmp_path / "b.npz", members), r"expected `index` as integers of shape \(4,\), got int64 of"
    )


def test_read_set_refuses_other_compression(tmp_path):
    path = write_npz(tmp_path / "q.npz", honest_members(), zipfile.ZIP_BZIP2)
    assert_refused(path, r"member x\.npy: expected a stored or deflated member.*compression method 12")


def test_read_set_still_reads_savez_and_savez_compressed(tmp_path):
    data = sample_set(3)
    np.savez(tmp_path / "a.npz", x=data.x, y=data.y, index=data.index, extra=np.zeros(2))
    assert read_set(tmp_path / "a.npz").fingerprint == data.fingerprint
    assert read_set(write_set(data, tmp_path / "b.npz")).fingerprint == data.fingerprint
