"""What a calibrated audit records beside its metrics: the assumption behind each number and every single test."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ema.auditors.tail_tests import HypothesisTests, QueryTails

#: What each reported number relies on; copied into every result's ``thresholds["assumptions"]``.
ASSUMPTIONS: dict[str, str] = {
    "p_removed": (
        "target only: exact placement tests of the query against reference data the target never saw, "
        "scored through the oracle; assumes the query, if removed, is distributed like the reference "
        "(same domain and class mix; per class in per-class mode)"
    ),
    "p_retained": (
        "transfer: the target's members sit in the target's non-member low tail as the calibration model's "
        "members sit in its own (equal member share at equal non-member quantile level); a calibration model "
        "that overfits more than the target makes this test reject too often"
    ),
    "retained_fraction": "transfer: member tail share from the calibration model (mixture F_q = pi F_mem + "
    "(1 - pi) F_non)",
    "retained_ci_low": "transfer: member tail share from the calibration model",
    "retained_ci_high": "transfer: member tail share from the calibration model",
    "retained_lower_bound_target_only": (
        "target only: pi >= sup_c (F_ref(c) - F_query(c)) with Dvoretzky-Kiefer-Wolfowitz-Massart margins; "
        "no calibration model; assumes the non-removed part is distributed like the reference"
    ),
}


def audit_record(signals: Sequence[str], levels: np.ndarray, tails: QueryTails, tests: HypothesisTests) -> dict:
    """Every single test, how the estimate pools them and what the membership flags mean, as JSON-ready data.

    Parameters
    ----------
    signals : sequence of str
        The auditor's signals, in the order of the rows of ``tails.counts``.
    levels : ndarray of shape (n_levels,)
        The calibrated quantile levels.
    tails, tests
        The query's tail counts and both families of tests.

    Returns
    -------
    dict
        ``tests`` (one entry per signal and level), ``estimate`` and ``membership``.
    """
    single_tests = [
        {
            "metric": metric,
            "level": float(levels[k]),
            "count": int(tails.counts[i, k]),
            "nonmember_share": float(tails.nonmember_rate[k]),
            "member_share": float(tests.member_rate[i, k]),
            "p_removed": float(tests.p_removed[i, k]),
            "p_removed_adjusted": float(tests.adjusted_removed[i, k]),
            "p_retained": float(tests.p_retained[i, k]),
            "p_retained_adjusted": float(tests.adjusted_retained[i, k]),
        }
        for i, metric in enumerate(signals)
        for k in range(levels.size)
    ]
    return {
        "tests": single_tests,
        "estimate": {
            "metric": signals[0],
            "levels": levels.tolist(),
            "pooling": "equal weights over the cut-offs: pi = sum(F_non - F_q) / sum(F_non - F_mem)",
        },
        "membership": f"{signals[0]} above its cut-off at level {levels[-1]:g} (outside the non-member tail)",
    }
