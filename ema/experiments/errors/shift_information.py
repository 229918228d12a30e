"""What ``--augment shifts`` buys: ``python -m ema.experiments.errors.shift_information``.

Part of the ``errors`` study. For each validity target (:data:`ema.experiments.errors.reference_pools.TARGETS`:
the overfit and the generalising MLP on the embedded MNIST, the paper's recipe on Fashion-MNIST), it
trains the target with the workbench's recipe code, scores the calibrated auditor's two references
(members: folds M2..M5; non-members: the preset's non-member reference, as ``ema audit --method
calibrated`` takes them) on the identity and the 8 one-pixel shifts of every image, and prints the
cross-fitted information per sample about the retained share
(:func:`ema.stats.information.cross_fitted_information`, through the auditor itself) with one view and with
nine, and the certifiable margins they give at 200 query samples.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ema.data.arrays import ArraySet
from ema.experiments.errors.reference_pools import TARGETS

#: torch threads of training and scoring (float sums differ with the thread count).
THREADS = 1
#: The query size of the issue's goals, at which the margins are printed.
GOAL_SIZE = 200
COMMAND = "python -m ema.experiments.errors.shift_information"


@dataclass(frozen=True)
class TrainedTarget:
    """A validity target trained as the study trains it, and the calibrated auditor's two references."""

    predict: Callable[[np.ndarray], np.ndarray]
    members: ArraySet
    nonmembers: ArraySet

    def scored_views(self, views: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The target's probabilities on every view of ``views`` (images -> (n_views, n, ...), the identity first)
        of the members' and the non-members' images, (n_views, n, n_classes) each."""

        def scored(part: ArraySet) -> np.ndarray:
            viewed = views(part.x)
            return self.predict(viewed.reshape(-1, *part.x.shape[1:])).reshape(len(viewed), len(part), -1)

        return scored(self.members), scored(self.nonmembers)


def train_with_references(name: str) -> TrainedTarget:
    """Train target ``name`` on its preset's splits (seed 0); its references as ``ema audit --method calibrated``
    takes them for fold M1: members M2..M5, non-members the preset's non-member reference."""
    from ema.data.presets import load_splits
    from ema.inputs import to_model_inputs
    from ema.training.fit import fit, predict_proba
    from ema.training.threads import use_threads
    from ema.workflows.references import without_query

    use_threads(THREADS)
    data, spec, _ = TARGETS[name]
    splits = load_splits(data, 0)
    model = fit(spec, splits.train.model_inputs(), splits.train.y, progress=False, desc=f"train {name}")
    nonmembers = splits.reference if splits.reference is not None else splits.calibration
    return TrainedTarget(
        lambda images: predict_proba(model, to_model_inputs(images)),
        without_query(splits.train, splits.query("M1")),
        nonmembers,
    )


def view_information(
    target: TrainedTarget, member_views: np.ndarray, nonmember_views: np.ndarray, seeds: tuple[int, ...]
) -> dict[str, float]:
    """The information with the identity alone and with every view (:meth:`TrainedTarget.scored_views`) as the
    auditor scores them, mean over ``seeds`` of the cross-fitting folds, and the certifiable margins at
    :data:`GOAL_SIZE`."""
    from ema.auditors.reference import ReferenceAuditor

    members, nonmembers = target.members, target.nonmembers
    rows = []
    for seed in seeds:  # a few cross-fitting seeds
        auditor = ReferenceAuditor(random_state=seed).calibrate(member_views, members.y, nonmember_views, nonmembers.y)
        rows.append(
            (
                auditor.information_single_view_,
                auditor.information_,
                auditor.certifiable_margin(GOAL_SIZE, single_view=True),
                auditor.certifiable_margin(GOAL_SIZE),
            )
        )
    single, shifted, margin_single, margin_shifted = np.mean(rows, axis=0)
    return {
        "views": len(member_views),
        "members": len(members),
        "nonmembers": len(nonmembers),
        "single": single,
        "shifts": shifted,
        "margin_single": margin_single,
        "margin_shifts": margin_shifted,
    }


def measure(name: str, seeds: tuple[int, ...]) -> dict[str, float]:
    """Train target ``name``; the information with one view and with the shifts (mean over ``seeds`` of the
    cross-fitting folds), and the certifiable margins at :data:`GOAL_SIZE`."""
    from ema.data.shifts import shift_views

    target = train_with_references(name)
    return view_information(target, *target.scored_views(shift_views), seeds)


def main(argv: list[str] | None = None) -> None:
    """Print the information with and without shifts on every target as a Markdown table."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", choices=tuple(TARGETS), default=tuple(TARGETS))
    parser.add_argument("--seeds", type=int, default=5, help="Cross-fitting seeds averaged (default 5).")
    args = parser.parse_args(argv)
    print(
        f"| target | references (members / non-members) | information, 1 view | 9 views | ratio | "
        f"certifiable margin at {GOAL_SIZE}, 1 view | 9 views |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in args.targets:  # three targets
        started = time.perf_counter()
        row = measure(name, tuple(range(args.seeds)))
        ratio = row["shifts"] / row["single"] if row["single"] > 0 else float("inf")
        print(
            f"| {name} | {row['members']:,} / {row['nonmembers']:,} | {row['single']:.3f} | {row['shifts']:.3f} | "
            f"{ratio:.2f}x | {row['margin_single']:.2f} | {row['margin_shifts']:.2f} |  "
            f"<!-- {time.perf_counter() - started:.0f} s -->",
            flush=True,
        )


if __name__ == "__main__":
    main()
