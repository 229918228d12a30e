"""``python -m benchmarks.mark_cost``: what a mark costs the trainer's model in clean accuracy, to a stated precision.

For each training seed i, one model trained on the five folds as they are, and for each variant one trained with
M1 replaced by the variant's copy (made with key seed i, which marks 10% of M1), all else equal. The cost is the
paired drop in accuracy on the held-out set M6 (2,000 images): its mean over the pairs, a 90% t interval, every
pair's drop and the worst.
A seed's models move by several points from one another whatever the data (SGD's own spread), so a half-point cost
needs many pairs; :mod:`benchmarks.marks` trains a few unmarked models beside its keys, this trains only pairs.

Variants: ``decoys``, the copy as ``ema mark`` writes it; ``plain``, a noise key's copy without its decoys
(:data:`ema.data.marks.NOISE_DECOYS`), to say what the decoys change; ``withheld``, M1 without the images the key
relabels and nothing stamped: what losing their true labels costs, the part of a mark's cost that is not the
learning of the trigger. Models train in ``--workers`` processes of one thread each; the table goes into
docs/MARKS.md.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from scipy import stats

from benchmarks import marks as bench
from benchmarks._common import replace_block, set_threads
from ema.data import make_splits
from ema.data.arrays import ArraySet
from ema.data.marks import mark_set
from ema.data.splits import Splits

#: The variant that marks nothing: M1 without the rows a key would relabel.
WITHHELD = "withheld"
VARIANTS = ("decoys", "plain", WITHHELD)
#: The unmarked model of a pair.
UNMARKED = "unmarked"
GOAL_POINTS = 0.5
LEVEL = 0.9


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mark_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--pairs", type=int, default=16, help="Training seeds (an unmarked model and its marked ones each)."
    )
    parser.add_argument(
        "--variants",
        help=f"Copies of M1 to train, among {', '.join(VARIANTS)} (default: decoys and plain for --colour, decoys "
        "for grey, whose keys have none).",
    )
    parser.add_argument("--colour", type=int, default=0, metavar="SIDE", help="Colour images of SIDE x SIDE (0: grey).")
    parser.add_argument("--arch", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument(
        "--lr-decay", type=float, default=0.0, help="Inverse-time learning-rate decay per step (default 0)."
    )
    parser.add_argument(
        "--lr", type=float, default=bench.PAPER_LR, help=f"SGD learning rate (default {bench.PAPER_LR:g})."
    )
    parser.add_argument("--workers", type=int, default=1, help="Processes training at once, one thread each.")
    parser.add_argument("--out", type=Path, default=bench.DOC, help="The page whose cost block is replaced.")
    args = parser.parse_args(argv)
    default = VARIANTS[:2] if args.colour else VARIANTS[:1]
    args.variants = default if args.variants is None else tuple(v for v in args.variants.split(",") if v)
    if set(args.variants) - set(VARIANTS) or not args.variants:
        parser.error(f"expected --variants among {', '.join(VARIANTS)}, got {args.variants!r}")
    bench.check_rates(parser, args)
    if args.pairs < 2:
        parser.error(f"expected --pairs of at least 2 (an interval needs two drops), got {args.pairs}")
    return args


@lru_cache(maxsize=2)
def splits_for(colour: int) -> Splits:
    """The demo splits (seed 0), as colour images of ``colour`` x ``colour`` when ``colour`` is not 0."""
    return make_splits(0) if not colour else bench.colour_splits(make_splits(0), colour)


def fold_copy(fold: ArraySet, seed: int, variant: str) -> ArraySet:
    """M1 as ``variant`` has it: marked by key ``seed`` with or without decoys, or less the rows that key relabels."""
    marked, _ = mark_set(fold, rate=0.1, seed=seed, decoys=variant == "decoys")
    if variant != WITHHELD:
        return marked
    return fold.take(np.flatnonzero(marked.y == fold.y))


def held_out_accuracy(task: tuple[argparse.Namespace, int, str]) -> tuple[int, str, float, float]:
    """(seed, variant, accuracy on M6, seconds) of one model: unmarked, or with M1 as :func:`fold_copy` makes it."""
    args, seed, variant = task
    started = time.perf_counter()
    splits = splits_for(args.colour)
    if variant != UNMARKED:
        splits = splits.with_fold("M1", fold_copy(splits.folds[0], seed, variant))
    setup = bench.Setup(
        splits, splits.held_out, bench.ALPHA, bench.MARGIN, args.epochs, args.arch, lr_decay=args.lr_decay, lr=args.lr
    )
    model = bench.train(splits, seed, setup)
    return seed, variant, bench.accuracy(model, splits.held_out), time.perf_counter() - started


def train_all(args: argparse.Namespace) -> dict[str, np.ndarray]:
    """Held-out accuracy by variant (``unmarked`` too), one entry per training seed."""
    tasks = [(args, seed, variant) for seed in range(args.pairs) for variant in (UNMARKED, *args.variants)]
    found: dict[str, np.ndarray] = {v: np.full(args.pairs, np.nan) for v in (UNMARKED, *args.variants)}
    context = get_context("spawn")
    with ProcessPoolExecutor(args.workers, mp_context=context, initializer=set_threads, initargs=(1,)) as pool:
        for done, (seed, variant, accuracy, seconds) in enumerate(pool.map(held_out_accuracy, tasks), 1):
            found[variant][seed] = accuracy
            print(f"[{done}/{len(tasks)}] seed {seed} {variant}: {100 * accuracy:.2f}% ({seconds:.0f} s)", flush=True)
    return found


def summary_rows(accuracies: dict[str, np.ndarray], variants: tuple[str, ...]) -> list[tuple[str, ...]]:
    """One row per variant: the mean paired drop (points), its interval, the pairs' drops, the worst, the goal."""
    unmarked = accuracies[UNMARKED]
    rows = []
    for variant in variants:
        drops = 100 * (unmarked - accuracies[variant])
        low, high = stats.ttest_1samp(drops, 0.0).confidence_interval(LEVEL)
        mean = float(drops.mean())
        rows.append(
            (
                variant,
                f"{mean:.2f}",
                f"{low:.2f} to {high:.2f}",
                ", ".join(f"{d:.2f}" for d in drops),
                f"{drops.max():.2f}",
                f"{100 * accuracies[variant].mean():.1f}% / {100 * unmarked.mean():.1f}%",
                "(not a mark)" if variant == WITHHELD else "met" if mean <= GOAL_POINTS else "NOT met",
            )
        )
    return rows


