"""The reference-auditor study's pure parts, on synthetic scored pools (no training, no data files)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ema.auditors.reference import ReferenceAuditor
from ema.errors import InputError
from ema.experiments.errors import reference as reference_study
from ema.experiments.errors import reference_pools
from ema.experiments.errors.certification import (
    carried_cells,
    certification_draws,
    certification_goals,
    certification_rate_bound,
    expected_upper_bound,
    summarize_certification,
)
from ema.experiments.errors.reference import (
    audit_draws,
    fold_verdicts,
    information_limit,
    main,
    parse_args,
    summarize,
    wrong_scale_warnings,
)
from ema.experiments.errors.reference_candidates import candidate_tests
from ema.experiments.errors.reference_models import (
    ESTIMATORS,
    information,
    models_section,
    neyman_pearson_power,
    power_bounds,
    score_row,
)
from ema.experiments.errors.reference_pools import draw, member_reference, score_pools, truth
from ema.experiments.errors.reference_report import REFERENCE_MODELS_HEADING, replace_section
from ema.signals import SIGNALS

N_CLASSES = 10
FOLD = 250


def probability_rows(true: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Probability rows whose true class holds ``true`` (clipped to 0.11-0.99), the rest spread evenly."""
    true = np.clip(true, 0.11, 0.99)
    proba = np.tile(((1 - true) / (N_CLASSES - 1))[:, None], (1, N_CLASSES))
    proba[np.arange(true.size), labels] = true
    return proba


