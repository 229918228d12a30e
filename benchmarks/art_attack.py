"""``python -m benchmarks.art_attack``: ``--augment shifts`` against IBM ART's black-box membership attacks.

Issue 26 asks that the shifted queries' cross-fitted information be at least twice the best black-box
attack of the Adversarial Robustness Toolbox (ART 1.20.1, a dev-only dependency: the ``[bench]`` extra)
on the same targets. Each target of :data:`ema.experiments.errors.reference_pools.TARGETS` is trained
with the workbench's recipe code (split seed 0) and reached through its probabilities only: ART sees an
oracle (``BlackBoxClassifier``) and the probabilities it returned, never the weights.

The sets (folds M1..M5 are the target's training data):

- evaluation, never seen by any attack model: members M4 + M5, non-members the preset's non-member
  reference (its calibration set where it has no reference, as ``ema audit --method calibrated``);
- ``MembershipInferenceBlackBox`` (attack models rf, gb, nn): trained on the target's outputs on
  members M1..M3 and non-members M6 (an attacker who holds some of the training data);
- the shadow route: ``ShadowModels`` trains 8 shadow models of the target's own recipe
  (:func:`ema.training.fit.fit`, seeds 1..8 after the target's) on halves of M1..M3 + M6 (disjoint
  from the evaluation sets), and their outputs on their own members and non-members train the same
  three attack models, which then score the target's outputs.

Every score (ART's membership probability, our plain log-odds, our 9-view shifted score) is measured
on the evaluation sets with the auditor's own estimator, :func:`ema.stats.information.cross_fitted_information`
at the auditor's bin levels (mean over ``--seeds`` cross-fitting seeds, with a bootstrap standard error over
resamples of the evaluation sets), plus AUC and TPR at 1% FPR.
The Markdown summary replaces the ``art-table`` block of docs/VALIDITY.md; every figure goes to
benchmarks/RESULTS-art.md. The shadow models' outputs are cached (``--cache``), keyed by target,
seed, shadow count and recipe. Without ART the run is skipped with the reason, and nothing is written.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from tempfile import gettempdir

import numpy as np

from benchmarks._common import Skipped, machine_info, progress, replace_block, require_module, set_threads
from ema.errors import InputError
from ema.experiments.errors.reference_pools import TARGETS
from ema.training.spec import TrainSpec

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "VALIDITY.md"
RESULTS = Path(__file__).resolve().parent / "RESULTS-art.md"
BLOCK = "art-table"
#: The heading the block is appended under on a page that lacks it.
HEADING = "## `--augment shifts` against ART's black-box attacks (issue 26)"
DEFAULT_CACHE = Path(gettempdir()) / "ema-art-shadows"
#: ART's default attack models compared (``MembershipInferenceBlackBox(attack_model_type=...)``).
ATTACK_MODELS = ("rf", "gb", "nn")
#: Shadow models of the shadow route (the issue's 8).
DEFAULT_SHADOWS = 8
#: Issue 26's goal: shifted information / best ART information.
GOAL_RATIO = 2.0
#: Bootstrap resamples of the evaluation sets behind each information's standard error.
BOOTSTRAP_RESAMPLES = 100
#: The score of the plain audit and the signal the shifted score is built from.
SIGNAL = "log_odds"
COMMAND = "python -m benchmarks.art_attack"


@dataclass(frozen=True)
class Evaluation:
    """One per-sample membership score measured on the evaluation members and non-members."""

    score: str
    information: float
    information_se: float
    auc: float
    tpr_at_fpr_1pct: float


@dataclass(frozen=True)
class TargetSets:
    """The target's probabilities (through its oracle) on every set the benchmark uses, with the labels.

    ``eval_*_views`` are the 9 views (identity first) of the evaluation sets, shape (9, n, C).
    ``shadow_x``/``shadow_y``: the model inputs the shadow models train on (M1..M3 + M6).
    """

    attack_members: tuple[np.ndarray, np.ndarray]
    attack_nonmembers: tuple[np.ndarray, np.ndarray]
    eval_member_views: tuple[np.ndarray, np.ndarray]
    eval_nonmember_views: tuple[np.ndarray, np.ndarray]
    shadow_x: np.ndarray
    shadow_y: np.ndarray


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--targets",
        nargs="+",
        choices=tuple(TARGETS),
        default=("overfit", "generalising"),
        help="Targets measured (default: overfit generalising; fashion needs the Fashion-MNIST files).",
    )
    parser.add_argument("--shadows", type=int, default=DEFAULT_SHADOWS, help="Shadow models (default 8).")
    parser.add_argument(
        "--attack-models",
        default=",".join(ATTACK_MODELS),
        help=f"Comma-separated ART attack models from {', '.join(ATTACK_MODELS)} (default: all).",
    )
    parser.add_argument("--seeds", type=int, default=5, help="Cross-fitting seeds averaged (default 5).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the attack models and shadow splits.")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1).")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="Folder of cached shadow outputs.")
    parser.add_argument("--out", type=Path, default=DOC, help="The page whose art-table block is replaced.")
    parser.add_argument("--results", type=Path, default=RESULTS, help="Where every figure is written.")
    args = parser.parse_args(argv)
    models = tuple(m.strip() for m in args.attack_models.split(",") if m.strip())
    if not models or any(m not in ATTACK_MODELS for m in models):
        parser.error(f"expected --attack-models from {', '.join(ATTACK_MODELS)}, got {args.attack_models!r}")
    if args.shadows < 1 or args.seeds < 1:
        parser.error(f"expected --shadows and --seeds >= 1, got {args.shadows} and {args.seeds}")
    args.attack_models = models
    return args


# ---------------------------------------------------------------------------------------------- the adapter
def membership_scores(attack, proba: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """An ART membership attack's per-sample score: its probability that each sample is a member.

    Parameters
    ----------
    attack : art.attacks.inference.membership_inference.MembershipInferenceBlackBox
        A fitted attack (any attack model).
    proba : ndarray of shape (n_samples, n_classes)
        The target's probabilities on the samples (black box: ART never calls the model here).
    labels : ndarray of shape (n_samples,)
        Their true labels.

    Returns
    -------
    ndarray of shape (n_samples,)
        float64, higher meaning more member-like: the shape
        :func:`ema.stats.information.cross_fitted_information` and
        :func:`ema.auditors.attack.attack_strength` take. ART returns (n, 1).

    Raises
    ------
    InputError
        If ART's output does not hold one finite score per sample.
    """
    inferred = attack.infer(None, np.asarray(labels), pred=np.asarray(proba, dtype=np.float32), probabilities=True)
    scores = np.asarray(inferred, dtype=np.float64).reshape(-1)
    if scores.size != len(labels) or not np.isfinite(scores).all():
        raise InputError(
            f"expected {len(labels)} finite membership probabilities from ART, got shape {np.shape(inferred)}: "
            "pass the attack the probabilities and labels of the same samples"
        )
    return scores


def evaluate(score: str, members: np.ndarray, nonmembers: np.ndarray, seeds: int) -> Evaluation:
    """The auditor's cross-fitted information (mean over ``seeds`` fold draws) with its bootstrap standard error,
    AUC and TPR at 1% FPR of a score."""
    from ema.auditors.attack import attack_strength
    from ema.stats.binned_tests import DEFAULT_BIN_LEVELS
    from ema.stats.information import cross_fitted_information

    levels = np.asarray(DEFAULT_BIN_LEVELS)
    information = np.mean(
        [cross_fitted_information(members, nonmembers, levels, random_state=seed) for seed in range(seeds)]
    )
    rng = np.random.default_rng(seeds)
    resampled = [  # each side resampled with replacement: the sampling error of the evaluation sets
        cross_fitted_information(
            rng.choice(members, members.size), rng.choice(nonmembers, nonmembers.size), levels, random_state=i
        )
        for i in range(BOOTSTRAP_RESAMPLES)
    ]
    strength = attack_strength(members, nonmembers)
    return Evaluation(
        score, float(information), float(np.std(resampled, ddof=1)), strength.auc, strength.tpr_at_fpr_1pct
    )


# ---------------------------------------------------------------------------------------------- shadow models
class RecipeShadow:
    """An ART shadow-model template that trains with the target's own recipe (:func:`ema.training.fit.fit`).

    ART's ``ShadowModels`` asks its template for ``clone_for_refitting()``, ``input_shape``, ``fit``
    and ``predict`` only. Each clone takes the next seed of ``seeds`` (shared by all clones), so the
    shadow models differ in their initial weights and batch order as independent trainings would.
    """

    def __init__(self, spec: TrainSpec, input_shape: tuple[int, ...], seeds: itertools.count, label: str) -> None:
        self.spec, self.input_shape, self.seeds, self.label = spec, input_shape, seeds, label
        self.model = None

    def clone_for_refitting(self) -> RecipeShadow:
        return RecipeShadow(replace(self.spec, seed=next(self.seeds)), self.input_shape, self.seeds, self.label)

    def fit(self, x: np.ndarray, y: np.ndarray, **_) -> None:
        from ema.training.fit import fit

        progress(f"{self.label}: shadow model seed {self.spec.seed} on {len(x):,} samples")
        self.model = fit(self.spec, x, np.asarray(y), progress=False, desc=f"shadow {self.spec.seed}")

    def predict(self, x: np.ndarray, **_) -> np.ndarray:
        from ema.training.fit import predict_proba

        return predict_proba(self.model, x)


def shadow_outputs(name: str, sets: TargetSets, args: argparse.Namespace) -> dict[str, np.ndarray]:
    """The shadow models' probabilities and labels on their own members and non-members; trained once, cached."""
    spec = TARGETS[name][1]
    key = hashlib.sha256(repr((spec, args.seed, args.shadows, sets.shadow_x.shape)).encode()).hexdigest()[:12]
    path = args.cache / f"shadows_{name}_{key}.npz"
    if path.exists():
        progress(f"{name}: shadow outputs from the cache {path}")
        with np.load(path) as stored:
            return dict(stored)
    from art.attacks.inference.membership_inference import ShadowModels

    template = RecipeShadow(spec, sets.shadow_x.shape[1:], itertools.count(spec.seed + 1), name)
    shadows = ShadowModels(template, num_shadow_models=args.shadows, random_state=args.seed)
    (_, member_y, member_p), (_, nonmember_y, nonmember_p) = shadows.generate_shadow_dataset(
        sets.shadow_x, sets.shadow_y
    )
    arrays = {"member_p": member_p, "member_y": member_y, "nonmember_p": nonmember_p, "nonmember_y": nonmember_y}
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)
    return arrays


