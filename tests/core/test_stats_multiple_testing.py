"""ema.stats.multiple_testing: family-wise corrections."""

import numpy as np
import pytest

from ema.errors import InputError
from ema.stats import adjust_pvalues


def test_adjust_pvalues_holm_and_bonferroni():
    np.testing.assert_allclose(adjust_pvalues([0.01, 0.04, 0.03], "holm"), [0.03, 0.06, 0.06])
    np.testing.assert_allclose(adjust_pvalues([0.01, 0.04, 0.03], "bonferroni"), [0.03, 0.12, 0.09])
    adjusted = adjust_pvalues(np.array([[0.5, 0.001], [0.9, 0.2]]))
    assert adjusted.shape == (2, 2)
    assert adjusted.min() == pytest.approx(0.004)  # Holm's first step is Bonferroni's
    assert adjusted.max() <= 1.0


def test_adjust_pvalues_rejects_bad_input():
    with pytest.raises(InputError, match="expected method in"):
        adjust_pvalues([0.1], "bh")
    with pytest.raises(InputError, match=r"p-values in \[0, 1\]"):
        adjust_pvalues([0.1, 1.2])
