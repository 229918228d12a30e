"""``python -m benchmarks.forest_growth``: a table recipe's forest fitted in one call (as with ``--no-progress``)
against grown in paced chunks of trees (:mod:`ema.training.forest_growth`, with ``--progress``), interleaved in one
process (the machine is shared: only the two compared in one run count).

The table holds ``--rows`` rows of 30 numbers with labels 0 or 1 (a noisy threshold on the first); the recipe is the
default table recipe (200 extremely randomized trees, one feature a split) or ``--estimator RandomForestClassifier``
(100 trees). Each repeat checks that both give the same trees and bitwise the same probabilities. The grown fit's
progress lines go to stderr (it shows a line once a fit has taken a second).
"""

from __future__ import annotations

import argparse
import pickle
import statistics

import numpy as np

from benchmarks._common import spread, timed
from ema.training.forest_growth import fit_estimator
from ema.training.recipes import DEFAULT_TABLE_RECIPE, SklearnRecipe

N_FEATURES = 30
ONE_CALL, GROWN = "one call", "grown in chunks"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.forest_growth", description=__doc__)
    parser.add_argument("--rows", type=int, default=20_000, help="Rows of the table (default: 20,000).")
    parser.add_argument("--repeats", type=int, default=5, help="Interleaved repeats of each (default: 5).")
    parser.add_argument(
        "--estimator",
        choices=("ExtraTreesClassifier", "RandomForestClassifier"),
        default="ExtraTreesClassifier",
        help="The forest: the default table recipe's, or a random forest of 100 trees (default: ExtraTreesClassifier).",
    )
    return parser.parse_args(argv)


def recipe(estimator: str) -> SklearnRecipe:
    if estimator == DEFAULT_TABLE_RECIPE["estimator"]:
        return SklearnRecipe(**DEFAULT_TABLE_RECIPE)
    return SklearnRecipe(estimator, {"random_state": 0})


def fitted(forest_recipe: SklearnRecipe, x: np.ndarray, y: np.ndarray, *, grown: bool) -> tuple[float, object]:
    """Seconds to fit a fresh forest of ``forest_recipe`` on ``x`` and ``y`` (in chunks when ``grown``), and it."""
    forest = forest_recipe.build()
    return timed(lambda: fit_estimator(forest, x, y, what=f"train {forest_recipe.estimator}", progress=grown))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.rows, N_FEATURES)).astype(np.float32)
    y = (x[:, 0] + rng.normal(size=args.rows) > 0).astype(np.int64)
    forest_recipe = recipe(args.estimator)
    seconds: dict[str, list[float]] = {ONE_CALL: [], GROWN: []}
    same = True
    for repeat in range(args.repeats):
        forests = {}
        for name in [ONE_CALL, GROWN][:: 1 if repeat % 2 == 0 else -1]:  # who goes first alternates
            elapsed, forests[name] = fitted(forest_recipe, x, y, grown=name == GROWN)
            seconds[name].append(elapsed)
        one, grown = forests[ONE_CALL], forests[GROWN]
        same &= [pickle.dumps(t.tree_) for t in one.estimators_] == [pickle.dumps(t.tree_) for t in grown.estimators_]
        same &= np.array_equal(one.predict_proba(x), grown.predict_proba(x))
    trees = forest_recipe.build().n_estimators
    print(f"{args.estimator} ({trees} trees) on {args.rows:,} rows of {N_FEATURES}, {args.repeats} interleaved repeats")
    once, grown = (statistics.median(seconds[name]) for name in (ONE_CALL, GROWN))
    print(f"  {ONE_CALL}: median {once:.3f} s ({spread(seconds[ONE_CALL])})")
    print(f"  {GROWN}: median {grown:.3f} s ({spread(seconds[GROWN])}), {grown / once:.2f}x one call")
    print(f"  same trees and bitwise equal probabilities: {same}")


if __name__ == "__main__":
    main()