# ---------------------------------------------------------------------------------------------- the target
def score_target(name: str) -> TargetSets:
    """Train target ``name`` (split seed 0); its probabilities on every set, with the shifts on the evaluation sets."""
    from ema.data.presets import load_splits
    from ema.data.shifts import N_SHIFT_VIEWS, shift_views
    from ema.inputs import to_model_inputs
    from ema.training.fit import fit, predict_proba

    data, spec, _ = TARGETS[name]
    splits = load_splits(data, 0)
    progress(f"{name}: training the target on {len(splits.train):,} samples")
    model = fit(spec, splits.train.model_inputs(), splits.train.y, progress=False, desc=f"train {name}")
    folds = splits.folds

    def joined(parts):
        return np.concatenate([p.model_inputs() for p in parts]), np.concatenate([p.y for p in parts])

    def views(parts) -> tuple[np.ndarray, np.ndarray]:
        x, y = np.concatenate([p.x for p in parts]), np.concatenate([p.y for p in parts])
        shifted = shift_views(x).reshape(-1, *x.shape[1:])
        return predict_proba(model, to_model_inputs(shifted)).reshape(N_SHIFT_VIEWS, len(y), -1), y

    attack_x, attack_y = joined(folds[:3])
    held_x, held_y = joined([splits.held_out])
    nonmembers = splits.reference if splits.reference is not None else splits.calibration
    return TargetSets(
        attack_members=(predict_proba(model, attack_x), attack_y),
        attack_nonmembers=(predict_proba(model, held_x), held_y),
        eval_member_views=views(folds[3:]),
        eval_nonmember_views=views([nonmembers]),
        shadow_x=np.concatenate([attack_x, held_x]),
        shadow_y=np.concatenate([attack_y, held_y]),
    )


