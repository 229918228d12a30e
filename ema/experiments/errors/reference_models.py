"""Would reference models lift the information limit? ``python -m ema.experiments.errors.reference_models``.

Part of the ``errors`` study, beside the reference auditor's validity study
(:mod:`ema.experiments.errors.reference`), whose information limit it tries to lift.

Issue 12 item 2 proposes calibrating each sample's difficulty against reference models trained
with the target's recipe on non-member data (offline LiRA, Carlini et al. 2022; difficulty
calibration, Watson et al. 2022). This measures what that buys on the Fashion-MNIST target at
the paper's sizes, the one target with enough non-member images to train references as large
as the target (the embedded MNIST has 1,000 free images against a 5,000-image target):

- the target: the reference study's Fashion-MNIST target (the paper's recipe on the preset's
  10,000 training images, folds M1..M5), its probabilities read from that study's pool cache;
- ``K`` references: the same recipe, seeds 100.., each on 10,000 images drawn from the 47,000
  Fashion-MNIST training images that are neither the target's, nor the calibration set, nor M6;
- scores, as the black-box auditor sees them: the true-class log-odds of the probabilities on
  the members (M1..M5, 10,000) and the non-members (calibration set and M6, 3,000); calibrated:
  minus the references' mean on the same image, over their spread (``z``); and both jointly.

Issue 26 item 6: the old estimate (chi^2 over 20 equal-mass bins) cannot see a gain below 1%
false-positive rate. Every information here is cross-fitted (:func:`ema.stats.information.cross_fit_information`):
a likelihood ratio fitted on four fifths of both sides, evaluated on the fifth left out, so
noise cannot pass for information, and a better-resolved ratio can only raise it. Three ratios:
the auditor's own bins (13, finer in the tails), and a logistic regression on a spline basis of
each score (smooth, extrapolating into both tails), on one score or on two jointly. Each row
also gives the cross-fitted AUC and true-positive rates at 1% and 0.1% false positives, and the
margin the information certifies at 200 query samples (``ema.stats.certify.certifiable_margin``,
1,000 non-member reference samples). ``--output docs/REFERENCE_AUDITOR.md`` writes the section there.

``--power-bound overfit,generalising,fashion`` trains nothing: from the reference study's cached
pools, the most power any test of H0 "removed" can have against a fully retained query of 20 to
200 samples (the Neyman-Pearson bound behind issue 26's "members memorized at 50 and 75"); with
``--augment shifts``, of the score the auditor takes from the 9 views (:func:`ema.auditors.views.view_score`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import stats
from sklearn.metrics import roc_auc_score, roc_curve

from ema.data.shifts import AUGMENT_NONE, AUGMENTATIONS
from ema.experiments.errors.reference_pools import DEFAULT_CACHE
from ema.experiments.errors.reference_report import REFERENCE_MODELS_HEADING, replace_section
from ema.stats.binned_tests import DEFAULT_BIN_LEVELS
from ema.stats.certify import certifiable_margin
from ema.stats.information import cross_fit_information, cross_fitted_information

#: Bins of the old information estimate, at non-member quantiles.
BINS = 20
#: Query and non-member reference sizes of the margin each information certifies.
GOAL_SIZE, REFERENCE_SIZE = 200, 1000
#: torch threads of training and scoring (the reference study's pools are cached at the same count).
THREADS = 1
#: Folds of the cross-fitted classifiers (four fifths of each side fit, one fifth is held out).
CLASSIFIER_FOLDS = 5
#: Knots per score of the spline basis.
SPLINE_KNOTS = 8
#: Query sizes of the member-detection power bound (``--power-bound``).
POWER_SIZES = (20, 50, 75, 200)
#: Spread added to the references' standard deviation, so that an image they all agree on keeps a finite z.
SPREAD_FLOOR = 1e-3
COMMAND = "python -m ema.experiments.errors.reference_models"


def information(members: np.ndarray, nonmembers: np.ndarray, bins: int = BINS) -> float:
    """chi^2(F_mem || F_non) over ``bins`` bins at non-member quantiles, less its expectation with no difference.

    The estimate the first study used (in-sample, 20 equal-mass bins), kept for comparison.
    """
    edges = np.quantile(nonmembers, np.linspace(0, 1, bins + 1)[1:-1])
    p_mem = np.bincount(np.searchsorted(edges, members), minlength=bins) / members.size
    p_non = np.bincount(np.searchsorted(edges, nonmembers), minlength=bins) / nonmembers.size
    chi2 = float(np.sum((p_mem - p_non) ** 2 / np.maximum(p_non, 1e-12)))
    return chi2 - (bins - 1) * (1 / members.size + 1 / nonmembers.size)


def fit_spline_ratio(train_members: np.ndarray, train_nonmembers: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """f_mem / f_non from a logistic regression on a spline basis of each feature, corrected for the class sizes."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import SplineTransformer, StandardScaler

    features = np.vstack([train_members, train_nonmembers])
    truth = np.r_[np.ones(len(train_members)), np.zeros(len(train_nonmembers))]
    model = make_pipeline(
        StandardScaler(),
        SplineTransformer(n_knots=SPLINE_KNOTS, knots="quantile", extrapolation="linear"),
        LogisticRegression(C=1.0, max_iter=2000),
    ).fit(features, truth)
    prior = len(train_nonmembers) / len(train_members)
    return lambda x: np.exp(model.decision_function(x)) * prior


