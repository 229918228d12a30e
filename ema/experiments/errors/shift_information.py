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

import numpy as np

from ema.experiments.errors.reference_pools import TARGETS

#: torch threads of training and scoring (float sums differ with the thread count).
THREADS = 1
#: The query size of the issue's goals, at which the margins are printed.
GOAL_SIZE = 200
COMMAND = "python -m ema.experiments.errors.shift_information"


def measure(name: str, seeds: tuple[int, ...]) -> dict[str, float]:
    """Train target ``name``; the information with one view and with the shifts (mean over ``seeds`` of the
    cross-fitting folds), and the certifiable margins at :data:`GOAL_SIZE`."""
    from ema.auditors.reference import ReferenceAuditor
    from ema.data.presets import load_splits
    from ema.data.shifts import N_SHIFT_VIEWS, shift_views
    from ema.inputs import to_model_inputs
    from ema.training.fit import fit, predict_proba
    from ema.training.threads import use_threads
    from ema.workflows.references import without_query

    use_threads(THREADS)
    data, spec, _ = TARGETS[name]
    splits = load_splits(data, 0)
    model = fit(spec, splits.train.model_inputs(), splits.train.y, progress=False, desc=f"train {name}")
    members = without_query(splits.train, splits.query("M1"))
    nonmembers = splits.reference if splits.reference is not None else splits.calibration

    def views(part) -> np.ndarray:
        shifted = shift_views(part.x).reshape(-1, *part.x.shape[1:])
        return predict_proba(model, to_model_inputs(shifted)).reshape(N_SHIFT_VIEWS, len(part), -1)

    member_views, nonmember_views = views(members), views(nonmembers)
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
        "members": len(members),
        "nonmembers": len(nonmembers),
        "single": single,
        "shifts": shifted,
        "margin_single": margin_single,
        "margin_shifts": margin_shifted,
    }


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
