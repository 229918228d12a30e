"""The paper's aggregation: a two-sample test of the membership vector against all ones.

The membership vector M (1 = flagged as member) is compared with an all-ones vector of the
same length by a two-sample test; the p-value is rho_EMA.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from ema.errors import InputError
from ema.validation import check_choice

#: The two-sample tests of the paper: Student's t (main results) and Kolmogorov-Smirnov (ablation).
EMA_TESTS = ("t", "ks")
#: Up to this many samples per side, the KS p-value is exact (scipy's ``ks_2samp`` ``method="auto"`` limit).
KS_EXACT_MAX_N = 10_000


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
    return ema_pvalue_from_counts(int(flags.sum()), flags.size, test)


def ema_pvalue_from_counts(n_flagged: int, n: int, test: Literal["t", "ks"] = "t") -> EMATestResult:
    """rho_EMA from the two numbers it depends on: how many of the ``n`` query samples are flagged.

    A membership vector of 0s and 1s is summed up by its count of ones: its mean, its
    variance and its empirical distribution follow from it, so both tests of
    :func:`ema_pvalue` are functions of ``(n_flagged, n)``. An audit whose flags were
    counted elsewhere (a Spark job's aggregate) gets the same p-value, to the bit, as one
    holding the vector: :func:`ema_pvalue` itself counts and calls this.

    Parameters
    ----------
    n_flagged : int
        Samples flagged as members, 0 <= n_flagged <= n.
    n : int
        Samples in the query set, >= 1.
    test : {"t", "ks"}
        As in :func:`ema_pvalue`.

    Returns
    -------
    EMATestResult

    Notes
    -----
    The t-test is Student's pooled two-sample test from summary statistics: M has mean
    n_flagged / n and sample variance n_flagged (n - n_flagged) / (n (n - 1)), the all-ones
    vector mean 1 and variance 0. The KS distance is the share of unflagged samples; its
    p-value is the exact two-sample distribution up to :data:`KS_EXACT_MAX_N` samples per
    side and Smirnov's asymptotic one above (``scipy.stats.ks_2samp``'s ``method="auto"``).

    Examples
    --------
    >>> round(ema_pvalue_from_counts(4, 5).pvalue, 2)
    0.35
    >>> ema_pvalue_from_counts(4, 5, test="ks").statistic
    0.2
    """
    n_flagged, n = _check_counts(n_flagged, n)
    check_choice("test", test, EMA_TESTS)
    if n_flagged == n:
        return EMATestResult(statistic=0.0, pvalue=1.0, test=test, n=n)
    if test == "t":
        mean = n_flagged / n
        std = math.sqrt(n_flagged * (n - n_flagged) / (n * (n - 1))) if n > 1 else math.nan
        with np.errstate(divide="ignore", invalid="ignore"):
            statistic, pvalue = stats.ttest_ind_from_stats(mean, std, n, 1.0, 0.0, n, equal_var=True)
    elif n <= KS_EXACT_MAX_N:
        # small enough to hand scipy the vectors (at most 2 x 10,000 values): its exact distribution as it is
        unflagged = n - n_flagged
        flags = np.concatenate([np.zeros(unflagged), np.ones(n_flagged)])
        with warnings.catch_warnings():
            # for some counts scipy's exact KS distribution does not converge and it falls back
            # to the asymptotic one, which it says in a warning; the p-value it returns is that one.
            warnings.filterwarnings(
                "ignore", message="ks_2samp: Exact calculation unsuccessful", category=RuntimeWarning
            )
            statistic, pvalue = stats.ks_2samp(flags, np.ones(n), method="exact")
    else:
        statistic = (n - n_flagged) / n
        pvalue = float(np.clip(stats.kstwo.sf(statistic, np.round(n / 2)), 0.0, 1.0))
    return EMATestResult(statistic=float(statistic), pvalue=float(pvalue), test=test, n=n)


def _check_counts(n_flagged: int, n: int) -> tuple[int, int]:
    """Refuse counts that no membership vector has."""
    if (
        isinstance(n_flagged, bool)
        or isinstance(n, bool)
        or not all(isinstance(v, (int, np.integer)) for v in (n_flagged, n))
    ):
        raise InputError(f"expected integer counts, got n_flagged={n_flagged!r}, n={n!r}")
    if n < 1 or not 0 <= n_flagged <= n:
        raise InputError(f"expected 0 <= n_flagged <= n and n >= 1, got n_flagged={n_flagged}, n={n}")
    return int(n_flagged), int(n)
