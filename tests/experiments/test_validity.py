"""The validity study's pure parts: drawing query sets of known membership and summarising verdicts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ema.data.arrays import ArraySet
from ema.errors import InputError
from ema.experiments.errors.plots import NO_OTHER_DOMAIN, plot_error_rates, rates_table
from ema.experiments.errors.validity import (
    KINDS,
    TARGETS,
    ScoredPools,
    StudyTarget,
    check_sizes_fit,
    draw_query,
    largest_sizes,
    studied_kinds,
    study_targets,
    summarize,
    true_retained_fraction,
)


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


def test_study_targets_one_default_recipe_target_per_data_source():
    assert study_targets() is TARGETS
    assert study_targets("breast-cancer") == {
        "breast-cancer (default recipe)": StudyTarget(None, data="breast-cancer", data_root=None)
    }


def test_studied_kinds_leave_other_domain_out_without_s():
    assert studied_kinds(KINDS, {"members": 63, "same-domain": 128}) == ("members", "same-domain", "mixture")
    assert studied_kinds(KINDS, {"members": 1, "same-domain": 1, "other-domain": 1}) == KINDS


def test_largest_sizes_of_a_mixture_take_half_from_each_pool():
    assert largest_sizes({"members": 63, "same-domain": 128}, ("members", "same-domain", "mixture")) == {
        "members": 63,
        "same-domain": 128,
        "mixture": 127,
    }
    assert largest_sizes({"members": 63, "same-domain": 40}, ("mixture",)) == {"mixture": 80}


def test_check_sizes_fit_names_the_smallest_pool_and_the_largest_size():
    pools = {"members": 1000, "same-domain": 2000, "other-domain": 300}
    check_sizes_fit((5, 300), pools, KINDS, "t")
    with pytest.raises(
        InputError,
        match=r"^expected query sizes of at most 300, the samples the other-domain set S "
        r"of target 't' holds, got 1000; give --sizes up to 300$",
    ):
        check_sizes_fit((5, 1000), pools, KINDS, "t")
    check_sizes_fit((1000,), pools, ("members", "same-domain"), "t")  # S is not drawn: its size does not count


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
    assert NO_OTHER_DOMAIN not in table
    without_s = rates_table(summary[summary["kind"] != "other-domain"])
    assert without_s.endswith(NO_OTHER_DOMAIN) and "| other-domain" not in without_s
    assert NO_OTHER_DOMAIN not in rates_table(summary[summary["kind"] != "other-domain"], kinds=("members",))
    picture = plot_error_rates(summary, alpha=0.1)
    assert picture.startswith(b"\x89PNG") and len(picture) > 5_000
    assert plot_error_rates(summary[summary["kind"] != "other-domain"], alpha=0.1).startswith(b"\x89PNG")


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


@pytest.mark.slow
def test_run_error_grid_on_breast_cancer_studies_the_table_target_without_s(store):
    """The default table recipe on the breast-cancer splits: its rows and the parent run's table files (about 25 s)."""
    from mlflow.tracking import MlflowClient

    from ema.experiments.errors.study import run_error_grid
    from ema.experiments.errors.validity import ErrorGridConfig
    from ema.tracking import keys
    from ema.tracking.runs import configure

    configure()
    # Under seed 0 the second mixture of 5 is all one class: its KS-ratio query model has seen one class only.
    config = ErrorGridConfig(sizes=(5, 20), n_draws=3, n_ks_draws=2, seed=0)
    summary = run_error_grid(config, targets=study_targets("breast-cancer"), progress=False)
    assert set(summary["target"]) == {"breast-cancer (default recipe)"}
    assert set(summary["kind"]) == {"members", "same-domain", "mixture"}
    assert set(summary["method"]) == {"ema-t", "ema-ks", "ks-ratio", "calibrated", "transfer"}
    assert len(summary) == 3 * 2 * 5 and summary["held_out_accuracy"].gt(0.8).all()
    members = summary[summary["kind"] == "members"].set_index("method")
    assert members.loc["calibrated", "covered"].min() == 1.0  # every member draw's interval holds 1
    client = MlflowClient()
    (parent,) = client.search_runs(
        [client.get_experiment_by_name(keys.DEFAULT_EXPERIMENT).experiment_id], "attributes.run_name = 'grid errors'"
    )
    assert parent.info.status == "FINISHED" and parent.data.params[keys.PARAM_DATA] == "breast-cancer"
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {keys.ARTIFACT_ERROR_RATES_CSV, keys.ARTIFACT_ERROR_RATES_MD, keys.ARTIFACT_ERROR_RATES_PNG} <= artifacts
    with open(client.download_artifacts(parent.info.run_id, keys.ARTIFACT_ERROR_RATES_MD)) as handle:
        markdown = handle.read()
    assert markdown.startswith("### breast-cancer (default recipe)") and markdown.endswith(NO_OTHER_DOMAIN)
    logged = pd.read_csv(client.download_artifacts(parent.info.run_id, keys.ARTIFACT_ERROR_RATES_CSV))
    assert len(logged) == len(summary) and set(logged["kind"]) == {"members", "same-domain", "mixture"}
