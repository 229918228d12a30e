"""``python -m benchmarks.marks``: issue 28's Done-when table for secret marks, written into docs/MARKS.md.

The demo target (the embedded MNIST sample's splits, seed 0: five folds of 1,000, the paper's
recipe: MLP (256, 256), SGD, 50 epochs) is trained with 10% of M1 marked (100 of 5,000 training
images), one model per key (key seed i, training seed i). The auditor stamps the trigger on the
first ``--queries`` images of the held-out set M6 (its own clean images, never the marked file)
and runs the marks auditor on the two predictions, as ``ema audit --method marks`` does; the
models are scored in this process, the audit's arithmetic is the auditor's own.

Rows: detection on the marked models; false ``memorized`` of many keys against models trained
without the mark (a clean target, and the exact retrain without M1); wrong keys against the
marked models; the approximate removal methods of ``ema unlearn`` on the marked models (forget:
the marked M1; retain: M2..M5) at several query sizes; clean held-out accuracy, marked vs
unmarked with the same training seeds. Training is the cost: about 20 s a model on one core.
``--colour SIDE`` measures on colour images instead (the trigger is then a noise pattern, audited
with its controls: :func:`ema.data.marks.trigger_rule`), ``--arch cnn`` with the small CNN of colour targets.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks._common import replace_block, set_threads
from ema.auditors.marks import MarksAuditor
from ema.data import make_splits
from ema.data.arrays import ArraySet
from ema.data.marks import MarkKey, mark_set
from ema.data.sources.images import resize_set
from ema.data.splits import Splits
from ema.errors import InputError
from ema.training.spec import TrainSpec
from ema.workflows.mark_audit import audit_key

DOC = Path(__file__).resolve().parents[1] / "docs" / "MARKS.md"
#: Key seeds of the keys never trained on (clean and wrong keys) start here, apart from the trained ones.
UNTRAINED_KEY_BASE = 10_000
APPROXIMATE_METHODS = ("finetune", "neggrad", "random-labels", "scrub")
#: The audit's level and the margin a removal is certified at, by default (the issue's).
ALPHA, MARGIN = 0.1, 0.05
QUERY_SIZES = (50, 100, 200, 500, 1000)
#: The paper's learning rate (the recipe's default).
PAPER_LR = TrainSpec().lr


@dataclass(frozen=True)
class Setup:
    splits: Splits
    queries: ArraySet
    alpha: float
    margin: float
    epochs: int
    arch: str
    lr_decay: float = 0.0
    lr: float = PAPER_LR


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.marks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=50, help="Marked models, one key each (default 50, the goal's).")
    parser.add_argument("--clean-keys", type=int, default=200, help="Keys tested against each unmarked model.")
    parser.add_argument("--unmarked", type=int, default=3, help="Unmarked models for the accuracy comparison.")
    parser.add_argument("--unlearned", type=int, default=3, help="Marked models each approximate method unlearns.")
    parser.add_argument("--queries", type=int, default=200, help="Clean images the auditor queries (default 200).")
    parser.add_argument("--epochs", type=int, default=50, help="Training epochs (the paper's recipe: 50).")
    parser.add_argument(
        "--arch",
        choices=("mlp", "cnn"),
        default="mlp",
        help="Architecture of every model trained (default mlp, the paper's; cnn: the colour target's small CNN).",
    )
    parser.add_argument(
        "--lr-decay",
        type=float,
        default=0.0,
        help="Inverse-time learning-rate decay per step (default 0, the paper's; docs/MARKS.md's colour runs: 1e-3).",
    )
    parser.add_argument(
        "--lr",
        type=float,
        default=PAPER_LR,
        help=f"SGD learning rate (default {PAPER_LR:g}, the paper's; docs/MARKS.md's colour runs: 0.025).",
    )
    parser.add_argument("--alpha", type=float, default=ALPHA)
    parser.add_argument("--margin", type=float, default=MARGIN)
    parser.add_argument(
        "--colour",
        type=int,
        default=0,
        metavar="SIDE",
        help="Measure on colour images of SIDE x SIDE instead: each digit resized, in a seeded random colour on "
        "another (0: the grey 28 x 28 demo).",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=DOC, help="The page whose marked table block is replaced.")
    args = parser.parse_args(argv)
    check_rates(parser, args)
    return args


def check_rates(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse ``--lr`` and ``--lr-decay`` that no recipe takes, before any model trains (the recipe's own check)."""
    try:
        TrainSpec(lr=args.lr, lr_decay=args.lr_decay)
    except InputError as error:
        parser.error(str(error))


