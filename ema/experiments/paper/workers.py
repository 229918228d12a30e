"""The cells of a grid audited here or by ``workers`` processes, each nesting its runs under the grid's parent.

A model that several cells need is trained once (the single-flight caches: the others wait
for it), and the rows come back in the grid's order, so ``cells.csv`` is the serial run's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from ema.experiments.paper.cells import CellAuditor
from ema.experiments.paper.config import GridConfig
from ema.experiments.paper.grids import Cell
from ema.experiments.paper.resume import CellKey, CellResult
from ema.experiments.parallel import run_in_workers
from ema.tracking.runs import RemoteParent, active_parent, join_parent, tracking_uri
from ema.training.threads import torch_threads, use_threads
from ema.workflows.target import resolve_target


def audit_all(auditor: CellAuditor, cells: list[Cell], progress: bool) -> dict[CellKey, CellResult]:
    """Audit ``cells`` here, one after the other, or in ``config.workers`` processes; keyed by cell."""
    desc = f"grid {auditor.config.name}"
    if auditor.config.workers == 1 or len(cells) <= 1:
        return {
            auditor.key(cell): auditor.run(cell) for cell in tqdm(cells, desc=desc, unit="cell", disable=not progress)
        }
    for cell in cells:
        auditor.query_file(cell)  # written once here, not by several workers at once
    workers = min(auditor.config.workers, len(cells))
    plan = WorkerPlan(
        config=auditor.config,
        model_uri=auditor.target.model_uri,
        own_files=auditor.target.own_files,
        folder=str(auditor.folder),
        tracking_uri=tracking_uri(),
        parent=active_parent(),
        threads=torch_threads(),
    )
    cells = worker_order(cells)
    results = run_in_workers(
        _audit_in_worker,
        cells,
        workers=workers,
        initializer=_start_worker,
        initargs=(plan,),
        progress=progress,
        desc=desc,
    )
    return {auditor.key(cell): result for cell, result in zip(cells, results, strict=True)}


def worker_order(cells: list[Cell]) -> list[Cell]:
    """The order workers take the cells in: each k's first cell before any k's second, each k starting elsewhere.

    Cells of one k share a calibration model and a calibration-set model; cells of one query
    set share a KS-ratio query model. Cells that run at once should need different models, or
    all but one of their workers would wait for the one training it; going down the diagonals
    of the (k, query set) table gives every cell of the first round its own models.

    >>> cells = [Cell(k, q, "ema") for k in (100, 90) for q in ("M1", "M6", "S")]
    >>> [(c.k, c.query) for c in worker_order(cells)]
    [(100, 'M1'), (90, 'M6'), (100, 'M6'), (90, 'S'), (100, 'S'), (90, 'M1')]
    """
    by_k: dict[int, list[Cell]] = {}
    for cell in cells:
        by_k.setdefault(cell.k, []).append(cell)
    rotated = [group[i % len(group) :] + group[: i % len(group)] for i, group in enumerate(by_k.values())]
    return [group[j] for j in range(max(map(len, rotated))) for group in rotated if j < len(group)]


@dataclass(frozen=True, kw_only=True)
class WorkerPlan:
    """What a worker process needs to audit cells: the grid, its target, the parent run, torch's thread count.

    ``own_files``: the checked files of a target the grid trained itself (:attr:`Target.own_files
    <ema.workflows.target.Target.own_files>`), scored as its weights in the workers too.

    The workers use the parent's thread count, not a share of the cores: torch's numbers depend
    on it, and the cells must equal a serial run's. Give each worker fewer threads by starting
    the command with fewer (``OMP_NUM_THREADS``), which a serial run then needs too.
    """

    config: GridConfig
    model_uri: str
    folder: str
    tracking_uri: str
    parent: RemoteParent
    threads: int
    own_files: Path | None = None


#: The worker process's auditor, built once by :func:`_start_worker` (None in the parent).
_worker_auditor: CellAuditor | None = None


def _start_worker(plan: WorkerPlan) -> None:
    """Set up a worker: its torch threads, the store and parent run it logs to, the target it audits."""
    global _worker_auditor
    use_threads(plan.threads)
    join_parent(plan.tracking_uri, plan.parent)
    target = resolve_target(plan.model_uri, own_files=plan.own_files)
    _worker_auditor = CellAuditor(
        plan.config, target, target.oracle(), target.splits(), folder=Path(plan.folder), progress=False
    )


def _audit_in_worker(cell: Cell) -> CellResult:
    return _worker_auditor.run(cell)