# ---------------------------------------------------------------------------------------------- the attacks
def fitted_attack(
    kind: str,
    members: tuple[np.ndarray, np.ndarray],
    nonmembers: tuple[np.ndarray, np.ndarray],
    *,
    input_shape: tuple[int, ...],
    seed: int,
):
    """ART's ``MembershipInferenceBlackBox`` with its default ``kind`` attack model (seeded), fitted on the
    (probabilities, labels) of ``members`` and ``nonmembers`` (black box: predictions, never weights).

    ``input_shape`` is the oracle's input shape, which ART's estimator records; the class count is the
    probabilities' width.
    """
    import torch
    from art.attacks.inference.membership_inference import MembershipInferenceBlackBox
    from art.estimators.classification import BlackBoxClassifier

    def refuse(_x):  # every prediction is handed over: the oracle is never called again
        raise AssertionError("the benchmark passes the target's probabilities to ART")

    oracle = BlackBoxClassifier(refuse, input_shape, members[0].shape[1])
    attack = MembershipInferenceBlackBox(oracle, attack_model_type=kind)
    if kind != "nn":
        attack.attack_model.set_params(random_state=seed)
    torch.manual_seed(seed)
    (member_p, member_y), (nonmember_p, nonmember_y) = members, nonmembers
    attack.fit(None, member_y, None, nonmember_y, pred=member_p, test_pred=nonmember_p)
    return attack


