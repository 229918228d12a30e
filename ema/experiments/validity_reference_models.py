"""Would reference models lift the information limit? ``python -m ema.experiments.validity_reference_models``.

Part of the ``errors`` study, beside the reference auditor's validity study
(:mod:`ema.experiments.validity_reference`), whose information limit it tries to lift.

Issue 12 item 2 proposes calibrating each sample's difficulty against reference models trained
with the target's recipe on non-member data (offline LiRA, Carlini et al. 2022; difficulty
calibration, Watson et al. 2022). This measures what that buys on the Fashion-MNIST target at
the paper's sizes, the one target with enough non-member images to train references as large
as the target (the embedded MNIST has 1,000 free images against a 5,000-image target):

- the target: the paper's recipe on the preset's 10,000 training images (folds M1..M5);
- ``K`` references: the same recipe, seeds 100.., each on 10,000 images drawn from the 47,000
  Fashion-MNIST training images that are neither the target's, nor the calibration set, nor M6;
- scores, as the black-box auditor sees them: the true-class log-odds of the probabilities on
  members (M1) and held-out images (M6); calibrated: minus the references' mean on the same
  image (``diff``), or divided by their spread too (``z``).

For each score it prints the member / non-member AUC and the Fisher information about the
retained share at 0, chi^2(F_mem || F_non) from 20 bins at non-member quantiles less its
expected value under no difference, which bounds the best upper confidence bound a query of
|D_q| samples can reach: about 1.645 / sqrt(|D_q| I). Certifying a removal at margin 0.1 from
200 samples needs I >= 1.35.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.metrics import roc_auc_score

#: Bins of the information estimate, at non-member quantiles.
BINS = 20
#: Query size and margin of the issue's goal.
GOAL_SIZE, GOAL_MARGIN = 200, 0.1
Z_90 = 1.645
#: torch threads of training and scoring.
THREADS = 1
COMMAND = "python -m ema.experiments.validity_reference_models"


def information(members: np.ndarray, nonmembers: np.ndarray, bins: int = BINS) -> float:
    """chi^2(F_mem || F_non) over ``bins`` bins at non-member quantiles, less its expectation with no difference."""
    edges = np.quantile(nonmembers, np.linspace(0, 1, bins + 1)[1:-1])
    p_mem = np.bincount(np.searchsorted(edges, members), minlength=bins) / members.size
    p_non = np.bincount(np.searchsorted(edges, nonmembers), minlength=bins) / nonmembers.size
    chi2 = float(np.sum((p_mem - p_non) ** 2 / np.maximum(p_non, 1e-12)))
    return chi2 - (bins - 1) * (1 / members.size + 1 / nonmembers.size)


def free_images(splits, pool) -> tuple[np.ndarray, np.ndarray]:
    """The pool's images that the target's splits do not use (training folds, calibration, M6)."""
    used = {image.tobytes() for part in (splits.train, splits.calibration, splits.held_out) for image in part.x}
    keep = np.fromiter((image.tobytes() not in used for image in pool.x), bool, len(pool.y))
    return pool.x[keep], pool.y[keep]


def measure(n_references: int, seed: int) -> dict[str, tuple[float, float]]:
    """AUC and information of the raw and the calibrated scores, with ``n_references`` references."""
    from ema.data.catalog import open_source
    from ema.data.presets import POOL_SPLIT, load_splits
    from ema.inputs import to_model_inputs
    from ema.signals import log_odds_score
    from ema.training.fit import fit, predict_proba
    from ema.training.spec import TrainSpec
    from ema.training.threads import use_threads

    use_threads(THREADS)  # float sums differ with the thread count: fix it
    splits = load_splits("fashion", 0)
    members, held_out = splits.folds[0], splits.held_out

    def scores(model) -> tuple[np.ndarray, np.ndarray]:
        return tuple(
            log_odds_score(predict_proba(model, to_model_inputs(part.x)), part.y) for part in (members, held_out)
        )

    started = time.perf_counter()
    target = scores(fit(TrainSpec(), splits.train.model_inputs(), splits.train.y, progress=False))
    free_x, free_y = free_images(splits, open_source("fashion", None).load(POOL_SPLIT))
    rng = np.random.default_rng(seed)
    references = []
    for k in range(n_references):
        chosen = rng.choice(free_y.size, splits.train.y.size, replace=False)
        model = fit(TrainSpec(seed=100 + k), to_model_inputs(free_x[chosen]), free_y[chosen], progress=False)
        references.append(scores(model))
        print(f"reference {k + 1} of {n_references} trained ({time.perf_counter() - started:.0f} s)", flush=True)
    mean = [np.mean([r[side] for r in references], axis=0) for side in (0, 1)]
    spread = [np.std([r[side] for r in references], axis=0, ddof=1) + 1e-3 for side in (0, 1)]
    candidates = {
        "raw log-odds (today's auditor)": target,
        "diff: minus the references' mean": tuple(target[s] - mean[s] for s in (0, 1)),
        "z: diff over the references' spread": tuple((target[s] - mean[s]) / spread[s] for s in (0, 1)),
    }
    truth = np.r_[np.ones(members.y.size), np.zeros(held_out.y.size)]
    return {name: (roc_auc_score(truth, np.r_[m, n]), information(m, n)) for name, (m, n) in candidates.items()}


def main(argv: list[str] | None = None) -> None:
    """Train the target and the references, then print each score's AUC, information and best bound."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--references", type=int, default=4, help="Reference models (at least 2; default 4).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the references' training draws.")
    args = parser.parse_args(argv)
    if args.references < 2:
        parser.error(f"expected --references >= 2 (the z score needs a spread), got {args.references}")
    results = measure(args.references, args.seed)
    needed = (Z_90 / GOAL_MARGIN) ** 2 / GOAL_SIZE
    print(f"\n| score ({args.references} references) | AUC | information I | best upper bound at {GOAL_SIZE} |")
    print("|---|---|---|---|")
    for name, (auc, info) in results.items():
        bound = Z_90 / np.sqrt(GOAL_SIZE * info) if info > 0 else float("inf")
        print(f"| {name} | {auc:.3f} | {info:.3f} | {bound:.2f} |")
    print(f"\nCertifying removal at margin {GOAL_MARGIN} from {GOAL_SIZE} samples needs I >= {needed:.2f}.")


if __name__ == "__main__":
    main()
