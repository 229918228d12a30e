"""Resuming a grid: the finished cells of earlier runs of the same configuration.

Each grid's parent run carries the tag :data:`TAG_CONFIG`, a hash of everything that
decides a cell's numbers apart from the cell itself (target model version, data, seeds,
alpha, calibration corruption). A cell's audit run is a FINISHED child of such a parent,
identified by its params ``k``, ``query``, ``method`` and its metric ``n_query``. Cells
that a later run finds are reused, not audited again; an interrupted grid thus resumes
where it stopped, and grids that share cells (``ks-vs-t`` and the whole-set cells of
``query-size``) share them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from ema.tracking import keys

#: Parent-run tag: the hash of the grid's configuration.
TAG_CONFIG = "ema.grid.config"
#: Parent-run tag: the grid's name.
TAG_GRID = "ema.grid"
#: Child-run param: the audited query-set size.
PARAM_N_QUERY = "n_query"
#: Metrics a cell reports (absent ones are NaN).
CELL_METRICS = (keys.METRIC_RHO_EMA, keys.METRIC_RHO_EMA_KS, "rho_ks", keys.METRIC_FLAG_RATE)
_PAGE = 1000


def config_hash(config: dict) -> str:
    """A short stable hash of a JSON-ready configuration."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


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


def key_of_run(run: Run) -> CellKey | None:
    """The cell an audit run answers, or None for other runs (training, calibration)."""
    params, metrics = run.data.params, run.data.metrics
    if not {keys.PARAM_K, keys.PARAM_QUERY, keys.PARAM_METHOD} <= set(params) or keys.METRIC_N_QUERY not in metrics:
        return None
    return CellKey(
        int(params[keys.PARAM_K]),
        params[keys.PARAM_QUERY],
        params[keys.PARAM_METHOD],
        int(metrics[keys.METRIC_N_QUERY]),
    )


def result_of_run(run: Run) -> CellResult:
    metrics = {name: float(run.data.metrics.get(name, float("nan"))) for name in CELL_METRICS}
    return CellResult(run.info.run_id, metrics, run.data.tags.get(keys.TAG_VERDICT, ""))


def _search(client: MlflowClient, experiment_id: str, filter_string: str) -> list[Run]:
    runs, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id],
            filter_string=filter_string,
            max_results=_PAGE,
            page_token=token,
            order_by=["attributes.start_time ASC"],
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def finished_cells(config: str, experiment_id: str, *, exclude_parent: str | None = None) -> dict[CellKey, CellResult]:
    """Every finished cell under earlier parents tagged with ``config``; the newest wins a tie."""
    client = MlflowClient()
    parents = _search(client, experiment_id, f"tags.`{TAG_CONFIG}` = '{config}'")
    found: dict[CellKey, CellResult] = {}
    for parent in parents:
        if parent.info.run_id == exclude_parent:
            continue
        children = _search(
            client,
            experiment_id,
            f"tags.`mlflow.parentRunId` = '{parent.info.run_id}' and attributes.status = 'FINISHED'",
        )
        for child in children:
            key = key_of_run(child)
            if key is not None:
                found[key] = result_of_run(child)
    return found