def measure_target(name: str, args: argparse.Namespace) -> tuple[list[Evaluation], dict[str, int]]:
    """Every score on target ``name``: ours (plain, shifts), then each ART attack, on the same evaluation sets."""
    from ema.auditors.views import view_score
    from ema.signals import SIGNALS

    sets = score_target(name)
    (member_views, member_y), (nonmember_views, nonmember_y) = sets.eval_member_views, sets.eval_nonmember_views
    score = SIGNALS[SIGNAL]
    rows = [
        evaluate(
            "ours: log-odds, 1 view",
            score(member_views[0], member_y),
            score(nonmember_views[0], nonmember_y),
            args.seeds,
        ),
        evaluate(
            "ours: --augment shifts, 9 views",
            view_score(score, member_views, member_y),
            view_score(score, nonmember_views, nonmember_y),
            args.seeds,
        ),
    ]
    eval_members, eval_nonmembers = (member_views[0], member_y), (nonmember_views[0], nonmember_y)
    shadow = shadow_outputs(name, sets, args)
    routes = {
        "ART black box": (sets.attack_members, sets.attack_nonmembers),
        f"ART {args.shadows} shadow models": (
            (shadow["member_p"], shadow["member_y"]),
            (shadow["nonmember_p"], shadow["nonmember_y"]),
        ),
    }
    for route, (members, nonmembers) in routes.items():  # two routes x three attack models
        for kind in args.attack_models:
            progress(f"{name}: {route}, attack model {kind}")
            attack = fitted_attack(kind, members, nonmembers, input_shape=sets.shadow_x.shape[1:], seed=args.seed)
            rows.append(
                evaluate(
                    f"{route} + {kind}",
                    membership_scores(attack, *eval_members),
                    membership_scores(attack, *eval_nonmembers),
                    args.seeds,
                )
            )
    sizes = {
        "eval_members": len(member_y),
        "eval_nonmembers": len(nonmember_y),
        "attack_members": len(sets.attack_members[1]),
        "attack_nonmembers": len(sets.attack_nonmembers[1]),
        "shadow_rows": len(shadow["member_y"]) + len(shadow["nonmember_y"]),
    }
    return rows, sizes


# ---------------------------------------------------------------------------------------------- the tables
def summary_row(name: str, rows: list[Evaluation]) -> str:
    """One target's line: ours plain and shifted, the best ART attack, and the ratio to the goal."""
    plain, shifted, *art = rows
    best = max(art, key=lambda r: r.information)
    ratio = shifted.information / best.information if best.information > 0 else float("inf")
    met = "met" if ratio >= GOAL_RATIO else "**not met**"
    return (
        f"| {name} | {plain.information:.3f} ± {plain.information_se:.3f} | {shifted.information:.3f} ± "
        f"{shifted.information_se:.3f} | {best.information:.3f} ± {best.information_se:.3f} ({best.score}; "
        f"AUC {best.auc:.3f}) | {ratio:.2f}x | {met} |"
    )


