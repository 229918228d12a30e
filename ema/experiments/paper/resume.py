"""Resuming a grid: the finished cells of earlier runs of the same configuration.

Each grid's parent run carries the tag :data:`ema.tracking.keys.TAG_GRID_CONFIG`, a hash of everything that
decides a cell's numbers apart from the cell itself (target model version, data, seeds,
alpha, calibration corruption). A cell's audit run is a FINISHED child of such a parent,
identified by its params ``k``, ``query``, ``method`` and its metric ``n_query``. Cells
that a later run finds are reused, not audited again; an interrupted grid thus resumes
where it stopped, and grids that share cells (``ks-vs-t`` and the whole-set cells of
``query-size``) share them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ema.tracking import keys
from ema.tracking.search import RunRecord, finished_children, runs_tagged

#: Metrics a cell reports (absent ones are NaN).
CELL_METRICS = (keys.METRIC_RHO_EMA, keys.METRIC_RHO_EMA_KS, keys.METRIC_RHO_KS, keys.METRIC_FLAG_RATE)


@dataclass(frozen=True)
class CellKey:
    """What identifies an audit within one configuration."""

    k: int
    query: str
    method: str
    n_query: int


@dataclass(frozen=True)
class CellResult:
    """A cell's numbers and the run that produced them."""

    run_id: str
    metrics: dict[str, float]
    verdict: str


def key_of_run(run: RunRecord) -> CellKey | None:
    """The cell an audit run answers, or None for other runs (training, calibration)."""
    params, metrics = run.params, run.metrics
    if not {keys.PARAM_K, keys.PARAM_QUERY, keys.PARAM_METHOD} <= set(params) or keys.METRIC_N_QUERY not in metrics:
        return None
    return CellKey(
        int(params[keys.PARAM_K]),
        params[keys.PARAM_QUERY],
        params[keys.PARAM_METHOD],
        int(metrics[keys.METRIC_N_QUERY]),
    )


def result_of_run(run: RunRecord) -> CellResult:
    metrics = {name: float(run.metrics.get(name, float("nan"))) for name in CELL_METRICS}
    return CellResult(run.run_id, metrics, run.tags.get(keys.TAG_VERDICT, ""))


def finished_cells(config: str, experiment_id: str, *, exclude_parent: str | None = None) -> dict[CellKey, CellResult]:
    """Every finished cell under earlier parents tagged with ``config``; the newest wins a tie."""
    found: dict[CellKey, CellResult] = {}
    for parent in runs_tagged(experiment_id, keys.TAG_GRID_CONFIG, config):
        if parent.run_id == exclude_parent:
            continue
        for child in finished_children(experiment_id, parent.run_id):
            key = key_of_run(child)
            if key is not None:
                found[key] = result_of_run(child)
    return found