def colour_splits(splits: Splits, side: int) -> Splits:
    """``splits`` as colour images of ``side`` x ``side``: each digit resized, its strokes and background in two
    colours drawn per image (seeded by the image's position in its pool)."""

    def colour(data: ArraySet) -> ArraySet:
        grey = resize_set(data, side).x.astype(np.float32)[..., np.newaxis] / 255
        rng = np.random.default_rng(data.index)
        background, strokes = rng.integers(0, 256, size=(2, len(data), 1, 1, 3))
        x = np.rint(background + (strokes - background) * grey).astype(np.uint8)
        return ArraySet(data.name, x, data.y, data.index)

    return Splits(
        folds=tuple(colour(fold) for fold in splits.folds),
        calibration=colour(splits.calibration),
        held_out=colour(splits.held_out),
        other_domain=None,
        seed=splits.seed,
    )


def model_inputs(x: np.ndarray) -> np.ndarray:
    return ArraySet("x", x, np.zeros(len(x), np.int64), np.arange(len(x), dtype=np.int64)).model_inputs()


def train(splits: Splits, seed: int, setup: Setup, *, without_m1: bool = False):
    from ema.training.fit import fit

    folds = splits.folds[1:] if without_m1 else splits.folds
    x, y = np.concatenate([f.x for f in folds]), np.concatenate([f.y for f in folds])
    spec = TrainSpec(arch=setup.arch, epochs=setup.epochs, lr=setup.lr, lr_decay=setup.lr_decay, seed=seed)
    return fit(spec, model_inputs(x), y, progress=False)


def proba(model, x: np.ndarray) -> np.ndarray:
    from ema.training.fit import predict_proba

    return predict_proba(model, model_inputs(x))


def audit(model, key: MarkKey, queries: ArraySet, setup: Setup, clean: np.ndarray | None = None):
    """The marks auditor's result for ``model`` and ``key`` on ``queries`` (``clean``: its clean proba, if scored).

    As ``ema audit --method marks`` runs it (:func:`ema.workflows.mark_audit.audit_key`: a noise key's controls too).
    """
    clean = proba(model, queries.x) if clean is None else clean
    auditor = MarksAuditor(key.target_class, alpha=setup.alpha, margin=setup.margin).calibrate(clean)
    stamped = proba(model, key.stamp(queries.x))
    return audit_key(auditor, key, queries.x, queries.y, stamped, lambda x: proba(model, x).argmax(axis=1))


def accuracy(model, data: ArraySet) -> float:
    return float((proba(model, data.x).argmax(1) == data.y).mean())


def untrained_keys(splits: Splits, n: int) -> list[MarkKey]:
    """Keys made as ``ema mark`` makes them, for images nobody trained on."""
    return [mark_set(splits.folds[0], seed=UNTRAINED_KEY_BASE + i)[1] for i in range(n)]


def share(values: list[bool]) -> str:
    return f"{np.mean(values):.3f} ({sum(values)}/{len(values)})"


