"""The validity study's pure parts: drawing query sets of known membership and summarising verdicts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ema.data.arrays import ArraySet
from ema.experiments.errors.plots import plot_error_rates, rates_table
from ema.experiments.errors.validity import ScoredPools, draw_query, summarize, true_retained_fraction


def pool(n: int, offset: int) -> ArraySet:
    return ArraySet(
        "p",
        np.full((n, 28, 28), offset, np.uint8),
        np.arange(n, dtype=np.int64) % 10,
        np.arange(n, dtype=np.int64) + offset,
    )


@pytest.fixture
def pools() -> ScoredPools:
    sets = {"members": pool(30, 0), "same-domain": pool(20, 100), "other-domain": pool(10, 200)}
    scored = ScoredPools(sets)
    scored.proba = {name: np.full((len(s), 10), i / 10.0) for i, (name, s) in enumerate(sets.items())}
    return scored


def test_draw_query_mixture_takes_half_from_members(pools):
    proba, labels, images = draw_query(pools, "mixture", 9, np.random.default_rng(0))
    assert proba.shape == (9, 10) and labels.shape == (9,)
    assert (images.index < 100).sum() == 4 and (images.index >= 100).sum() == 5
    np.testing.assert_array_equal(proba[:, 0], np.where(images.index < 100, 0.0, 0.1))


def test_draw_query_samples_without_replacement_and_is_seeded(pools):
    _, _, first = draw_query(pools, "members", 30, np.random.default_rng(1))
    _, _, again = draw_query(pools, "members", 30, np.random.default_rng(1))
    assert len(set(first.index)) == 30
    np.testing.assert_array_equal(first.index, again.index)


def test_true_retained_fraction():
    assert true_retained_fraction("members", 50) == 1.0
    assert true_retained_fraction("mixture", 5) == 0.4
    assert true_retained_fraction("other-domain", 50) == 0.0


def test_summarize_counts_errors_by_kind():
    draws = pd.DataFrame(
        [
            {"kind": "members", "size": 5, "draw": d, "method": "ema-t", "verdict": v, "truth": 1.0}
            for d, v in enumerate(["memorized", "not_memorized", "memorized", "memorized"])
        ]
        + [
            {
                "kind": "same-domain",
                "size": 5,
                "draw": d,
                "method": "calibrated",
                "verdict": v,
                "truth": 0.0,
                "retained": 0.1,
                "ci_low": low,
                "ci_high": 0.3,
            }
            for d, (v, low) in enumerate([("memorized", 0.0), ("inconclusive", 0.1)])
        ]
    )
    summary = summarize(draws).set_index(["method", "kind"])
    assert summary.loc[("ema-t", "members"), "error"] == 0.25
    assert summary.loc[("calibrated", "same-domain"), "error"] == 0.5
    assert summary.loc[("calibrated", "same-domain"), "inconclusive"] == 0.5
    assert summary.loc[("calibrated", "same-domain"), "covered"] == 0.5
    assert summary.loc[("calibrated", "same-domain"), "width"] == pytest.approx(0.25)


def test_rates_table_and_plot(tmp_path):
    summary = pd.DataFrame(
        [
            {
                "method": m,
                "kind": k,
                "size": s,
                "n": 10,
                "memorized": 0.5,
                "not_memorized": 0.5,
                "inconclusive": 0.0,
                "error": 0.5 if k != "mixture" else np.nan,
                "covered": 0.9,
                "width": 0.3,
                "target": "t",
            }
            for m in ("ema-t", "calibrated")
            for k in ("members", "same-domain", "other-domain", "mixture")
            for s in (5, 50)
        ]
    )
    table = rates_table(summary)
    assert table.startswith("### t") and "| members" in table and "err 0.50" in table
    picture = plot_error_rates(summary, alpha=0.1)
    assert picture.startswith(b"\x89PNG") and len(picture) > 5_000


def test_run_error_grid_end_to_end_on_a_tiny_target(store):
    from ema.experiments.errors.study import run_error_grid
    from ema.experiments.errors.validity import ErrorGridConfig, StudyTarget
    from ema.tracking.runs import configure
    from ema.training.spec import TrainSpec

    configure()
    config = ErrorGridConfig(sizes=(20,), n_draws=2, n_ks_draws=1, kinds=("members", "same-domain", "mixture"))
    summary = run_error_grid(config, targets={"tiny": StudyTarget(TrainSpec(epochs=2, hidden=(16,)))}, progress=False)
    assert set(summary["method"]) == {"ema-t", "ema-ks", "ks-ratio", "calibrated", "transfer"}
    assert (summary.loc[summary["method"] == "ks-ratio", "n"] == 1).all()
    assert (summary.loc[summary["method"] == "calibrated", "n"] == 2).all()
    mixture = summary[(summary["method"] == "calibrated") & (summary["kind"] == "mixture")]
    assert mixture["covered"].between(0, 1).all() and mixture["width"].between(0, 1).all()
