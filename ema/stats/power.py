"""Power of the test of H0 "removed", and the query size it needs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ema.errors import InputError
from ema.stats._beta_binomial import betabinom_pmf
from ema.stats.placement import cutoff_ranks
from ema.validation import check_open_unit, check_positive_int


@dataclass(frozen=True, kw_only=True)
class QuerySizeResult:
    """The smallest query size at which a member set is told apart from non-members.

    Attributes
    ----------
    n_required : int or None
        Smallest |D_q| reaching ``target_power`` (None when no size up to ``max_n`` does).
    power : float
        Power achieved at ``n_required`` (at ``max_n`` when None).
    target_power : float
    alpha : float
        Family-wise significance level; each test runs at ``alpha / n_tests``.
    n_tests : int
    level : float
        Reference quantile level of the test that reaches the power.
    signal_index : int
        Row of ``member_rates`` of that test.
    """

    n_required: int | None
    power: float
    target_power: float
    alpha: float
    n_tests: int
    level: float
    signal_index: int


def _removal_power(
    n: int, member_rates: np.ndarray, ranks: np.ndarray, n_reference: int, test_alpha: float
) -> np.ndarray:
    """Power of each tail test of H0 removed on n members; member_rates (n_signals, n_levels)."""
    pmf = betabinom_pmf(n, ranks, n_reference + 1 - ranks)  # (n_levels, n + 1)
    # The largest count that is still rejected (-1 when even 0 is not).
    critical = (np.cumsum(pmf, axis=-1) <= test_alpha).sum(axis=-1) - 1
    power = stats.binom.cdf(critical[None, :], n, member_rates)
    return np.where(critical[None, :] >= 0, power, 0.0)


def required_query_size(
    member_rates: np.ndarray,
    levels: np.ndarray,
    n_reference: int,
    *,
    alpha: float = 0.1,
    power: float = 0.9,
    n_tests: int | None = None,
    max_n: int = 100_000,
) -> QuerySizeResult:
    """Smallest query size at which a member set is called memorized with the given power.

    Parameters
    ----------
    member_rates : array_like of shape (n_levels,) or (n_signals, n_levels)
        Share of the target's members at or below each reference cut-off (e.g.
        ``MemberTailCurve.rates(levels).rate`` of each metric).
    levels : array_like of shape (n_levels,)
        Quantile levels of the cut-offs in the reference.
    n_reference : int
        Reference samples (the target's non-members) the cut-offs come from.
    alpha : float
        Family-wise significance level of the test of H0 "removed".
    power : float
        Required probability of rejecting H0 "removed" for a member set.
    n_tests : int, optional
        Size of the corrected family; ``member_rates.size`` by default.
    max_n : int
        Largest size considered.

    Returns
    -------
    QuerySizeResult

    Notes
    -----
    The power is exact for each test: the critical count comes from the placement law
    (:func:`placement_pvalues`) at level ``alpha / n_tests`` (Holm's first step, which decides
    whether H0 "removed" is rejected), and a member set's tail count is Binomial(n, member
    rate). The family rejects when any test does, so its power is at least that of the best
    test, which is what is used: the size returned is enough, possibly more than needed. The
    "memorized" verdict additionally needs H0 "retained" not to be rejected, which for a
    member set fails with probability at most alpha; so P(memorized) >= power - alpha. The
    power is a saw-toothed function of n (counts are discrete); the size is found by doubling
    and bisection on it.

    Examples
    --------
    >>> required_query_size([0.01, 0.02], [0.05, 0.1], 2000, alpha=0.1).n_required < 200
    True
    """
    member_rates, levels, n_tests = _check_power_arguments(
        member_rates, levels, n_reference, alpha, power, n_tests, max_n
    )
    ranks = cutoff_ranks(int(n_reference), levels)
    test_alpha = alpha / n_tests

    def best(n: int) -> tuple[float, int, int]:
        table = _removal_power(n, member_rates, ranks, int(n_reference), test_alpha)
        metric, level = np.unravel_index(int(np.argmax(table)), table.shape)
        return float(table[metric, level]), int(metric), int(level)

    n_required = smallest_size(lambda n: best(n)[0] >= power, max_n)
    achieved, metric, level = best(max_n if n_required is None else n_required)
    return QuerySizeResult(
        n_required=n_required,
        power=achieved,
        target_power=float(power),
        alpha=float(alpha),
        n_tests=int(n_tests),
        level=float(levels[level]),
        signal_index=metric,
    )


def _check_power_arguments(
    member_rates: np.ndarray,
    levels: np.ndarray,
    n_reference: int,
    alpha: float,
    power: float,
    n_tests: int | None,
    max_n: int,
) -> tuple[np.ndarray, np.ndarray, int]:
    """The arguments of :func:`required_query_size` checked; member rates (2-D), levels and n_tests."""
    check_open_unit("alpha", alpha)
    check_open_unit("power", power)
    levels = np.atleast_1d(np.asarray(levels, dtype=np.float64))
    member_rates = np.atleast_2d(np.asarray(member_rates, dtype=np.float64))
    if levels.ndim != 1 or member_rates.shape[-1] != levels.size or member_rates.ndim != 2:
        raise InputError(
            f"expected `member_rates` of shape (n_levels,) or (n_signals, n_levels) with n_levels = {levels.size}, "
            f"got shape {member_rates.shape}"
        )
    if np.any((levels <= 0) | (levels >= 1)) or np.any((member_rates < 0) | (member_rates > 1)):
        raise InputError(
            f"expected levels in (0, 1) and member rates in [0, 1], got {levels.tolist()} and {member_rates.tolist()}"
        )
    check_positive_int("n_reference", n_reference)
    check_positive_int("max_n", max_n)
    n_tests = member_rates.size if n_tests is None else n_tests
    if not (isinstance(n_tests, (int, np.integer)) and n_tests >= member_rates.size):
        raise InputError(
            f"expected `n_tests` to be an integer >= {member_rates.size} (the tests given), got {n_tests!r}"
        )
    return member_rates, levels, n_tests


def smallest_size(reaches: Callable[[int], bool], max_n: int) -> int | None:
    """Smallest n in 1..max_n where ``reaches(n)``, by doubling then bisection (None if not even at max_n).

    Bisection assumes ``reaches`` turns true for good; for the saw-toothed power it returns a
    size that reaches it, not always the very first.
    """
    low, high = 0, 1
    while not reaches(high):
        if high >= max_n:
            return None
        low, high = high, min(2 * high, max_n)
    while high - low > 1:
        middle = (low + high) // 2
        if reaches(middle):
            high = middle
        else:
            low = middle
    return high