def held_out_scores(members: np.ndarray, nonmembers: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Each sample's log-ratio from the spline classifier fitted on the other folds: for AUC and tail rates."""
    rng = np.random.default_rng(seed)
    member_folds = rng.permutation(len(members)) % CLASSIFIER_FOLDS
    nonmember_folds = rng.permutation(len(nonmembers)) % CLASSIFIER_FOLDS
    out_m, out_n = np.empty(len(members)), np.empty(len(nonmembers))
    for fold in range(CLASSIFIER_FOLDS):
        ratio = fit_spline_ratio(members[member_folds != fold], nonmembers[nonmember_folds != fold])
        out_m[member_folds == fold] = np.log(ratio(members[member_folds == fold]))
        out_n[nonmember_folds == fold] = np.log(ratio(nonmembers[nonmember_folds == fold]))
    return out_m, out_n


def tpr_at_fpr(members: np.ndarray, nonmembers: np.ndarray, fpr: float) -> float:
    """True-positive rate of the score at false-positive rate ``fpr`` (the ROC curve's last point at or below it)."""
    false_pos, true_pos, _ = roc_curve(
        np.r_[np.ones(members.size), np.zeros(nonmembers.size)], np.r_[members, nonmembers]
    )
    return float(true_pos[np.searchsorted(false_pos, fpr, side="right") - 1])


def score_row(members: np.ndarray, nonmembers: np.ndarray, how: str, seed: int) -> dict[str, float]:
    """AUC, tail rates and cross-fitted information of features ``members`` / ``nonmembers`` (n, d)."""
    if how == "bins":
        info = cross_fitted_information(members[:, 0], nonmembers[:, 0], DEFAULT_BIN_LEVELS, random_state=seed)
        score_m, score_n = members[:, 0], nonmembers[:, 0]
    else:
        info = cross_fit_information(members, nonmembers, fit_spline_ratio, n_folds=CLASSIFIER_FOLDS, random_state=seed)
        score_m, score_n = held_out_scores(members, nonmembers, seed)
    auc = roc_auc_score(np.r_[np.ones(score_m.size), np.zeros(score_n.size)], np.r_[score_m, score_n])
    return {
        "AUC": float(auc),
        "TPR at 1% FPR": tpr_at_fpr(score_m, score_n, 0.01),
        "TPR at 0.1% FPR": tpr_at_fpr(score_m, score_n, 0.001),
        "I (20 bins, old)": information(members[:, 0], nonmembers[:, 0]) if members.shape[1] == 1 else np.nan,
        "I (cross-fitted)": info,
        f"margin at {GOAL_SIZE}": min(1.0, certifiable_margin(GOAL_SIZE, REFERENCE_SIZE, info)),
    }


#: Rows of the table: (label, feature columns of [raw, z], ratio).
ESTIMATORS: tuple[tuple[str, tuple[int, ...], str], ...] = (
    ("raw log-odds, the auditor's 13 bins", (0,), "bins"),
    ("raw log-odds, spline classifier", (0,), "spline"),
    ("z (minus the references' mean, over their spread), 13 bins", (1,), "bins"),
    ("z, spline classifier", (1,), "spline"),
    ("raw and z jointly, spline classifier", (0, 1), "spline"),
)


def features(target: np.ndarray, references: np.ndarray) -> np.ndarray:
    """(n, 2): the target's score and its z against the references' scores (K, n) on the same images."""
    spread = references.std(axis=0, ddof=1) + SPREAD_FLOOR
    return np.column_stack([target, (target - references.mean(axis=0)) / spread])


def reference_scores(n_references: int, seed: int, parts) -> np.ndarray:
    """(K, n) log-odds of ``K`` reference models on the images of ``parts``, each trained on 10,000 free images."""
    from ema.data.catalog import open_source
    from ema.data.presets import POOL_SPLIT, load_splits
    from ema.inputs import to_model_inputs
    from ema.signals import log_odds_score
    from ema.training.fit import fit, predict_proba
    from ema.training.spec import TrainSpec

    splits = load_splits("fashion", 0)
    free_x, free_y = free_images(splits, open_source("fashion", None).load(POOL_SPLIT))
    x = np.concatenate([part.x for part in parts])
    y = np.concatenate([part.y for part in parts])
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    out = []
    for k in range(n_references):
        chosen = rng.choice(free_y.size, splits.train.y.size, replace=False)
        model = fit(TrainSpec(seed=100 + k), to_model_inputs(free_x[chosen]), free_y[chosen], progress=False)
        out.append(log_odds_score(predict_proba(model, to_model_inputs(x)), y))
        print(f"reference {k + 1} of {n_references} trained ({time.perf_counter() - started:.0f} s)", flush=True)
    return np.array(out)


def free_images(splits, pool) -> tuple[np.ndarray, np.ndarray]:
    """The pool's images that the target's splits do not use (training folds, calibration, M6)."""
    used = {image.tobytes() for part in (splits.train, splits.calibration, splits.held_out) for image in part.x}
    keep = np.fromiter((image.tobytes() not in used for image in pool.x), bool, len(pool.y))
    return pool.x[keep], pool.y[keep]


def measure(n_references: int, seed: int, cache: Path) -> dict[str, dict[str, float]]:
    """Every estimator's row, on members M1..M5 and non-members (calibration set, M6) of the Fashion-MNIST target."""
    from ema.data.presets import load_splits
    from ema.experiments.errors.reference_pools import score_pools
    from ema.signals import log_odds_score
    from ema.training.threads import use_threads

    use_threads(THREADS)  # float sums differ with the thread count: fix it
    pools = score_pools("fashion", cache, threads=THREADS)
    member_keys, nonmember_keys = [f"M{i}" for i in range(1, 6)], ["cal", "M6"]
    target = np.concatenate([log_odds_score(*pools[key]) for key in (*member_keys, *nonmember_keys)])
    splits = load_splits("fashion", 0)
    parts = [*splits.folds, splits.calibration, splits.held_out]
    references = reference_scores(n_references, seed, parts)
    both = features(target, references)
    n_members = sum(pools[key][1].size for key in member_keys)
    members, nonmembers = both[:n_members], both[n_members:]
    return {
        label: score_row(members[:, columns], nonmembers[:, columns], how, seed) for label, columns, how in ESTIMATORS
    }


def neyman_pearson_power(member_llr: np.ndarray, nonmember_llr: np.ndarray, n_query: int, alpha: float) -> float:
    """Power of the simple-vs-simple test of a fully retained query of ``n_query`` against removal (normal approx.).

    The log-likelihood ratios are per-sample values on members and non-members; the test sums
    them over the query and rejects above the non-members' 1 - alpha quantile of that sum. With
    the references taken as the truth, no test of H0 "removed" at level alpha is more powerful.
    """
    shift = np.sqrt(n_query) * (member_llr.mean() - nonmember_llr.mean())
    return float(stats.norm.cdf((shift - stats.norm.ppf(1 - alpha) * nonmember_llr.std()) / member_llr.std()))


def power_bounds(
    names: list[str], cache: Path, sizes=POWER_SIZES, alpha: float = 0.1, *, augment: str = AUGMENT_NONE
) -> dict[str, list[float]]:
    """Per target of the reference study: the Neyman-Pearson power at ``sizes`` with the cross-fitted spline ratio,
    of the auditor's score of the pools scored with ``augment``'s views."""
    from ema.auditors.views import view_score
    from ema.experiments.errors.reference_pools import score_pools
    from ema.signals import log_odds_score

    out = {}
    for name in names:
        pools = score_pools(name, cache, threads=THREADS, augment=augment)
        members = np.concatenate([view_score(log_odds_score, *pools[f"M{i}"]) for i in range(1, 6)])
        nonmembers = np.concatenate([view_score(log_odds_score, *pools[key]) for key in ("cal", "M6")])
        llr_m, llr_n = held_out_scores(members[:, None], nonmembers[:, None], seed=0)
        out[name] = [neyman_pearson_power(llr_m, llr_n, size, alpha) for size in sizes]
    return out


def main(argv: list[str] | None = None) -> None:
    """Train the references, then print each estimator's AUC, tail rates, information and certifiable margin."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--references", type=int, default=8, help="Reference models (at least 2; default 8).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the references' training draws and the folds.")
    parser.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help=f"The reference study's pools (default: {DEFAULT_CACHE})."
    )
    parser.add_argument(
        "--power-bound",
        default=None,
        help="Instead: comma-separated targets of the reference study whose member-detection power bound "
        f"(Neyman-Pearson, cross-fitted spline ratio, alpha 0.1) to print at {', '.join(map(str, POWER_SIZES))}.",
    )
    parser.add_argument(
        "--augment",
        choices=AUGMENTATIONS,
        default=AUGMENT_NONE,
        help=f"With --power-bound: the views each image is scored with (default: {AUGMENT_NONE}).",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="Also write the section into this Markdown file, replacing its previous version "
        "(docs/REFERENCE_AUDITOR.md; default: print only).",
    )
    args = parser.parse_args(argv)
    if args.power_bound:
        bounds = power_bounds(args.power_bound.split(","), args.cache, augment=args.augment)
        print("| target | " + " | ".join(f"power bound at {size}" for size in POWER_SIZES) + " |")
        print("|---|" + "---|" * len(POWER_SIZES))
        for name, row in bounds.items():
            print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
        return
    if args.references < 2:
        parser.error(f"expected --references >= 2 (the z score needs a spread), got {args.references}")
    started = time.perf_counter()
    results = measure(args.references, args.seed, args.cache)
    command = f"{COMMAND} --references {args.references} --seed {args.seed}"
    section = models_section(results, command, time.perf_counter() - started)
    if args.output is not None:
        replace_section(args.output, REFERENCE_MODELS_HEADING, section)
    print(section)


def models_section(results: dict[str, dict[str, float]], command: str, elapsed: float) -> str:
    """The Markdown section of the study: what was measured, the table, and whether the references add information."""
    columns = list(next(iter(results.values())))
    raw = results[ESTIMATORS[0][0]]["I (cross-fitted)"]
    best_label, best = max(((label, row["I (cross-fitted)"]) for label, row in results.items()), key=lambda x: x[1])
    lines = [
        REFERENCE_MODELS_HEADING,
        "",
        f"Written by `{command}` in {elapsed:.0f} s. The Fashion-MNIST target of the study above against K",
        "reference models of its recipe, each trained on 10,000 of the Fashion-MNIST images its splits do not use;",
        "members: folds M1..M5 (10,000), non-members: the calibration set and M6 (3,000). Each information is",
        "cross-fitted (a likelihood ratio fitted on four fifths of both sides, scored on the fifth left out:",
        "`ema.stats.information.cross_fit_information`), so noise cannot pass for information and a finer ratio can",
        "only raise it; the spline classifier is a logistic regression on a spline basis of each score, smooth",
        "into both tails. Margin: what the information certifies at 200 query and 1,000 reference samples.",
        "",
        "| score | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
        *(
            f"| {name} | " + " | ".join("-" if np.isnan(v) else f"{v:.3f}" for v in row.values()) + " |"
            for name, row in results.items()
        ),
        "",
        f"Best: {best_label}, I = {best:.3f}, {best / raw:.2f}x the auditor's score today (I = {raw:.3f}).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
