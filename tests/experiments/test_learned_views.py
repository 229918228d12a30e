"""The learned view score study (``python -m ema.experiments.errors.learned_views``): its cross-fitting, its table."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ema.experiments.errors import learned_views
from ema.experiments.errors.learned_views import FOLDS, cross_fitted_score, view_features
from ema.experiments.errors.reference_pools import member_reference

VIEWS, N_CLASSES = 9, 10


def view_pool(n: int, confidence: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` samples' probabilities on 9 views, (9, n, 10): the identity's true class about ``confidence``, the
    shifts' a little lower."""
    labels = np.arange(n) % N_CLASSES
    true = np.clip(
        confidence - np.r_[0.0, np.full(VIEWS - 1, 0.05)][:, None] + rng.normal(0, 0.05, (VIEWS, n)), 0.11, 0.99
    )
    proba = np.repeat(((1 - true) / (N_CLASSES - 1))[..., None], N_CLASSES, axis=2)
    proba[:, np.arange(n), labels] = true
    return proba, labels


@pytest.fixture(scope="module")
def pools() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    out = {f"M{i}": view_pool(200, 0.8, rng) for i in range(1, 6)}
    out.update(cal=view_pool(400, 0.6, rng), M6=view_pool(400, 0.6, rng))
    return out


def test_member_reference_joins_shifted_pools_along_their_samples_keeping_the_views(pools):
    proba, labels = member_reference(pools)
    assert proba.shape == (VIEWS, 800, N_CLASSES) and labels.shape == (800,)
    np.testing.assert_array_equal(proba[:, 200:400], pools["M3"][0])


def test_view_features_are_the_nine_log_odds_and_the_auditors_contrast():
    log_odds = np.random.default_rng(1).normal(size=(5, VIEWS))
    features = view_features(log_odds)
    np.testing.assert_array_equal(features[:, :VIEWS], log_odds)
    np.testing.assert_allclose(features[:, -1], log_odds[:, 0] - 0.5 * log_odds[:, 1:].mean(axis=1))


def test_cross_fitted_scores_of_indistinguishable_sides_carry_no_information_and_describe_new_samples():
    # Members and non-members from one distribution: scores fitted and read on the same samples would tell them
    # apart (the learner memorizes noise); out of fold they must not, and new samples must look like the references.
    rng = np.random.default_rng(2)
    members, nonmembers, new = rng.normal(size=(600, 4)), rng.normal(size=(600, 4)), rng.normal(size=(600, 4))
    fitted = cross_fitted_score(members, nonmembers, seed=0)
    assert len(fitted.classifiers) == FOLDS
    assert stats.mannwhitneyu(fitted.member_scores, fitted.nonmember_scores).pvalue > 0.01
    in_sample = fitted.classifiers[0]
    assert in_sample.decision_function(members).mean() > in_sample.decision_function(nonmembers).mean()
    new_scores = fitted.score_new(new, np.random.default_rng(0))
    assert stats.ks_2samp(new_scores, fitted.nonmember_scores).pvalue > 0.01


def test_cross_fitted_scores_are_seeded_and_rank_members_above_non_members():
    rng = np.random.default_rng(3)
    members, nonmembers = rng.normal(0.8, 1.0, size=(500, 3)), rng.normal(0.0, 1.0, size=(500, 3))
    first, again = cross_fitted_score(members, nonmembers, seed=5), cross_fitted_score(members, nonmembers, seed=5)
    np.testing.assert_array_equal(first.member_scores, again.member_scores)
    assert stats.mannwhitneyu(first.member_scores, first.nonmember_scores, alternative="greater").pvalue < 1e-10


def test_view_log_odds_features_take_probabilities_of_any_number_of_views(pools):
    proba, labels = pools["M1"]
    features = learned_views.view_log_odds_features(proba[:4], labels)
    assert features.shape == (200, 5)  # 4 views' log-odds and their contrast
    np.testing.assert_allclose(features[:, -1], features[:, 0] - 0.5 * features[:, 1:4].mean(axis=1))


@pytest.mark.slow  # 10 gradient-boosted fits: about 4 s idle, 15 s on a loaded machine
def test_learned_information_is_larger_for_separated_sides():
    rng = np.random.default_rng(4)
    nonmembers = rng.normal(0.0, 1.0, size=(300, 2))
    apart, close = rng.normal(1.0, 1.0, size=(300, 2)), rng.normal(0.1, 1.0, size=(300, 2))
    information, lower, margin = learned_views.learned_information(apart, nonmembers, (0,))
    assert information > lower > 0 and 0 < margin <= 1
    assert information > 5 * learned_views.learned_information(close, nonmembers, (0,))[0]


def test_main_prints_the_contrast_and_the_learned_score_of_every_target(pools, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("ema.experiments.errors.reference_pools.score_pools", lambda *_, **__: pools)
    learned_views.main(["--targets", "overfit", "--seeds", "1", "--cache", str(tmp_path)])
    header, rule, row = capsys.readouterr().out.splitlines()
    assert "contrast / learned" in header and rule.startswith("|---")
    cells = [cell.strip() for cell in row.split("|")]
    assert cells[1] == "overfit" and cells[2] == "800 / 400"
    single_view, contrast, learned = (float(x) for x in cells[3].split(" (")[0].split(" / "))
    assert min(single_view, contrast, learned) > 0.05  # the pools' members are far more confident
    assert cells[6].endswith("(400 M6)")


def test_main_refuses_no_seeds():
    with pytest.raises(SystemExit):
        learned_views.main(["--seeds", "0"])
