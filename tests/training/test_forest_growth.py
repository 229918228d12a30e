"""A forest grown a chunk of trees at a time (so that its training can say how far it is) is the forest grown at once,
and says how far it is as scoring does: a bar on a terminal, lines in a log, nothing with progress off."""

from __future__ import annotations

import io
import pickle
import sys
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.ensemble import ExtraTreesClassifier, RandomForestClassifier

from ema import progress
from ema.errors import TimeLimitExceeded
from ema.limits import command_limits
from ema.training import forest_growth
from ema.training.forest_growth import chunk_size, fit_estimator
from ema.training.recipes import DEFAULT_TABLE_RECIPE, SklearnRecipe
from tests.command_clock import command_clock

#: (estimator, parameters): the default table recipe, and forests that draw bootstrap samples, score out-of-bag rows,
#: weigh classes per bootstrap sample, grow trees in parallel, or draw a fraction of the rows.
FORESTS = [
    (ExtraTreesClassifier, {**DEFAULT_TABLE_RECIPE["params"], "n_estimators": 40}),
    (RandomForestClassifier, {"n_estimators": 25, "random_state": 3}),
    (RandomForestClassifier, {"n_estimators": 25, "random_state": 3, "oob_score": True, "n_jobs": 2}),
    (ExtraTreesClassifier, {"n_estimators": 25, "random_state": 7, "bootstrap": True, "max_samples": 0.5,
                            "class_weight": "balanced_subsample"}),
]  # fmt: skip


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    """Scikit-learn's 8x8 digits: 1,797 rows of 64 features, 10 classes."""
    return load_digits(return_X_y=True)


def tree_bytes(forest) -> list[bytes]:
    """Every tree of a fitted forest as bytes: its nodes, thresholds and leaf values."""
    return [pickle.dumps(tree.tree_) for tree in forest.estimators_]


@pytest.mark.parametrize(("kind", "params"), FORESTS)
@pytest.mark.parametrize("chunk_seconds", [0.0, forest_growth.CHUNK_SECONDS], ids=["tree by tree", "paced"])
def test_fit_estimator_grows_the_forest_a_one_shot_fit_grows(digits, monkeypatch, kind, params, chunk_seconds):
    """Grown a tree at a time (CHUNK_SECONDS 0: every boundary there is) or in paced chunks: the same seeds, the same
    trees byte for byte, bitwise the same probabilities and out-of-bag scores, the recipe's parameters, no warning."""
    x, y = digits
    monkeypatch.setattr(forest_growth, "CHUNK_SECONDS", chunk_seconds)
    once = kind(**params).fit(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warm-start warning about class weights, no out-of-bag one for few trees
        grown = fit_estimator(kind(**params), x, y, what="train forest", progress=True)
    assert grown.get_params() == once.get_params()
    assert [tree.random_state for tree in grown.estimators_] == [tree.random_state for tree in once.estimators_]
    assert tree_bytes(grown) == tree_bytes(once)
    np.testing.assert_array_equal(grown.predict_proba(x), once.predict_proba(x))
    if params.get("oob_score"):
        np.testing.assert_array_equal(grown.oob_decision_function_, once.oob_decision_function_)
        assert grown.oob_score_ == once.oob_score_


def test_chunk_size_starts_with_one_tree_then_takes_chunk_seconds_at_the_pace_so_far():
    assert chunk_size(0, 200, 0.0) == forest_growth.FIRST_CHUNK
    per_tree = forest_growth.CHUNK_SECONDS / 10  # ten trees a chunk
    assert chunk_size(5, 200, 5 * per_tree) == 10
    assert chunk_size(195, 200, 195 * per_tree) == 5  # no more than are left
    assert chunk_size(1, 200, 10 * forest_growth.CHUNK_SECONDS) == 1  # a slow tree: one at a time
    assert chunk_size(1, 200, 0.0) == 199  # too quick to time


class ClockedTrees(ExtraTreesClassifier):
    """Extremely randomized trees whose every fit takes a second of the command's clock (``clock``)."""

    clock = None

    def fit(self, x, y, sample_weight=None):
        self.clock.advance(1.0)
        return super().fit(x, y, sample_weight)


def test_fit_estimator_stops_a_growing_forest_at_the_commands_deadline(digits, monkeypatch):
    """A chunk of one tree a second, a 5 s --timeout: five chunks grown, none started after the deadline."""
    monkeypatch.setattr(forest_growth, "CHUNK_SECONDS", 0.0)
    monkeypatch.setattr(ClockedTrees, "clock", command_clock(monkeypatch))
    forest = ClockedTrees(n_estimators=20, random_state=0)
    with command_limits(timeout=5.0, started=0.0):
        with pytest.raises(TimeLimitExceeded, match="in step 'train forest'"):
            fit_estimator(forest, *digits, what="train forest", progress=True)
    assert len(forest.estimators_) == 5
    # stopped partway, it keeps the parameters it was given, not those of its last chunk
    assert (forest.warm_start, forest.n_estimators, forest.oob_score) == (False, 20, False)


def training_to(monkeypatch, *, on_terminal: bool) -> io.StringIO:
    """stderr as a terminal or a log, progress shown from the start (a forest's first chunk is one tree)."""
    stderr = io.StringIO()
    stderr.isatty = lambda: on_terminal
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(progress, "terminal_columns", lambda: 100)
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.0)
    return stderr


def test_a_forest_recipe_in_a_log_says_how_many_trees_are_grown_then_how_long_they_took(digits, monkeypatch):
    stderr = training_to(monkeypatch, on_terminal=False)
    SklearnRecipe(**DEFAULT_TABLE_RECIPE).fit(*digits)
    lines = stderr.getvalue().splitlines()
    assert "\r" not in stderr.getvalue() and len(lines) == 2, lines
    assert lines[0] == "train ExtraTreesClassifier: 1 of 200 trees after 0 s"
    assert lines[1].startswith("train ExtraTreesClassifier: 200 trees in ")


def test_a_forest_recipe_on_a_terminal_is_a_bar_counting_trees(digits, monkeypatch):
    stderr = training_to(monkeypatch, on_terminal=True)
    SklearnRecipe(**DEFAULT_TABLE_RECIPE).fit(*digits)
    shown = stderr.getvalue()
    assert "train ExtraTreesClassifier" in shown and "/200 [" in shown and "tree/s" in shown


@pytest.mark.parametrize(
    "recipe",
    [
        {**DEFAULT_TABLE_RECIPE, "progress": False},
        {"estimator": "LogisticRegression", "params": {"max_iter": 20}, "progress": True},
    ],
    ids=["forest, no progress", "not a forest"],
)
def test_a_recipe_without_progress_or_without_trees_shows_nothing(digits, monkeypatch, recipe):
    stderr = training_to(monkeypatch, on_terminal=False)
    recipe = dict(recipe)
    shown = recipe.pop("progress")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LogisticRegression stopped at 20 iterations: not what is tested
        SklearnRecipe(**recipe).fit(*digits, progress=shown)
    assert stderr.getvalue() == ""
