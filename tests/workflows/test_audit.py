"""The audit run's metrics: one dict of every method's numbers, a number two methods share kept apart by method."""

from __future__ import annotations

import numpy as np

from ema.auditors.result import AuditResult
from ema.workflows.audit import merged_metrics


def result(method: str, **metrics: float) -> AuditResult:
    return AuditResult(method, {}, {}, np.zeros(4, dtype=bool), metrics, "inconclusive", 0.1)


def test_merged_metrics_logs_every_methods_flag_rate_under_its_name_even_where_the_values_agree():
    """``flag_rate.<method>`` for every method, always; the unprefixed key is the first method's (EMA's here)."""
    logged = merged_metrics(
        {
            "ema": result("ema", rho_ema=0.2, flag_rate=0.5, n_query=4.0),
            "calibrated": result("calibrated", p_removed=0.01, flag_rate=0.5, n_query=4.0),
        }
    )
    assert logged == {
        "rho_ema": 0.2,
        "p_removed": 0.01,
        "flag_rate": 0.5,
        "flag_rate.ema": 0.5,
        "flag_rate.calibrated": 0.5,
        "n_query": 4.0,
        "n_query.ema": 4.0,
        "n_query.calibrated": 4.0,
    }


def test_merged_metrics_of_a_single_method_names_its_flag_rate_as_a_combination_does():
    """A ``calibrated`` run's flag rate is found under ``flag_rate.calibrated``, as in an ``ema+calibrated`` run."""
    logged = merged_metrics({"calibrated": result("calibrated", flag_rate=0.678, n_query=4.0)})
    assert logged["flag_rate.calibrated"] == logged["flag_rate"] == 0.678


def test_merged_metrics_keeps_the_first_methods_value_unprefixed_and_leaves_nan_out():
    logged = merged_metrics(
        {
            "ema": result("ema", flag_rate=0.971, rho_ema=float("nan")),
            "calibrated": result("calibrated", flag_rate=0.678),
        }
    )
    assert logged == {"flag_rate": 0.971, "flag_rate.ema": 0.971, "flag_rate.calibrated": 0.678}


def test_merged_metrics_keeps_apart_any_key_two_methods_of_the_run_share():
    """A key outside ``METRICS_PER_METHOD`` that two methods log (a plug-in's) is kept per method too."""
    logged = merged_metrics({"a": result("a", shared=1.0), "b": result("b", shared=2.0, own=3.0)})
    assert logged == {"shared": 1.0, "shared.a": 1.0, "shared.b": 2.0, "own": 3.0}
