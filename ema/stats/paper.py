"""The paper's aggregation: a two-sample test of the membership vector against all ones.

The membership vector M (1 = flagged as member) is compared with an all-ones vector of the
same length by a two-sample test; the p-value is rho_EMA.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from ema.errors import InputError
from ema.validation import check_choice

#: The two-sample tests of the paper: Student's t (main results) and Kolmogorov-Smirnov (ablation).
EMA_TESTS = ("t", "ks")


@dataclass(frozen=True)
class EMATestResult:
    """rho_EMA with the test that produced it, as scipy.stats returns its test results.

    Attributes
    ----------
    statistic : float
        The two-sample statistic of M against the all-ones vector: Student's t (negative:
        M's mean is below 1) or the Kolmogorov-Smirnov distance D (the share of unflagged
        samples). 0.0 when every sample is flagged.
    pvalue : float
        rho_EMA, two-sided. 1.0 when every sample is flagged; NaN for the t-test of a single
        sample (no degrees of freedom).
    test : {"t", "ks"}
        The test, as asked for.
    n : int
        Samples in the membership vector (the query size |D_q|).
    """

    statistic: float
    pvalue: float
    test: str
    n: int


def check_flags(flags: np.ndarray) -> np.ndarray:
    """Validate a non-empty 1-D vector of 0/1 (or bool) flags and return it as float64."""
    flags = np.asarray(flags)
    if flags.ndim != 1 or flags.size == 0:
        raise InputError(f"expected a non-empty 1-D membership vector, got shape {flags.shape}")
    if not np.isin(flags, (0, 1)).all():
        raise InputError("expected membership flags of 0 or 1, got other values")
    return flags.astype(np.float64)


def ema_pvalue(flags: np.ndarray, test: Literal["t", "ks"] = "t") -> EMATestResult:
    """rho_EMA: p-value of a two-sample test of the membership vector against all ones.

    Parameters
    ----------
    flags : ndarray of shape (n_query,)
        1 where a query sample is flagged as a member.
    test : {"t", "ks"}
        ``"t"``: Student's two-sample t-test with pooled variance (the paper's main
        results); ``"ks"``: the two-sample Kolmogorov-Smirnov test (its ablation).

    Returns
    -------
    EMATestResult
        ``pvalue`` is rho_EMA; 1.0 when every sample is flagged (the vectors are equal).

    Raises
    ------
    InputError
        On flags that are not a non-empty 1-D vector of 0 and 1, or an unknown ``test``.

    Notes
    -----
    H0: M and the all-ones vector come from the same distribution, i.e. the query set is
    memorized. A small p-value (<= alpha) says the query set is not memorized. The t-test
    p-value depends on the number of unflagged samples far more than on their share.

    Examples
    --------
    >>> result = ema_pvalue(np.array([1, 1, 1, 1, 0]))
    >>> round(result.pvalue, 2), result.test, result.n
    (0.35, 't', 5)
    >>> ema_pvalue(np.array([1, 1, 1, 1, 0]), test="ks").statistic
    0.2
    """
    flags = check_flags(flags)
    check_choice("test", test, EMA_TESTS)
    if flags.all():
        return EMATestResult(statistic=0.0, pvalue=1.0, test=test, n=flags.size)
    ones = np.ones_like(flags)
    if test == "t":
        with warnings.catch_warnings():
            # scipy warns that the all-ones sample is constant; its variance is exactly 0 and the
            # pooled variance comes from M alone, so the p-value is exact.
            warnings.filterwarnings("ignore", message="Precision loss occurred", category=RuntimeWarning)
            result = stats.ttest_ind(flags, ones, equal_var=True)
    else:
        with warnings.catch_warnings():
            # for some counts scipy's exact KS distribution does not converge and it falls back
            # to the asymptotic one, which it says in a warning; the p-value it returns is that one.
            warnings.filterwarnings(
                "ignore", message="ks_2samp: Exact calculation unsuccessful", category=RuntimeWarning
            )
            result = stats.ks_2samp(flags, ones)
    return EMATestResult(statistic=float(result.statistic), pvalue=float(result.pvalue), test=test, n=flags.size)
