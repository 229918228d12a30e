"""The data that ships with the package, against where it came from."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from ema.data.embedded import DIGITS_FILE, read_shipped


def test_shipped_digits_are_scikit_learns():
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = read_shipped(DIGITS_FILE)
    assert x.dtype == np.uint8
    np.testing.assert_array_equal(x, digits.images)
    np.testing.assert_array_equal(y, digits.target)


def test_drawing_the_embedded_splits_imports_no_scikit_learn():
    probe = "import sys; from ema.data.splits import make_splits; make_splits(0); print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"]
