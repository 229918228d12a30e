"""Set-level decisions on membership vectors and scores, one topic per module.

* :mod:`ema.stats.paper`: the paper's aggregation, a two-sample test (t or KS) of the
  membership vector against all ones; its p-value is rho_EMA.
* :mod:`ema.stats.placement`: cut-offs at reference order statistics and exact placement
  (beta-binomial) tests of a query's low tail against them (H0 "removed").
* :mod:`ema.stats.member_tails`: the member tail curve measured on a calibration model, and
  beta-binomial tests against it (H0 "retained").
* :mod:`ema.stats.multiple_testing`: family-wise corrections (Holm, Bonferroni).
* :mod:`ema.stats.retained`: the retained fraction with an interval, and a target-only lower
  bound on it.
* :mod:`ema.stats.power`: the query size needed for a given power.

Every public name is importable from ``ema.stats`` itself.
"""

from ema.stats._results import TAIL_ALTERNATIVES, ConfidenceInterval, TailTestResult
from ema.stats.member_tails import (
    JEFFREYS_PSEUDOCOUNT,
    MemberTailCurve,
    MemberTailRates,
    member_tail_curve,
    member_tail_pvalues,
    member_tail_test,
)
from ema.stats.multiple_testing import CORRECTIONS, adjust_pvalues
from ema.stats.paper import EMA_TESTS, KS_EXACT_MAX_N, EMATestResult, check_flags, ema_pvalue, ema_pvalue_from_counts
from ema.stats.placement import (
    StratifiedCutoffs,
    cutoff_ranks,
    expected_cutoff_levels,
    order_statistic_level_variance,
    placement_pvalues,
    reference_tail_test,
    stratified_cutoffs,
)
from ema.stats.power import QuerySizeResult, required_query_size
from ema.stats.retained import (
    DEFAULT_INTERVAL_DRAWS,
    RetainedFraction,
    RetainedLowerBound,
    retained_fraction_interval,
    retained_lower_bound,
)

__all__ = [
    "CORRECTIONS",
    "DEFAULT_INTERVAL_DRAWS",
    "EMA_TESTS",
    "JEFFREYS_PSEUDOCOUNT",
    "KS_EXACT_MAX_N",
    "TAIL_ALTERNATIVES",
    "ConfidenceInterval",
    "EMATestResult",
    "MemberTailCurve",
    "MemberTailRates",
    "QuerySizeResult",
    "RetainedFraction",
    "RetainedLowerBound",
    "StratifiedCutoffs",
    "TailTestResult",
    "adjust_pvalues",
    "check_flags",
    "cutoff_ranks",
    "ema_pvalue",
    "ema_pvalue_from_counts",
    "expected_cutoff_levels",
    "member_tail_curve",
    "member_tail_pvalues",
    "member_tail_test",
    "order_statistic_level_variance",
    "placement_pvalues",
    "reference_tail_test",
    "required_query_size",
    "retained_fraction_interval",
    "retained_lower_bound",
    "stratified_cutoffs",
]
