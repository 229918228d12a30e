"""``python -m benchmarks.paced_scoring --model URI --data FILE``: in-process scoring with paced batches against
fixed batches of 4,096, interleaved in one process (the machine is shared: only the two compared in one run count).

Paced batches (:mod:`ema.oracle.batching`) take about half a second each, so that ``--timeout`` holds for a slow
model; this says what they cost a fast one. Each repeat scores the whole set through fixed batches, through a fresh
pace (as a command's first set: its first batch holds 8 samples, the next ones grow to the model's pace), and
through the pace the fresh one ended at (as an audit's later sets, which share it), and checks that all give the
same outputs bit for bit. ``--data mnist-embedded`` scores the embedded 10,000 MNIST
images; a file is any set ``ema audit --query-file`` reads (labels in ``--label-column``); ``--samples N`` repeats
the set to N samples (a fast model scores 10,000 in a few hundredths of a second).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

import numpy as np

from ema.data.arrays import ArraySet
from ema.oracle import PyfuncOracle
from ema.oracle.batching import BatchPace


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.paced_scoring", description=__doc__)
    parser.add_argument("--model", required=True, help="The pyfunc model's URI (models:/NAME/VERSION).")
    parser.add_argument("--data", required=True, help="A set file, or mnist-embedded.")
    parser.add_argument("--label-column", default="label", help="A table file's label column (default: label).")
    parser.add_argument("--repeats", type=int, default=5, help="Interleaved repeats of each (default: 5).")
    parser.add_argument("--samples", type=int, help="Score this many samples, the set repeated (default: the set).")
    return parser.parse_args(argv)


def load(data: str, label_column: str) -> ArraySet:
    if data == "mnist-embedded":
        from ema.data.embedded import load_mnist_embedded

        return load_mnist_embedded()
    from ema.data.files import read_set

    return read_set(data, role="benchmark set", label_column=label_column)


FIXED, FRESH, KNOWN = "fixed 4096", "paced, fresh pace", "paced, pace known"


class Counted(PyfuncOracle):
    """A pyfunc oracle that keeps the size of every batch it scores."""

    def _score(self, images: np.ndarray) -> np.ndarray:
        self.sizes.append(len(images))
        return super()._score(images)


def score(oracle: Counted, data: ArraySet, *, fresh: bool = True) -> tuple[float, np.ndarray, list[int]]:
    """Seconds to score ``data`` (through a fresh pace, or the oracle's own), the probabilities, and the batch sizes."""
    if fresh:
        oracle._pace = BatchPace()
    oracle.sizes = []
    started = time.perf_counter()
    proba = oracle.predict_proba(data)
    return time.perf_counter() - started, proba, oracle.sizes


def runs(sizes: list[int]) -> str:
    """Batch sizes with runs of one size written once: ``8, 128, 4096 x24, 1560``."""
    groups = [(size, len(list(run))) for size, run in itertools.groupby(sizes)]
    return ", ".join(f"{size} x{count}" if count > 1 else str(size) for size, count in groups)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    data = load(args.data, args.label_column)
    if args.samples is not None:
        data = data.take(np.arange(args.samples) % len(data))
    oracle = Counted(args.model)  # one model for all three: a second copy would score from colder caches
    seconds: dict[str, list[float]] = {FIXED: [], FRESH: [], KNOWN: []}
    sizes: dict[str, list[int]] = {}
    outputs: dict[str, np.ndarray] = {}
    for repeat in range(args.repeats):
        order = [*[FIXED, FRESH][:: 1 if repeat % 2 == 0 else -1], KNOWN]  # who goes first alternates
        for name in order:
            oracle.paced = name != FIXED
            elapsed, outputs[name], sizes[name] = score(oracle, data, fresh=name != KNOWN)
            seconds[name].append(elapsed)
    same = all(np.array_equal(proba, outputs[FIXED]) for proba in outputs.values())
    print(f"{args.model} on {args.data} ({len(data):,} samples), {args.repeats} interleaved repeats")
    baseline = statistics.median(seconds[FIXED])
    for name, times in seconds.items():
        median = statistics.median(times)
        print(
            f"  {name}: {len(data) / median:,.0f} samples/s ({baseline / median:.2f}x fixed; median {median:.3f} s, "
            f"{min(times):.3f}-{max(times):.3f} s); batches {runs(sizes[name])}"
        )
    print(f"  outputs bitwise equal: {same}")


if __name__ == "__main__":
    main()