def scored(n: int, confidence: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` probability rows whose true class holds about ``confidence``, and their labels."""
    labels = np.arange(n) % N_CLASSES
    return probability_rows(confidence + rng.normal(0, 0.05, n), labels), labels


@pytest.fixture(scope="module")
def pools() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    out = {f"M{i}": scored(FOLD, 0.9, rng) for i in range(1, 6)}
    out.update(cal=scored(200, 0.6, rng), M6=scored(FOLD, 0.6, rng), S=scored(FOLD, 0.3, rng))
    for name in ("cal", "M2", "M3", "M4", "M5"):
        out[f"{name}-wrong-scale"] = (np.full((out[name][1].size, N_CLASSES), 1 / N_CLASSES), out[name][1])
    return out


def test_draw_mixture_takes_half_from_m1_and_is_seeded(pools):
    proba, labels = draw(pools, "mixture", 9, np.random.default_rng(3))
    again, _ = draw(pools, "mixture", 9, np.random.default_rng(3))
    assert proba.shape == (9, N_CLASSES) and labels.shape == (9,)
    assert (proba.max(axis=1)[:4] > 0.75).all() and (proba.max(axis=1)[4:] < 0.75).all()
    np.testing.assert_array_equal(proba, again)


def test_truth_is_the_retained_fraction_of_each_kind():
    assert [truth(kind, 9) for kind in ("members", "same-domain", "other-domain", "mixture")] == [1, 0, 0, 4 / 9]


def test_member_reference_joins_folds_m2_to_m5_only(pools):
    proba, labels = member_reference(pools)
    assert labels.size == 4 * FOLD
    np.testing.assert_array_equal(proba[:FOLD], pools["M2"][0])


def test_candidate_tests_reject_removal_of_members_and_keep_non_members(pools):
    rng = np.random.default_rng(1)
    mem_p, mem_y = member_reference(pools)
    metrics = ("confidence", "log_odds", "modified_entropy", "negative_entropy")
    refs = {
        "non": {m: SIGNALS[m](*pools["cal"]) for m in metrics},
        "mem": {m: SIGNALS[m](mem_p, mem_y) for m in metrics},
        "non_y": pools["cal"][1],
        "mem_y": mem_y,
    }
    for source, rejected in (("M1", True), ("M6", False)):
        proba, labels = pools[source]
        scores = {m: SIGNALS[m](proba, labels) for m in metrics}
        pvalues = candidate_tests(scores, labels, refs, rng)
        assert len(pvalues) == 10
        assert all((p <= 0.01) == rejected for p in pvalues.values()), (source, pvalues)


def test_the_auditor_studies_on_separable_pools(pools):
    auditor = ReferenceAuditor(alpha=0.1).calibrate(*member_reference(pools), *pools["cal"])
    summary = summarize(audit_draws(auditor, pools, (40,), 2, seed=0)).set_index("kind")
    assert summary.loc["members", "memorized"] == 1.0
    assert summary.loc["same-domain", "memorized"] == 0.0
    assert fold_verdicts(pools, 0.1) == ["memorized"] * 5
    accuracy, warnings = wrong_scale_warnings(pools, 0.1)
    assert accuracy == pytest.approx(0.1) and any("near chance" in warning for warning in warnings)
    limit = information_limit(auditor, (40,))
    assert limit["I(0)"] > 0 and limit["bound at 40"] > limit["bound as n_q -> inf"]


def test_parse_args_refuses_an_unknown_target():
    with pytest.raises(SystemExit):
        parse_args(["--targets", "overfit,nope"])
    assert parse_args(["--sizes", "5,20"]).sizes == (5, 20)


def test_information_is_near_zero_without_a_difference_and_grows_with_one():
    rng = np.random.default_rng(0)
    same = information(rng.normal(size=5000), rng.normal(size=5000))
    shifted = information(rng.normal(1.0, size=5000), rng.normal(size=5000))
    assert abs(same) < 0.02 and shifted > 0.5


def run_small_study(output) -> None:
    """The study's main on the overfit target at two sizes and two draws, writing ``output``."""
    main(
        [
            "--targets",
            "overfit",
            "--sizes",
            "20,200",
            "--draws",
            "2",
            "--redraws",
            "2",
            "--no-compare",
            "--output",
            str(output),
        ]
    )


def test_main_writes_the_report_naming_its_command(pools, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reference_study, "score_pools", lambda name, cache, threads, augment: pools)
    output = tmp_path / "report.md"
    run_small_study(output)
    report = output.read_text()
    assert "Written by `python -m ema.experiments.errors.reference" in report
    assert "| overfit: members called not_memorized, any size (max over sizes) | 0.000 | <= 0.10 | met |" in report
    assert "Whole training folds" in report and "## The information limit" in report
    assert capsys.readouterr().out.startswith("# The member-reference auditor")


# --------------------------------------------------------------------------- issue 26's grid (--certification)
def test_certification_draws_redraw_the_references_and_audit_every_share(pools):
    draws = certification_draws(pools, sizes=(20, 100), shares=(0.0, 0.5, 1.0), n_draws=3, seed=0)
    assert len(draws) == 3 * 2 * 3
    assert draws.groupby("share")["truth"].first().tolist() == [0.0, 0.5, 1.0]
    assert draws.groupby("draw")["information"].first().nunique() == 3  # a new non-member reference each draw
    summary = summarize_certification(draws).set_index(["size", "share"])
    assert summary.loc[(100, 1.0), "memorized"] == 1.0 and summary.loc[(100, 0.0), "memorized"] == 0.0
    assert summary.loc[(100, 0.0), "not_memorized"] == 1.0  # the separable pools certify 0.1 from 100 samples
    assert (summary["upper_bound_limit"] > 0).all() and (summary["width_limit"] > 0).all()
    assert (draws["information_lower"] <= draws["information"]).all() and "information_lower" in summary
    auto = [row for row in certification_goals(summary.reset_index()) if "`--margin auto`" in row[0]]
    assert auto and "of draws have such a margin" in auto[0][0]


def test_expected_upper_bound_is_the_mean_of_the_profile_bound_of_a_normal_estimate():
    z = np.random.default_rng(0).normal(size=400_000)
    level = stats.norm.ppf(0.95)
    bound = np.where(z >= 0, z + level, z + np.sqrt(z**2 + level**2))
    scale = np.sqrt((1 / 200 + 1 / 1000) / 0.1)
    assert expected_upper_bound(200, 1000, 0.1, certify_level=0.95) == pytest.approx(scale * bound.mean(), rel=0.01)
    assert expected_upper_bound(200, 1000, 0.0, certify_level=0.95) == np.inf


def test_certification_rate_bound_is_the_rate_of_a_normal_estimate_certified_and_not_rejected():
    z = np.random.default_rng(0).normal(size=400_000)
    level = stats.norm.ppf(0.95)
    scale = np.sqrt((1 / 200 + 1 / 1000) / 0.14)
    bound = scale * np.where(z >= 0, z + level, z + np.sqrt(z**2 + level**2))
    certified = (bound <= 0.3) & (z <= stats.norm.ppf(0.9))
    rate = certification_rate_bound(200, 1000, 0.14, margin=0.3, alpha=0.1, certify_level=0.95)
    assert rate == pytest.approx(certified.mean(), abs=0.003)
    assert certification_rate_bound(200, 1000, 100.0, margin=0.3, alpha=0.1, certify_level=0.95) == pytest.approx(0.9)


def test_main_certification_prints_the_goal_table_without_touching_the_report(pools, monkeypatch, capsys):
    monkeypatch.setattr(reference_study, "score_pools", lambda name, cache, threads, augment: pools)
    main(["--certification", "--targets", "overfit", "--sizes", "20,200", "--draws", "2"])
    out = capsys.readouterr().out
    assert out.startswith("Written by `python -m ema.experiments.errors.reference")
    assert "| members called `not_memorized` at margin 0.1 (worst size) | <= 0.05 | 0.000 | met |" in out
    assert "mean upper bound at share 0 over its bound, 200" in out
    assert parse_args(["--certification"]).output is None and parse_args([]).output is not None


VIEWS = 3


@pytest.fixture(scope="module")
def view_pools() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Pools in :data:`VIEWS` views, (views, n, C): members and non-members alike in the identity view, but a
    member's confidence drops in the other views (it was memorized in its own position) and a non-member's not."""
    rng = np.random.default_rng(1)
    out = {}
    for name, n, drop in [*((f"M{i}", FOLD, 0.25) for i in range(1, 6)), ("cal", 200, 0.0), ("M6", FOLD, 0.0)]:
        labels = np.arange(n) % N_CLASSES
        identity = rng.uniform(0.3, 0.9, n)
        views = [identity, *(identity - drop + rng.normal(0, 0.02, n) for _ in range(VIEWS - 1))]
        out[name] = (np.stack([probability_rows(view, labels) for view in views]), labels)
    return out


def test_certification_draws_on_views_carry_the_shifted_information(view_pools):
    draws = certification_draws(view_pools, sizes=(20, 100), shares=(0.0, 1.0), n_draws=2, seed=0)
    assert len(draws) == 2 * 2 * 2 and (draws["n_views"] == VIEWS).all()
    assert np.isfinite(draws["information_single_view"]).all()
    assert (draws["information"] > draws["information_single_view"]).all()  # the views carry more
    summary = summarize_certification(draws).set_index(["size", "share"])
    assert summary.loc[(100, 1.0), "memorized"] == 1.0 and summary.loc[(100, 0.0), "memorized"] == 0.0
    assert np.isfinite(summary["information_single_view"]).all() and (draws["n_members"] == 4 * FOLD).all()


def test_certification_draws_of_one_view_record_no_single_view_information(pools):
    draws = certification_draws(pools, sizes=(200,), shares=(0.0,), n_draws=2, seed=0)
    assert (draws["n_views"] == 1).all() and draws["information_single_view"].isna().all()
    assert (draws["verdict_wide"] != "memorized").all() and "not_memorized_wide" in summarize_certification(draws)


def test_certification_goals_leave_out_the_goals_of_cells_not_run(view_pools):
    draws = certification_draws(view_pools, sizes=(50,), shares=(0.5, 1.0), n_draws=2, seed=0)
    labels = [label for label, _, _ in certification_goals(summarize_certification(draws))]
    assert "members called `memorized` at 50" in labels
    assert not any(label.startswith("removed sets") or "over its bound" in label for label in labels)


def test_carried_cells_leave_out_what_a_fold_or_the_left_non_members_cannot_fill():
    small = {f"M{i}": (np.zeros((63, 2)), np.zeros(63, dtype=int)) for i in range(1, 6)}
    small["cal"], small["M6"] = (
        (np.zeros((126, 2)), np.zeros(126, dtype=int)),
        (np.zeros((128, 2)), np.zeros(128, dtype=int)),
    )
    cells = carried_cells(small, (50, 75, 200), (0.0, 0.5, 1.0))
    assert cells == [(50, 0.0), (50, 0.5), (50, 1.0), (75, 0.0), (75, 0.5)]
    # a non-member reference of 200 leaves 54 non-members: 50 at most, with half of 75 members
    assert carried_cells(small, (50, 75, 200), (0.0, 0.5, 1.0), 200) == [(50, 0.0), (50, 0.5), (50, 1.0), (75, 0.5)]


def test_certification_draws_take_the_nonmember_reference_size_asked_and_refuse_one_that_leaves_no_queries(pools):
    draws = certification_draws(pools, sizes=(20,), shares=(0.0, 1.0), n_draws=2, seed=0, nonmember_reference=300)
    assert (draws["n_reference"] == 300).all() and len(draws) == 2 * 2
    assert (certification_draws(pools, sizes=(20,), shares=(0.0,), n_draws=1, seed=0)["n_reference"] == 200).all()
    with pytest.raises(InputError, match=r"expected a non-member reference of 2 to 449 .* got 450"):
        certification_draws(pools, sizes=(20,), shares=(0.0,), n_draws=1, seed=0, nonmember_reference=450)


def test_main_certification_with_shifts_audits_the_views_and_skips_the_table(view_pools, monkeypatch, capsys):
    """``--augment shifts`` scores the image targets' views (not the table's) and reports both informations."""
    asked = []

    def fake_pools(name, cache, threads, augment):
        asked.append((name, augment))
        return view_pools

    monkeypatch.setattr(reference_study, "score_pools", fake_pools)
    main(
        [
            "--certification",
            "--targets",
            "overfit,breast-cancer",
            "--augment",
            "shifts",
            "--sizes",
            "200",
            "--draws",
            "2",
        ]
    )
    captured = capsys.readouterr()
    assert asked == [("overfit", "shifts")]
    assert "breast-cancer: skipped (--augment shifts moves pixels" in captured.err
    assert "embedded MNIST, --augment shifts" in captured.out
    assert "| removed sets called `not_memorized` at margin 0.3, 200 (the information allows 0.90) | >= 0.90 |" in (
        captured.out
    )
    assert "information_single_view" in captured.out


def test_parse_args_takes_the_table_target_and_augment_with_certification_only():
    args = parse_args(["--certification", "--shares", "0,1"])
    assert "breast-cancer" in args.targets and args.shares == (0.0, 1.0) and args.augment == "none"
    assert args.nonmember_reference is None
    assert parse_args(["--certification", "--nonmember-reference", "2000"]).nonmember_reference == 2000
    refused = (["--targets", "breast-cancer"], ["--augment", "shifts"], ["--nonmember-reference", "0"])
    for argv in (*refused, ["--certification", "--augment", "flip"], ["--certification", "--nonmember-reference", "1"]):
        with pytest.raises(SystemExit):
            parse_args(argv)


def test_score_pools_trains_the_table_target_once_and_scores_its_folds_calibration_and_held_out(tmp_path, monkeypatch):
    pools = score_pools("breast-cancer", tmp_path, threads=1)
    assert {name: labels.size for name, (_, labels) in pools.items()} == {
        **{f"M{i}": 63 for i in range(1, 6)},
        "cal": 126,
        "M6": 128,
    }
    assert all(proba.shape == (labels.size, 2) for proba, labels in pools.values())
    true_class = {name: proba[np.arange(labels.size), labels].mean() for name, (proba, labels) in pools.items()}
    assert true_class["M1"] > true_class["M6"]  # the trees keep their training rows
    monkeypatch.setattr(reference_pools, "_train_and_score_table", lambda *a: pytest.fail("trained again"))
    again = score_pools("breast-cancer", tmp_path, threads=1)
    assert np.array_equal(again["M1"][0], pools["M1"][0])


def test_power_bound_with_shifts_is_of_the_auditors_view_score(view_pools, monkeypatch):
    """The identity alone tells these members from non-members no better than chance; their views do."""
    identity = {name: (proba[0], labels) for name, (proba, labels) in view_pools.items()}
    monkeypatch.setattr(
        reference_pools,
        "score_pools",
        lambda name, cache, threads, augment: view_pools if augment == "shifts" else identity,
    )
    plain = power_bounds(["overfit"], None, sizes=(50,))["overfit"][0]
    shifted = power_bounds(["overfit"], None, sizes=(50,), augment="shifts")["overfit"][0]
    assert plain < 0.5 and shifted > 0.99


def test_reference_models_spline_ratio_finds_the_information_of_one_score_and_of_two_jointly():
    rng = np.random.default_rng(1)
    members = np.column_stack([rng.normal(0.3, 1, 6000), rng.normal(0.5, 1, 6000)])
    nonmembers = rng.normal(size=(2000, 2))
    raw = score_row(members[:, :1], nonmembers[:, :1], "spline", seed=0)
    joint = score_row(members, nonmembers, "spline", seed=0)
    assert raw["I (cross-fitted)"] == pytest.approx(np.expm1(0.3**2), rel=0.3)  # chi^2 of unit normals
    assert joint["I (cross-fitted)"] == pytest.approx(np.expm1(0.3**2 + 0.5**2), rel=0.3)
    assert joint["AUC"] > raw["AUC"] and joint["margin at 200"] < raw["margin at 200"]


def test_neyman_pearson_power_of_unit_normals_is_the_textbook_power():
    shift, n = 0.3, 50
    normal = stats.norm.ppf((np.arange(100_000) + 0.5) / 100_000)  # N(0, 1) by its quantiles: no sampling noise
    llr = lambda x: shift * x - shift**2 / 2  # noqa: E731
    power = neyman_pearson_power(llr(normal + shift), llr(normal), n, 0.1)
    assert power == pytest.approx(stats.norm.cdf(np.sqrt(n) * shift - stats.norm.ppf(0.9)), abs=0.01)


def test_reference_models_section_replaces_its_old_version_and_survives_a_rewrite_of_the_report(
    pools, tmp_path, monkeypatch
):
    row = {"AUC": 0.5, "I (cross-fitted)": 0.1, "margin at 200": 0.7}
    results = {label: dict(row) for label, _, _ in ESTIMATORS}
    results[ESTIMATORS[-1][0]]["I (cross-fitted)"] = 0.13
    section = models_section(results, "python -m ema.experiments.errors.reference_models --references 8", 1.0)
    assert section.startswith(REFERENCE_MODELS_HEADING) and "I = 0.130, 1.30x the auditor's score today" in section
    report = tmp_path / "REFERENCE_AUDITOR.md"
    report.write_text("# study\n")
    replace_section(report, REFERENCE_MODELS_HEADING, section)
    replace_section(report, REFERENCE_MODELS_HEADING, section)
    assert report.read_text().count(REFERENCE_MODELS_HEADING) == 1
    monkeypatch.setattr(reference_study, "score_pools", lambda name, cache, threads, augment: pools)
    run_small_study(report)
    rewritten = report.read_text()
    assert rewritten.startswith("# The member-reference auditor") and rewritten.endswith(section)
