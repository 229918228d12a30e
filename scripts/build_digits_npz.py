"""Rebuild ``ema/data/digits_8x8.npz`` from scikit-learn's ``load_digits`` (UCI optdigits).

The other-domain set S is these 1,797 digits resized to 28x28. Shipping the 8x8 originals
(integers 0-16, stored as uint8, 45 KB) lets every command that draws the embedded splits
skip importing scikit-learn. Run from the repository root::

    python scripts/build_digits_npz.py

``tests/data/test_embedded.py`` checks the shipped file against ``load_digits`` wherever
scikit-learn is installed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

OUTPUT = Path(__file__).resolve().parents[1] / "ema" / "data" / "digits_8x8.npz"


def read_digits() -> tuple[np.ndarray, np.ndarray]:
    """Return ``x`` (uint8, 1797 x 8 x 8, values 0-16) and ``y`` (int64), in ``load_digits``'s order."""
    digits = load_digits()
    x = digits.images.astype(np.uint8)
    if not np.array_equal(x, digits.images):
        raise ValueError("expected integer pixel values 0-16 in load_digits().images")
    return x, digits.target.astype(np.int64)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    x, y = read_digits()
    np.savez_compressed(args.output, x=x, y=y)
    print(f"wrote {args.output}: {len(x)} digits of {x.shape[1]}x{x.shape[2]}, values {x.min()}-{x.max()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
