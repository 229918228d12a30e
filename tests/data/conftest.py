"""Tiny data roots written in each loader's on-disk format, under ``tmp_path``."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy.io import savemat

IDX_UBYTE = 0x08


def _write_idx(path: Path, array: np.ndarray) -> Path:
    """Write uint8 ``array`` as an IDX file (gzip-compressed when ``path`` ends in .gz)."""
    header = bytes([0, 0, IDX_UBYTE, array.ndim]) + np.array(array.shape, dtype=">i4").tobytes()
    opener = gzip.open if path.suffix == ".gz" else open
    path.parent.mkdir(parents=True, exist_ok=True)
    with opener(path, "wb") as handle:
        handle.write(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())
    return path


def random_images(n: int, side: int = 28, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, side, side), dtype=np.uint8)


@pytest.fixture
def write_idx():
    """Write a uint8 array as an IDX file: ``write_idx(path, array)``."""
    return _write_idx


@pytest.fixture
def write_svhn():
    """Write an SVHN-style .mat of ``n`` constant-colour images: ``write_svhn(path, n)``."""
    return _write_svhn


@pytest.fixture
def make_idx_root(tmp_path):
    """Write MNIST-named IDX files of ``n_train`` / ``n_test`` images under ``tmp_path / folder``.

    Labels are each image's position modulo 10.
    """

    def make(folder: str, n_train: int = 30, n_test: int = 10, *, suffix: str = "") -> Path:
        for prefix, n in (("train", n_train), ("t10k", n_test)):
            _write_idx(tmp_path / folder / f"{prefix}-images-idx3-ubyte{suffix}", random_images(n, seed=n))
            _write_idx(tmp_path / folder / f"{prefix}-labels-idx1-ubyte{suffix}", np.arange(n, dtype=np.uint8) % 10)
        return tmp_path

    return make


def _write_svhn(path: Path, n: int) -> Path:
    """An SVHN-style .mat: X (32, 32, 3, n) of constant colour per image, y (n, 1) cycling 1..10."""
    colours = np.random.default_rng(n).integers(0, 256, (n, 3), dtype=np.uint8)
    x = np.broadcast_to(colours.T[None, None, :, :], (32, 32, 3, n)).copy()
    y = (np.arange(n) % 10 + 1).astype(np.uint8)[:, None]
    path.parent.mkdir(parents=True, exist_ok=True)
    savemat(path, {"X": x, "y": y})
    return path


@pytest.fixture
def make_chest_root(tmp_path):
    """ROOT/chest_xray/{train,test}/{NORMAL,PNEUMONIA}/ with ``n`` small images per class.

    Images are ``size`` (width, height), else of three widths (40 to 42 by 30). NORMAL images are
    dark, PNEUMONIA images bright; a stray non-image file sits in each folder.
    """

    def make(n: int = 3, size: tuple[int, int] | None = None) -> Path:
        for split in ("train", "test"):
            for name, value in (("NORMAL", 20), ("PNEUMONIA", 230)):
                folder = tmp_path / "chest_xray" / split / name
                folder.mkdir(parents=True)
                for i in range(n):
                    suffix = ".jpeg" if i % 2 == 0 else ".png"
                    Image.new("L", size or (40 + i, 30), color=value).save(folder / f"img{i}{suffix}")
                (folder / ".DS_Store").write_text("not an image")
        return tmp_path

    return make


COVIDX_LINES = {
    "train": [
        ("p1", "a.png", "positive", "src"),
        ("p2", "b.png", "negative", "src"),
        ("p3", "c.png", "COVID-19", "src"),
    ],
    "test": [("p4", "d.png", "normal", "src"), ("p5", "e.png", "pneumonia", "src")],
}


@pytest.fixture
def make_covidx_root(tmp_path):
    """ROOT/{train,test}.txt and ROOT/{train,test}/ with RGB images of :data:`COVIDX_LINES`."""

    def make(lines: dict[str, list[tuple[str, ...]]] = COVIDX_LINES) -> Path:
        for split, entries in lines.items():
            (tmp_path / split).mkdir()
            text = "\n".join(" ".join(entry) for entry in entries) + "\n\n"
            (tmp_path / f"{split}.txt").write_text(text)
            for entry in entries:
                Image.new("RGB", (50, 60), color=(100, 150, 200)).save(tmp_path / split / entry[1])
        return tmp_path

    return make


@pytest.fixture
def make_pneumoniamnist_root(tmp_path):
    """ROOT/pneumoniamnist.npz in MedMNIST's layout; labels (n, 1), alternating 0/1."""

    def make(sizes: dict[str, int] | None = None, side: int = 28) -> Path:
        sizes = sizes or {"train": 20, "val": 4, "test": 6}
        arrays = {}
        for split, n in sizes.items():
            arrays[f"{split}_images"] = random_images(n, side, seed=n)
            arrays[f"{split}_labels"] = (np.arange(n) % 2).astype(np.uint8)[:, None]
        np.savez(tmp_path / "pneumoniamnist.npz", **arrays)
        return tmp_path

    return make
