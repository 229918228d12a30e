"""One cell of a grid, audited: its query subsample, its calibration set, its child audit run and numbers.

:class:`CellAuditor` audits the cells of one grid against one target, in the parent process or
in a worker (:mod:`ema.experiments.paper.workers`); the query subsamples it writes live in its folder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ema.data.arrays import ArraySet
from ema.data.corruption import apply_corruption
from ema.data.files import write_set
from ema.data.splits import QUERY_NAMES, Splits
from ema.experiments.paper.config import GridConfig
from ema.experiments.paper.grids import Cell
from ema.experiments.paper.resume import CELL_METRICS, CellKey, CellResult
from ema.oracle import Oracle
from ema.tracking import keys
from ema.tracking.runs import log_params_of
from ema.workflows.audit import AuditConfig, audit, merged_metrics
from ema.workflows.target import Target


def subsample(data: ArraySet, size: int, *, seed: int, query: str) -> ArraySet:
    """A seeded subsample of ``size`` images, the same for every k (seeded by seed, size and query set)."""
    rng = np.random.default_rng([seed, size, QUERY_NAMES.index(query) if query in QUERY_NAMES else 0])
    return data.take(np.sort(rng.choice(len(data), size=size, replace=False)), name=query)


class CellAuditor:
    """Audits the cells of one grid against one target; query subsamples and calibrations live in ``folder``."""

    def __init__(
        self, config: GridConfig, target: Target, oracle: Oracle, splits: Splits, *, folder: Path, progress: bool
    ) -> None:
        self.config, self.grid, self.target, self.oracle, self.splits = config, config.grid, target, oracle, splits
        self.folder, self.progress = folder, progress

    def n_query(self, cell: Cell) -> int:
        n = len(self.splits.query(cell.query))
        return n if cell.size is None else min(cell.size, n)

    def key(self, cell: Cell) -> CellKey:
        return CellKey(cell.k, cell.query, cell.method, self.n_query(cell))

    def query_file(self, cell: Cell) -> str | None:
        """None for a whole query set (audited by name); else the subsample's file, named after its query set."""
        if cell.size is None or cell.size >= len(self.splits.query(cell.query)):
            return None
        path = self.folder / f"n{cell.size}" / cell.query  # no suffix: the audit names the run's query after the file
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_set(
                subsample(self.splits.query(cell.query), cell.size, seed=self.config.sample_seed, query=cell.query),
                path,
            )
        return str(path)

    def calibration_set(self, k: int) -> ArraySet:
        """The calibration set at quality k, corrupted as the grid's protocol says."""
        return apply_corruption(self.grid.corruption, self.splits.calibration, k, self.config.cal_seed)

    def run(self, cell: Cell) -> CellResult:
        """Audit one cell in a child run; returns its numbers."""
        query_file = self.query_file(cell)
        named = {"query": cell.query} if query_file is None else {"query_file": query_file}
        config = AuditConfig(
            model_uri=self.target.model_uri,
            method=cell.method,
            alpha=self.config.alpha,
            k=cell.k,
            cal_seed=self.config.cal_seed,
            corruption=self.grid.corruption,
            **named,
        )
        outcome = audit(config, oracle=self.oracle, tag_version=False, progress=self.progress)
        run_id, results = outcome.run_id, outcome.results
        log_params_of(run_id, {keys.PARAM_N_QUERY: self.n_query(cell)})
        merged = merged_metrics(results)
        metrics = {name: float(merged.get(name, np.nan)) for name in CELL_METRICS}
        return CellResult(run_id, metrics, outcome.primary.verdict)