def write_table(rows: list[tuple[str, ...]], args: argparse.Namespace, seconds: float) -> None:
    """Replace the page's ``mark-cost`` block (``mark-cost-colour-SIDE`` for colour) with the table."""
    command = (
        f"python -m benchmarks.mark_cost --pairs {args.pairs} --variants {','.join(args.variants)} "
        f"--arch {args.arch} --epochs {args.epochs} --workers {args.workers}"
        + (f" --lr-decay {args.lr_decay:g}" if args.lr_decay else "")
        + (f" --lr {args.lr:g}" if args.lr != bench.PAPER_LR else "")
        + (f" --colour {args.colour}" if args.colour else "")
    )
    block = "mark-cost" + (f"-colour-{args.colour}" if args.colour else "")
    replace_block(
        args.out,
        [
            f"<!-- {block} -->",
            f"Measured by `{command}` ({seconds / 60:.0f} min, {args.workers} process(es) of one CPU thread).",
            "",
            f"| variant | mean drop, points (goal <= {GOAL_POINTS}) | {LEVEL:.0%} interval | per training seed "
            "| worst | accuracy with the copy / unmarked | goal |",
            "|---|---|---|---|---|---|---|",
            *(f"| {' | '.join(row)} |" for row in rows),
            f"<!-- /{block} -->",
        ],
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    rows = summary_rows(train_all(args), args.variants)
    write_table(rows, args, time.perf_counter() - started)
    for row in rows:
        print(" | ".join(row))


if __name__ == "__main__":
    main()
