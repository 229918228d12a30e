"""``end_to_end``: the demo's and the benchmark grid's wall time against the compute they cannot avoid.

Each workflow runs in a fresh temporary store (so every cache misses, as on a first run;
the store's creation is not timed) and is compared with its pure training and scoring
compute, timed in the same run on the same data with the same recipe:

- the demo (:func:`ema.workflows.demo.run_demo`): ``fit`` of the target (5,000 images) and
  of the calibration model (its 500-image half); ``predict_proba`` of the target on its
  training and held-out data (accuracies) and on the seven query sets, and of the
  calibration model on both calibration halves;
- the benchmark grid (``ema grid benchmark``, Table 2: 6 k x 7 query sets, EMA and the KS
  ratio in every cell): ``fit`` of the target, of one calibration model per k, of one
  KS-ratio query model per query set and one calibration-set model per k;
  ``predict_proba`` of everything the grid scores: the target's accuracies, the
  calibration halves per k, each cell's query set through the target, its query model and
  the calibration-set model, and the sets of Fig. 2 and Fig. 3.

The ratio says how much the workflow (MLflow logging, model packaging and registration,
registry lookups, artifacts, figures) adds to that compute.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks._common import Config, progress, row, spread, temporary_store, timed

NAME = "end_to_end"
#: Epochs of the recipe (full run: the paper's 50, --quick).
EPOCHS = (50, 10)
RATIO_GOAL = 2.0
#: Profile a workflow when its wall time exceeds its compute by more than this factor.
PROFILE_ABOVE = 1.25


@dataclass
class Workload:
    """A workflow to run in a fresh store, and the parts of its unavoidable compute (label -> function)."""

    name: str
    case: str
    workflow: Callable[[], int]
    parts: dict[str, Callable[[], object]]
    outcome_label: str

    def in_fresh_store(self, call: Callable[[Callable[[], int]], object]) -> object:
        """``call(self.workflow)`` in a new temporary store, whose creation ``call`` does not see."""
        with temporary_store(f"ema-bench-{self.name}-") as _:
            return call(self.workflow)


def _scorer(models: dict, jobs: list[tuple[str, object]]) -> Callable[[], None]:
    """Score each (model name, set) pair with the model trained under that name."""
    from ema.training.fit import predict_proba

    def score() -> None:
        for model_name, data in jobs:
            predict_proba(models[model_name], data.model_inputs())

    return score


def demo_workload(spec) -> Workload:
    """The demo: train, calibrate, audit the seven query sets."""
    from ema.data.corruption import noise_and_rotation
    from ema.data.splits import QUERY_NAMES, make_splits
    from ema.training.fit import fit
    from ema.workflows.calibrate import calibration_halves
    from ema.workflows.demo import run_demo

    splits = make_splits(0)
    members, nonmembers = calibration_halves(noise_and_rotation(splits.calibration, 100, 0), 0)
    models: dict = {}
    jobs = [("target", s) for s in (splits.train, splits.held_out, *(splits.query(q) for q in QUERY_NAMES))]
    jobs += [("calibration", members), ("calibration", nonmembers)]

    def workflow() -> int:
        table = run_demo(spec, progress=False)
        return int((table["verdict"] == table["expected"]).sum())

    parts = {
        f"fit target ({len(splits.train):,} images)": lambda: models.update(
            target=fit(spec, splits.train.model_inputs(), splits.train.y, progress=False)
        ),
        f"fit calibration model ({len(members):,} images)": lambda: models.update(
            calibration=fit(spec, members.model_inputs(), members.y, progress=False)
        ),
        f"predict_proba on everything the demo scores ({sum(len(s) for _, s in jobs):,} images)": _scorer(models, jobs),
    }
    return Workload("demo", f"demo, MLP {spec.epochs} epochs, 7 audits", workflow, parts, "correct verdicts of 7")


def grid_workload(spec) -> Workload:
    """``ema grid benchmark``: one target, 42 cells of EMA and the KS ratio, tables and figures."""
    from ema.data.corruption import apply_corruption
    from ema.data.splits import QUERY_NAMES, make_splits
    from ema.experiments.grid_config import GridConfig
    from ema.experiments.grids import get_grid
    from ema.experiments.runner import _panel_ks, run_grid
    from ema.training.fit import fit
    from ema.workflows.calibrate import calibration_halves

    grid = get_grid("benchmark")
    splits = make_splits(0)
    corrupted = {k: apply_corruption(grid.corruption, splits.calibration, k, 0) for k in grid.ks}
    halves = {k: calibration_halves(corrupted[k], 0) for k in grid.ks}
    queries = {q: splits.query(q) for q in QUERY_NAMES}
    models: dict = {}

    def fit_all(named: dict) -> Callable[[], None]:
        def run() -> None:
            for model_name, data in named.items():
                models[model_name] = fit(spec, data.model_inputs(), data.y, progress=False)

        return run

    jobs = [("target", splits.train), ("target", splits.held_out)]
    jobs += [(f"cal{k}", half) for k in grid.ks for half in halves[k]]
    jobs += [
        (name, queries[q]) for k in grid.ks for q in QUERY_NAMES for name in ("target", f"query-{q}", f"calset{k}")
    ]
    jobs += [("target", queries[q]) for q in ("M1", "M6", "S")]  # Fig. 2
    jobs += [("target", queries["M1"]), ("query-M1", queries["M1"])]  # Fig. 3
    jobs += [(f"calset{k}", queries["M1"]) for k in _panel_ks(tuple(grid.ks))]
    n_models = 1 + 2 * len(grid.ks) + len(queries)

    def workflow() -> int:
        return run_grid(GridConfig(name="benchmark", epochs=spec.epochs), progress=False).n_audited

    parts = {
        f"fit target ({len(splits.train):,} images)": fit_all({"target": splits.train}),
        f"fit {len(grid.ks)} calibration models (500 images each)": fit_all({f"cal{k}": halves[k][0] for k in grid.ks}),
        f"fit {len(queries)} KS-ratio query models (one per query set)": fit_all(
            {f"query-{q}": d for q, d in queries.items()}
        ),
        f"fit {len(grid.ks)} KS-ratio calibration-set models (1,000 images each)": fit_all(
            {f"calset{k}": corrupted[k] for k in grid.ks}
        ),
        f"predict_proba on everything the grid scores ({sum(len(s) for _, s in jobs):,} images)": _scorer(models, jobs),
    }
    return Workload(
        "grid",
        f"ema grid benchmark, MLP {spec.epochs} epochs, 42 cells, {n_models} models",
        workflow,
        parts,
        "cells audited",
    )


def measure_workload(workload: Workload, repeats: int, profile: bool) -> dict:
    """Median wall time of the workflow and of its compute, alternating which runs first; a profile when slow."""
    times: dict[str, list[float]] = {"wall": [], "compute": [], **{label: [] for label in workload.parts}}
    outcomes = []

    def time_workflow() -> None:
        seconds, outcome = workload.in_fresh_store(timed)
        times["wall"].append(seconds)
        outcomes.append(outcome)

    def time_compute() -> None:
        parts = {label: timed(fn)[0] for label, fn in workload.parts.items()}
        for label, seconds in parts.items():
            times[label].append(seconds)
        times["compute"].append(sum(parts.values()))

    for i in range(repeats):
        progress(f"end_to_end: {workload.name} repeat {i + 1}/{repeats}: workflow in a fresh store, and its compute")
        # Alternate which goes first, so that a slow phase of the machine does not always hit the same one.
        for step in (time_workflow, time_compute) if i % 2 == 0 else (time_compute, time_workflow):
            step()
        progress(f"end_to_end: {workload.name} {times['wall'][-1]:.1f} s, compute {times['compute'][-1]:.1f} s")
    wall, compute = statistics.median(times["wall"]), statistics.median(times["compute"])
    ratio = wall / compute
    breakdown = [
        "| part | median seconds | share of wall time |",
        "|---|---:|---:|",
        f"| {workload.name} wall time | {wall:.2f} | 100% |",
        *(
            f"| {label} | {statistics.median(times[label]):.2f} | {statistics.median(times[label]) / wall:.0%} |"
            for label in workload.parts
        ),
        f"| overhead: wall - compute | {wall - compute:.2f} | {(wall - compute) / wall:.0%} |",
    ]
    details = f"**{workload.case}**: breakdown (medians over the repeats):\n\n" + "\n".join(breakdown)
    if profile and ratio > PROFILE_ABOVE:
        from benchmarks._profile import profile_call

        progress(f"end_to_end: profiling one {workload.name} run (overhead is large)")
        summary, _ = workload.in_fresh_store(lambda workflow: profile_call(f"end_to_end_{workload.name}", workflow))
        details += f"\n\nWhere the {workload.name}'s time goes. " + summary
    elif profile:
        details += f"\n\nNot profiled: the {workload.name} is within {PROFILE_ABOVE}x of its compute."
    return row(
        NAME,
        workload.case,
        ours=wall,
        baseline=compute,
        unit="s",
        baseline_label="its training + scoring compute (same run)",
        ratio=ratio,
        ratio_label="wall / compute (1.0 = no overhead)",
        goal=f"<= {RATIO_GOAL:g}x",
        met=ratio <= RATIO_GOAL,
        repeats=repeats,
        note=(
            f"wall {spread(times['wall'])}, compute {spread(times['compute'])}; {workload.outcome_label} per run "
            f"{outcomes}; store creation not timed"
        ),
        details=details,
    )


def measure(config: Config, *, epochs: int | None = None, repeats: int = 3, profile: bool = True) -> list[dict]:
    """The demo and the benchmark grid against their compute, with profiles of the rest.

    Three repeats even with --quick (which shortens the recipe instead): on a shared
    machine a single workflow-vs-compute pair can be off by several times either way.
    """
    from ema.training.spec import TrainSpec

    spec = TrainSpec(epochs=epochs or (EPOCHS[1] if config.quick else EPOCHS[0]))
    return [measure_workload(make(spec), repeats, profile) for make in (demo_workload, grid_workload)]
