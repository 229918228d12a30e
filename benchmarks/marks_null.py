"""``python -m benchmarks.marks_null``: what a trigger does to a colour model that never saw the mark.

The marks auditor certifies a removal when the trigger's effect, the share of eligible query
images it moves to the key's class T, is bounded below ``--margin``. On a model that never saw
the mark that share is not zero: the trigger is a change of the image, and some classes attract
it. This benchmark measures, on the colour stand-in of benchmarks/marks.py (``--colour 32``: each
digit resized and coloured, the small CNN, 10 epochs), the retrain without M1 (seed 0) and a
second clean model (M1 kept, seed 1), and for each trigger variant and many untrained keys:

- the share of keys whose trigger moves at least 4 eligible images of the first 200 queries to T
  (where the one-sided 95% Clopper-Pearson bound passes 0.05);
- the share certified at ``--margin`` (the auditor's verdict);

and, beside the replace rule's patch (colour keys before noise keys), two ways around it that the
auditor could take: keeping only images whose clean prediction is confident, and subtracting the
second clean model's rate. Then the noise rule that ``ema mark`` draws for colour images now,
audited as ``ema audit`` runs it (with its control triggers), on both clean models. With
``--learn N``, each global-noise variant (``--noise``, default +-8 and +-12 levels) is also trained
into N marked models (10% of M1) to see whether it is learned at all. Written into
docs/MARKS.md's ``marks-null`` block.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from benchmarks import marks as bench
from benchmarks._common import replace_block, set_threads
from ema.auditors.marks import MarksAuditor, clopper_pearson_upper
from ema.data import make_splits, marks
from ema.data.arrays import ArraySet
from ema.data.marks import BLEND_RULE, REPLACE_RULE, MarkKey, draw_trigger

#: Moves to T among ~177 eligible images at which the one-sided 95% bound passes 0.05.
MOVES_PAST_MARGIN = 4
CONFIDENT = 0.99
#: Amplitudes of the global-noise triggers measured by default (``--noise``).
NOISE_LEVELS = (8, 12)


@dataclass(frozen=True)
class Variant:
    """A trigger: its name and, per key seed, the target class and a function stamping uint8 images."""

    name: str
    make: Callable[[int, tuple[int, ...]], tuple[int, Callable[[np.ndarray], np.ndarray]]]


def patch(side: int, levels: tuple[int, int], *, band: bool) -> Callable:
    """A ``side`` x ``side`` patch replaced at ``levels``, placed as the replace (``band``: blend) rule places it."""

    def make(seed: int, shape: tuple[int, ...]):
        target, (row, col), _ = draw_trigger(seed, shape, np.arange(10), BLEND_RULE if band else REPLACE_RULE)
        pattern = np.random.default_rng(seed).integers(0, 2, size=(side, side, shape[2])).astype(bool)
        window = np.where(pattern, levels[1], levels[0]).astype(np.uint8)
        row, col = min(row, shape[0] - side), min(col, shape[1] - side)

        def stamp(x: np.ndarray) -> np.ndarray:
            out = x.copy()
            out[:, row : row + side, col : col + side] = window
            return out

        return target, stamp

    return make


def noise(levels: int) -> Callable:
    """A global +-``levels`` pattern of random signs over the whole image."""

    def make(seed: int, shape: tuple[int, ...]):
        rng = np.random.default_rng(seed)
        target, pattern = int(rng.integers(10)), rng.choice([-levels, levels], size=shape)

        def stamp(x: np.ndarray) -> np.ndarray:
            return np.clip(x.astype(np.int16) + pattern, 0, 255).astype(np.uint8)

        return target, stamp

    return make


def replace_rule(seed: int, shape: tuple[int, ...]):
    """The trigger ``ema mark`` drew for colour images before noise keys: a 5 x 5 patch replaced at 64/192, anywhere."""
    key = MarkKey(seed, shape, *draw_trigger(seed, shape, np.arange(10), REPLACE_RULE), "", 0, REPLACE_RULE)
    return key.target_class, key.stamp


PATCHES = (
    Variant("5 x 5, 64/192, anywhere (the replace rule)", replace_rule),
    Variant("5 x 5, 64/192, in the outer band", patch(5, (64, 192), band=True)),
    Variant("5 x 5, 96/160, anywhere", patch(5, (96, 160), band=False)),
    Variant("5 x 5, 112/144, anywhere", patch(5, (112, 144), band=False)),
    Variant("3 x 3, 112/144, anywhere", patch(3, (112, 144), band=False)),
)


def moves(model, queries: ArraySet, target: int, stamp, *, confident: float = 0.0) -> tuple[int, int]:
    """Eligible images (not of class T, not predicted T, clean confidence >= ``confident``) and those moved to T."""
    clean = bench.proba(model, queries.x)
    stamped = bench.proba(model, stamp(queries.x)).argmax(1)
    eligible = (clean.argmax(1) != target) & (queries.y != target) & (clean.max(1) >= confident)
    return int(eligible.sum()), int((eligible & (stamped == target)).sum())


def null_rows(retrain, other, queries: ArraySet, args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """Per variant: keys past the margin and keys certified on the retrain; two workarounds on the replace rule."""
    rows, shape = [], queries.x.shape[1:]
    variants = PATCHES + tuple(Variant(f"global +-{levels}-level noise", noise(levels)) for levels in args.noise)
    for variant in variants:
        counts = [moves(retrain, queries, *variant.make(bench.UNTRAINED_KEY_BASE + i, shape)) for i in range(args.keys)]
        rows.append(
            (
                variant.name,
                f"{np.mean([k >= MOVES_PAST_MARGIN for _, k in counts]):.2f}",
                f"{np.mean([clopper_pearson_upper(k, n, 0.95) <= args.margin for n, k in counts]):.2f}",
            )
        )
    keys = [replace_rule(bench.UNTRAINED_KEY_BASE + i, shape) for i in range(args.keys)]
    confident = [moves(retrain, queries, *key, confident=CONFIDENT) for key in keys]
    certified = np.mean([clopper_pearson_upper(k, n, 0.95) <= args.margin for n, k in confident])
    rows.append((f"the replace rule, eligible only where the clean prediction >= {CONFIDENT}", "", f"{certified:.2f}"))
    first = np.array([moves(retrain, queries, *key) for key in keys], float)
    second = np.array([moves(other, queries, *key) for key in keys], float)
    difference = first[:, 1] / first[:, 0] - second[:, 1] / second[:, 0]
    rows.append(
        (
            "the replace rule, the second clean model's rate subtracted",
            f"correlation of moves {np.corrcoef(first[:, 1], second[:, 1])[0, 1]:.2f}",
            f"90th percentile of the difference {np.quantile(difference, 0.9):.3f}",
        )
    )
    return rows


def noise_rule_rows(models: dict, splits, setup: bench.Setup, args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """The rule ``ema mark`` draws for colour images (noise), audited as ``ema audit`` does (its controls too)."""
    keys = bench.untrained_keys(splits, args.keys)
    rows = []
    for name, model in models.items():
        clean = bench.proba(model, setup.queries.x)
        results = [bench.audit(model, key, setup.queries, setup, clean) for key in keys]
        past = np.mean([r.metrics["mark_effect"] * r.metrics["n_eligible"] >= MOVES_PAST_MARGIN for r in results])
        verdicts = [r.verdict for r in results]
        rows.append(
            (
                f"the noise rule (+-{marks.NOISE_LEVELS} levels, {keys[0].n_controls} controls) as `ema audit` runs "
                f"it, {name} (false memorized {np.mean([v == 'memorized' for v in verdicts]):.2f})",
                f"{past:.2f}",
                f"{np.mean([v == 'not_memorized' for v in verdicts]):.2f}",
            )
        )
    return rows


def learned_rows(splits, queries: ArraySet, setup: bench.Setup, args: argparse.Namespace) -> list[tuple[str, ...]]:
    """Each global-noise trigger trained into ``args.learn`` marked models (10% of M1): its p_mark on each."""
    rows = []
    for levels in args.noise:
        values = []
        for seed in range(args.learn):
            target, stamp = noise(levels)(seed, queries.x.shape[1:])
            m1 = splits.folds[0]
            marked = np.random.default_rng([seed, 1]).choice(np.flatnonzero(m1.y != target), size=100, replace=False)
            x, y = m1.x.copy(), m1.y.copy()
            x[marked], y[marked] = stamp(x[marked]), target
            model = bench.train(splits.with_fold("M1", ArraySet(m1.name, x, y, m1.index.copy())), seed, setup)
            auditor = MarksAuditor(target, margin=setup.margin).calibrate(bench.proba(model, queries.x))
            values.append(auditor.audit(bench.proba(model, stamp(queries.x)), queries.y).metrics["p_mark"])
        name = f"global +-{levels}-level noise, trained into {args.learn} marked models"
        rows.append((name, "p_mark", ", ".join(f"{p:.2g}" for p in values)))
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.marks_null", description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=100, help="Untrained keys per variant (default 100).")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--margin", type=float, default=0.05)
    parser.add_argument("--colour", type=int, default=32, metavar="SIDE")
    parser.add_argument("--learn", type=int, default=0, help="Marked models trained with each global noise.")
    parser.add_argument(
        "--noise",
        type=lambda text: tuple(int(v) for v in text.split(",")),
        default=NOISE_LEVELS,
        help="Amplitudes of the global-noise triggers, comma-separated (default 8,12).",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=bench.Path, default=bench.DOC)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    set_threads(args.threads)
    started = time.perf_counter()
    splits = bench.colour_splits(make_splits(0), args.colour)
    queries = splits.held_out.take(np.arange(args.queries))
    setup = bench.Setup(splits, queries, 0.1, args.margin, 10, "cnn")
    retrain, other = bench.train(splits, 0, setup, without_m1=True), bench.train(splits, 1, setup)
    rows = null_rows(retrain, other, queries, args)
    rows += noise_rule_rows({"retrain without M1": retrain, "second clean model": other}, splits, setup, args)
    rows += learned_rows(splits, queries, setup, args) if args.learn else []
    command = (
        f"python -m benchmarks.marks_null --keys {args.keys} --queries {args.queries} --margin {args.margin} "
        f"--colour {args.colour} --learn {args.learn} --noise {','.join(map(str, args.noise))} --threads {args.threads}"
    )
    lines = [
        "<!-- marks-null -->",
        f"Measured by `{command}` ({(time.perf_counter() - started) / 60:.0f} min; retrain without M1: "
        f"{bench.accuracy(retrain, splits.held_out):.3f} accurate on M6).",
        "",
        f"| trigger | keys moving >= {MOVES_PAST_MARGIN} eligible images to T | certified at {args.margin} |",
        "|---|---|---|",
        *(f"| {name} | {past} | {certified} |" for name, past, certified in rows),
        "<!-- /marks-null -->",
    ]
    replace_block(args.out, lines, heading="### What a trigger does to a colour model that never saw the mark")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
