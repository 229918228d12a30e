"""ema.stats.paper: rho_EMA, the t-test and KS test of the membership vector against all ones."""

import dataclasses
import warnings

import numpy as np
import pytest
from scipy import stats

from ema.errors import InputError
from ema.stats import EMATestResult, ema_pvalue, ema_pvalue_from_counts


def flags_with_zeros(n: int, zeros: int) -> np.ndarray:
    return np.r_[np.ones(n - zeros), np.zeros(zeros)]


# Tables 5 and 6 of the paper: |D_q|, number of unflagged samples, printed rho_EMA.
PAPER_PVALUES = [(5, 1, 0.35), (5, 2, 0.14), (20, 1, 0.32), (50, 2, 0.16), (20, 2, 0.15), (200, 1, 0.32)]


@pytest.mark.parametrize(("n", "zeros", "printed"), PAPER_PVALUES)
def test_ema_pvalue_reproduces_paper_tables(n, zeros, printed):
    assert round(ema_pvalue(flags_with_zeros(n, zeros)).pvalue, 2) == printed


def test_ema_pvalue_all_ones_is_one():
    assert ema_pvalue(np.ones(10)).pvalue == 1.0
    assert ema_pvalue(np.ones(10), test="ks").pvalue == 1.0


def test_ema_pvalue_t_depends_on_count_not_share():
    assert ema_pvalue(flags_with_zeros(2000, 3)).pvalue < 0.1 < ema_pvalue(flags_with_zeros(2000, 2)).pvalue


def test_ema_pvalue_ks_depends_on_share_and_size():
    # the same 10% unflagged share is significant at |D_q| = 1000, not at 10
    assert ema_pvalue(flags_with_zeros(1000, 100), test="ks").pvalue < 0.1
    assert ema_pvalue(flags_with_zeros(10, 1), test="ks").pvalue > 0.1
    # while 3 unflagged of 2000 barely moves it
    assert ema_pvalue(flags_with_zeros(2000, 3), test="ks").pvalue > 0.9


def test_ema_pvalue_rejects_non_binary_flags():
    with pytest.raises(InputError, match="0 or 1"):
        ema_pvalue(np.array([1, 2, 1]))


def test_ema_pvalue_rejects_empty():
    with pytest.raises(InputError, match="non-empty"):
        ema_pvalue(np.array([]))


def test_ema_pvalue_rejects_unknown_test():
    with pytest.raises(InputError, match="expected test in"):
        ema_pvalue(np.ones(3), test="z")


def test_ema_pvalue_result_echoes_inputs_and_is_frozen():
    flags = flags_with_zeros(20, 2)
    result = ema_pvalue(flags, test="ks")
    assert isinstance(result, EMATestResult)
    assert (result.test, result.n) == ("ks", 20)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.pvalue = 0.0


@pytest.mark.filterwarnings("ignore:Precision loss occurred")  # scipy on the constant all-ones sample
def test_ema_pvalue_statistics_are_scipys():
    flags = flags_with_zeros(20, 2)
    t_test = stats.ttest_ind(flags, np.ones(20), equal_var=True)
    ks_test = stats.ks_2samp(flags, np.ones(20))
    # from summary statistics (the count of ones), not the vector: equal up to the vector's rounding
    assert ema_pvalue(flags).statistic == pytest.approx(t_test.statistic, rel=1e-12)
    assert ema_pvalue(flags).pvalue == pytest.approx(t_test.pvalue, rel=1e-12)
    assert ema_pvalue(flags, test="ks").statistic == pytest.approx(0.1)
    assert ema_pvalue(flags, test="ks").pvalue == ks_test.pvalue


def test_ema_pvalue_all_ones_statistic_is_zero():
    assert ema_pvalue(np.ones(4), test="t") == EMATestResult(statistic=0.0, pvalue=1.0, test="t", n=4)


@pytest.mark.parametrize("n", [1, 2, 5, 999, 10_000, 10_001, 123_457])
def test_ema_pvalue_from_counts_matches_scipy_on_the_vector(n):
    rng = np.random.default_rng(n)
    for n_flagged in sorted({0, n // 2, max(n - 1, 0), int(0.96 * n)}):
        flags = np.zeros(n)
        flags[rng.choice(n, n_flagged, replace=False)] = 1.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            t_test = stats.ttest_ind(flags, np.ones(n), equal_var=True)
            ks_test = stats.ks_2samp(flags, np.ones(n))
        assert ema_pvalue_from_counts(n_flagged, n, "ks").pvalue == ks_test.pvalue
        assert ema_pvalue_from_counts(n_flagged, n, "t").pvalue == pytest.approx(t_test.pvalue, rel=1e-12, nan_ok=True)


def test_ema_pvalue_from_counts_is_ema_pvalue_of_any_vector_with_those_counts():
    flags = flags_with_zeros(2000, 70)
    shuffled = np.random.default_rng(0).permutation(flags)
    for test in ("t", "ks"):
        assert ema_pvalue(flags, test) == ema_pvalue(shuffled, test) == ema_pvalue_from_counts(1930, 2000, test)


@pytest.mark.parametrize(("n_flagged", "n"), [(-1, 5), (6, 5), (0, 0), (1.0, 5), (True, 5)])
def test_ema_pvalue_from_counts_rejects_impossible_counts(n_flagged, n):
    with pytest.raises(InputError, match="n_flagged"):
        ema_pvalue_from_counts(n_flagged, n)