def summary_table(results: dict[str, list[Evaluation]], args: argparse.Namespace, seconds: float) -> list[str]:
    """The docs/VALIDITY.md block: per target, ours plain / shifted vs the best ART attack."""
    return [
        f"<!-- {BLOCK} -->",
        f"Measured by `{command_line(args)}` ({seconds / 60:.0f} min on {args.threads} CPU thread(s); ART 1.20.1; "
        f"every attack in [benchmarks/RESULTS-art.md](../benchmarks/RESULTS-art.md)). Cross-fitted information per "
        f"sample about the retained share at pi = 0, mean of {args.seeds} fold draws ± its bootstrap standard error "
        f"({BOOTSTRAP_RESAMPLES} resamples), on the same held-out members (M4 + M5) and non-members (the preset's "
        "non-member reference) for every score.",
        "",
        f"| target | ours, log-odds | ours, `--augment shifts` | best ART attack | shifts / best ART | "
        f"goal >= {GOAL_RATIO:g}x |",
        "|---|---|---|---|---|---|",
        *(summary_row(name, rows) for name, rows in results.items()),
        f"<!-- /{BLOCK} -->",
    ]


def results_page(
    results: dict[str, list[Evaluation]],
    sizes: dict[str, dict[str, int]],
    args: argparse.Namespace,
    seconds: float,
    info: dict[str, str],
) -> str:
    """benchmarks/RESULTS-art.md: the command, the machine, and every score on every target."""
    out = [
        "# `--augment shifts` against ART's black-box membership attacks",
        "",
        f"Written by `{command_line(args)}` in {seconds / 60:.1f} min. Do not edit by hand: rerun the command.",
        "",
        *(f"- {key}: {value}" for key, value in info.items()),
        "",
        (__doc__ or "").split("\n\n", 1)[1].strip(),
    ]
    for name, rows in results.items():
        n = sizes[name]
        out += [
            "",
            f"## {TARGETS[name][2]}",
            "",
            f"Evaluation: {n['eval_members']:,} members, {n['eval_nonmembers']:,} non-members. Black-box attack "
            f"trained on {n['attack_members']:,} members and {n['attack_nonmembers']:,} non-members; shadow attack "
            f"on {n['shadow_rows']:,} shadow outputs.",
            "",
            "| score | cross-fitted information | bootstrap s.e. | AUC | TPR at 1% FPR |",
            "|---|---|---|---|---|",
            *(
                f"| {r.score} | {r.information:.4f} | {r.information_se:.4f} | {r.auc:.3f} | {r.tpr_at_fpr_1pct:.3f} |"
                for r in rows
            ),
        ]
    return "\n".join([*out, ""])


def command_line(args: argparse.Namespace) -> str:
    return (
        f"{COMMAND} --targets {' '.join(args.targets)} --shadows {args.shadows} --attack-models "
        f"{','.join(args.attack_models)} --seeds {args.seeds} --seed {args.seed} --threads {args.threads}"
    )


def main(argv: list[str] | None = None) -> int:
    """Measure every target, write both pages, print the summary; 0 with a reason on stderr when ART is missing."""
    args = parse_args(argv)
    try:
        require_module("art", "bench")
    except Skipped as reason:
        print(f"{COMMAND} skipped: {reason}", file=sys.stderr)
        return 0
    set_threads(args.threads)
    info = machine_info(args.threads)
    started = time.perf_counter()
    results, sizes = {}, {}
    for name in args.targets:  # two or three targets
        results[name], sizes[name] = measure_target(name, args)
        progress(f"{name}: " + "; ".join(f"{r.score} {r.information:.4f}" for r in results[name]))
    seconds = time.perf_counter() - started
    table = summary_table(results, args, seconds)
    replace_block(args.out, table, heading=HEADING)
    args.results.write_text(results_page(results, sizes, args, seconds, info))
    print("\n".join(table[3:-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
