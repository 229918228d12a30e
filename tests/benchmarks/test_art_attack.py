"""benchmarks/art_attack.py: ART's attack output becomes a score the auditor's estimator takes; no ART, no run."""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
import pytest

from benchmarks import art_attack
from benchmarks._common import replace_block
from benchmarks.art_attack import Evaluation, evaluate, main, parse_args, summary_row
from ema.errors import InputError
from ema.stats.binned_tests import DEFAULT_BIN_LEVELS
from ema.stats.information import cross_fitted_information

#: The recipe's MLP has 10 outputs.
N_CLASSES = 10


def tiny_overfit_model_outputs(seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A deep decision tree on noisy 3-class data: confident on its training samples, not on others."""
    from sklearn.tree import DecisionTreeClassifier

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(800, 4))
    y = (x[:, 0] + rng.normal(scale=1.5, size=800) > 0).astype(int) + (x[:, 1] > 1)
    model = DecisionTreeClassifier(min_samples_leaf=3, random_state=seed).fit(x[:400], y[:400])
    # members: the tree's training rows; non-members: the rest; each side split into attack-train and evaluation
    return {
        name: (model.predict_proba(x[rows]), y[rows])
        for name, rows in {
            "train_members": slice(0, 200),
            "eval_members": slice(200, 400),
            "train_nonmembers": slice(400, 600),
            "eval_nonmembers": slice(600, 800),
        }.items()
    }


def test_membership_scores_of_an_art_attack_feed_the_cross_fitted_information():
    pytest.importorskip("art")
    sets = tiny_overfit_model_outputs()
    attack = art_attack.fitted_attack("rf", sets["train_members"], sets["train_nonmembers"], input_shape=(4,), seed=0)
    members = art_attack.membership_scores(attack, *sets["eval_members"])
    nonmembers = art_attack.membership_scores(attack, *sets["eval_nonmembers"])
    assert members.shape == (200,) and nonmembers.shape == (200,) and members.dtype == np.float64
    assert ((members >= 0) & (members <= 1)).all()
    information = cross_fitted_information(members, nonmembers, np.asarray(DEFAULT_BIN_LEVELS))
    assert information > 0.05  # the tree's members are confidently right: the attack sees them
    measured = evaluate("rf", members, nonmembers, seeds=2)
    assert measured.auc > 0.6 and measured.information > 2 * measured.information_se > 0


def test_membership_scores_of_the_same_attack_are_seeded():
    pytest.importorskip("art")
    sets = tiny_overfit_model_outputs()

    def scores() -> np.ndarray:
        attack = art_attack.fitted_attack(
            "gb", sets["train_members"], sets["train_nonmembers"], input_shape=(4,), seed=3
        )
        return art_attack.membership_scores(attack, *sets["eval_members"])

    np.testing.assert_array_equal(scores(), scores())


def test_recipe_shadow_trains_each_art_shadow_model_with_its_own_seed():
    pytest.importorskip("art")
    from art.attacks.inference.membership_inference import ShadowModels

    from ema.training.spec import TrainSpec

    rng = np.random.default_rng(0)
    x, y = rng.random((60, 1, 6, 6), dtype=np.float32), rng.integers(0, N_CLASSES, 60)
    template = art_attack.RecipeShadow(TrainSpec(epochs=1, batch_size=16), x.shape[1:], itertools.count(1), "tiny")
    shadows = ShadowModels(template, num_shadow_models=2, random_state=0)
    (_, member_y, member_p), (_, nonmember_y, nonmember_p) = shadows.generate_shadow_dataset(x, y)
    assert [m.spec.seed for m in shadows.get_shadow_models()] == [1, 2]
    assert member_p.shape == (len(member_y), N_CLASSES) and nonmember_p.shape == (len(nonmember_y), N_CLASSES)
    np.testing.assert_allclose(member_p.sum(axis=1), 1.0, rtol=1e-5)


def test_the_benchmark_is_skipped_with_its_reason_when_art_is_missing(monkeypatch, tmp_path, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "art" else real(name, *a))
    page, results = tmp_path / "VALIDITY.md", tmp_path / "RESULTS-art.md"
    assert main(["--out", str(page), "--results", str(results)]) == 0
    assert "skipped: art is not installed (the [bench] extra: pip install -e '.[bench]')" in capsys.readouterr().err
    assert not page.exists() and not results.exists()


def test_replace_block_appends_the_block_under_its_heading_once(tmp_path):
    page = tmp_path / "VALIDITY.md"
    page.write_text("intro\n")
    for text in ("new", "newer"):
        replace_block(page, ["<!-- art-table -->", text, "<!-- /art-table -->"], heading=art_attack.HEADING)
    assert page.read_text() == f"intro\n\n{art_attack.HEADING}\n\n<!-- art-table -->\nnewer\n<!-- /art-table -->\n"


def test_summary_row_says_when_the_ratio_misses_the_goal():
    ours = [Evaluation("plain", 0.1, 0.01, 0.6, 0.05), Evaluation("shifts", 0.3, 0.02, 0.7, 0.1)]
    attacks = [Evaluation("ART rf", 0.05, 0.01, 0.55, 0.02), Evaluation("ART gb", 0.2, 0.03, 0.62, 0.03)]
    row = summary_row("overfit", ours + attacks)
    assert "| 0.300 ± 0.020 | 0.200 ± 0.030 (ART gb; AUC 0.620) | 1.50x | **not met** |" in row
    assert "| 6.00x | met |" in summary_row("overfit", ours + attacks[:1])


def test_parse_args_refuses_an_unknown_attack_model():
    with pytest.raises(SystemExit):
        parse_args(["--attack-models", "rf,svm-typo"])
    assert parse_args(["--attack-models", "gb"]).attack_models == ("gb",)


class NaNAttack:
    """Stands in for a fitted ART attack whose output is broken."""

    def infer(self, x, y, **_):
        return np.full((len(y), 1), np.nan)


def test_membership_scores_refuses_an_attack_output_without_one_finite_score_per_sample():
    proba, labels = np.full((4, 2), 0.5), np.zeros(4, dtype=int)
    with pytest.raises(InputError, match=r"expected 4 finite membership probabilities from ART, got shape \(4, 1\)"):
        art_attack.membership_scores(NaNAttack(), proba, labels)