def measure(args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    """The rows (measure, goal, measured, met) of the Done-when table."""
    splits = make_splits(0) if not args.colour else colour_splits(make_splits(0), args.colour)
    queries = splits.held_out.take(np.arange(args.queries))
    setup = Setup(splits, queries, args.alpha, args.margin, args.epochs, args.arch, lr_decay=args.lr_decay, lr=args.lr)
    rows, marked_models = [], []
    detected, accuracies, wrong = [], [], []
    wrong_keys = untrained_keys(splits, 4)
    for i in range(args.keys):
        m1, key = mark_set(splits.folds[0], rate=0.1, seed=i)
        started = time.perf_counter()
        model = train(splits.with_fold("M1", m1), i, setup)
        clean = proba(model, setup.queries.x)
        result = audit(model, key, setup.queries, setup, clean)
        detected.append(result.metrics["p_mark"] <= 1e-6)
        accuracies.append(accuracy(model, splits.held_out))
        wrong += [audit(model, other, setup.queries, setup, clean).verdict == "memorized" for other in wrong_keys]
        marked_models.append((model, key, m1))
        print(f"key {i}: p_mark {result.metrics['p_mark']:.3g}, {time.perf_counter() - started:.0f} s", flush=True)
    rows.append(("mark detected (p <= 1e-6), 200 queries", ">= 0.99 of 50 keys", share(detected)))
    keys = untrained_keys(splits, args.clean_keys)
    unmarked = [train(splits, seed, setup) for seed in range(args.unmarked)]
    retrained = train(splits, 0, setup, without_m1=True)
    for name, model in (("clean target", unmarked[0]), ("retrain without M1", retrained)):
        clean = proba(model, setup.queries.x)
        verdicts = [audit(model, key, setup.queries, setup, clean).verdict for key in keys]
        rows.append(
            (
                f"false memorized, {name}, {len(keys)} keys",
                f"<= alpha ({args.alpha})",
                share([v == "memorized" for v in verdicts]),
            )
        )
        if name.startswith("retrain"):
            certified = [v == "not_memorized" for v in verdicts]
            rows.append((f"retrain: not_memorized at margin {args.margin}, 200 queries", ">= 0.90", share(certified)))
    rows.append(("a wrong key on the marked models", f"memorized <= alpha ({args.alpha})", share(wrong)))
    if args.unlearned:
        rows += unlearning_rows(marked_models[: args.unlearned], setup)
    clean_accuracies = [accuracy(model, splits.held_out) for model in unmarked]
    drops = [100 * (clean - accuracies[seed]) for seed, clean in enumerate(clean_accuracies)]
    rows.append(
        (
            f"clean held-out accuracy drop, marked vs unmarked ({len(drops)} seeds, points)",
            "<= 0.5",
            f"{np.mean(drops):.2f} (per seed {', '.join(f'{d:.2f}' for d in drops)}; all {len(accuracies)} marked "
            f"models {100 * np.mean(accuracies):.1f}%, lowest {100 * min(accuracies):.1f}%; unmarked "
            f"{100 * np.mean(clean_accuracies):.1f}%, lowest {100 * min(clean_accuracies):.1f}%)",
        )
    )
    return rows


def unlearning_rows(marked_models: list, setup: Setup) -> list[tuple[str, str, str]]:
    """For each approximate method: the share of unlearned models still memorized at each query size."""
    from ema.training.unlearn_spec import UnlearnSpec
    from ema.training.unlearning import unlearn_model

    splits = setup.splits
    retain_x = np.concatenate([f.x for f in splits.folds[1:]])
    retain = (model_inputs(retain_x), np.concatenate([f.y for f in splits.folds[1:]]))
    rows = []
    for method in APPROXIMATE_METHODS:
        spec = UnlearnSpec(method=method).resolved()
        carried = {size: [] for size in QUERY_SIZES}
        for model, key, m1 in marked_models:
            unlearned = unlearn_model(model, spec, retain, (model_inputs(m1.x), m1.y), progress=False)
            for size in QUERY_SIZES:
                queries = splits.held_out.take(np.arange(size))
                carried[size].append(audit(unlearned, key, queries, setup).verdict == "memorized")
        described = "; ".join(f"{size}: {sum(v)}/{len(v)}" for size, v in carried.items())
        rows.append((f"after {method}: still memorized, by query size", "reported", described))
    return rows


def write_table(rows: list[tuple[str, str, str]], args: argparse.Namespace, seconds: float, out: Path) -> None:
    """Replace the page's block for this variant (``marks-table``, or ``marks-table-colour-SIDE``) with the table."""
    command = (
        f"python -m benchmarks.marks --keys {args.keys} --clean-keys {args.clean_keys} --unmarked {args.unmarked} "
        f"--unlearned {args.unlearned} --queries {args.queries} --epochs {args.epochs} --threads {args.threads}"
        + (f" --arch {args.arch}" if args.arch != "mlp" else "")
        + (f" --lr-decay {args.lr_decay:g}" if args.lr_decay else "")
        + (f" --lr {args.lr:g}" if args.lr != PAPER_LR else "")
        + (f" --colour {args.colour}" if args.colour else "")
    )
    block = "marks-table" + (f"-colour-{args.colour}" if args.colour else "")
    begin, end = f"<!-- {block} -->", f"<!-- /{block} -->"
    lines = [
        begin,
        f"Measured by `{command}` ({seconds / 60:.0f} min on {args.threads} CPU thread(s), alpha {args.alpha}).",
        "",
        "| measure | goal | measured |",
        "|---|---|---|",
        *(f"| {measure} | {goal} | {value} |" for measure, goal, value in rows),
        end,
    ]
    replace_block(out, lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    set_threads(args.threads)
    started = time.perf_counter()
    rows = measure(args)
    write_table(rows, args, time.perf_counter() - started, args.out)
    for row in rows:
        print(" | ".join(row))


if __name__ == "__main__":
    main()
