"""``ema grid NAME``: one parent run per grid, one child audit run per cell, tables and figures on the parent.

The grid trains ONE target per (recipe, data) and caches it in the registry
(``ema-grid-target``, tag ``ema.cache_key``), or audits a registered target given by
``model_uri``. Every cell is an audit run nested under the grid's parent run (params
``k``, ``query``, ``method``, ``n_query``); calibration models and the KS ratio's models are
cached by the audit workflow, and finished cells of earlier runs of the same configuration
are reused (:mod:`ema.experiments.resume`).

With ``workers`` > 1 the cells are audited by that many processes
(:mod:`ema.experiments.parallel`), each nesting its runs under the parent; a model that several
cells need is trained once (the single-flight caches: the others wait for it), and the rows
come back in the grid's order, so ``cells.csv`` is the serial run's.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ema.data.arrays import ArraySet
from ema.data.corruption import apply_corruption
from ema.data.files import write_set
from ema.data.presets import load_splits
from ema.data.splits import QUERY_NAMES, Splits
from ema.errors import RETRYABLE, InputError
from ema.experiments.grids import Cell, Grid, check_data, get_grid, member_query
from ema.experiments.parallel import run_in_workers
from ema.experiments.resume import CELL_METRICS, CellKey, CellResult, finished_cells
from ema.experiments.tables import (
    CELL_COLUMNS,
    TABLES_STYLE,
    RenderedTable,
    build_tables,
    tables_fragment,
    tables_html,
    tables_markdown,
)
from ema.oracle import Oracle
from ema.reports.grid import render_grid_report
from ema.signals import PAPER_SIGNALS, compute_scores
from ema.tracking import keys
from ema.tracking.helper_cache import find_entry, record_entry
from ema.tracking.registry import RegisteredVersion, set_version_tags
from ema.tracking.runs import (
    RemoteParent,
    active_parent,
    join_parent,
    log_artifacts_atomically,
    log_metrics,
    log_params,
    log_params_of,
    run_metrics,
    set_tags,
    start_run,
    tracking_uri,
)
from ema.tracking.single_flight import single_flight
from ema.training.recipes import TorchRecipe, recipe_to_json
from ema.training.spec import TrainSpec
from ema.training.threads import torch_threads, use_threads
from ema.validation import check_open_unit, short_hash
from ema.workflows.audit import AuditConfig, audit, merged_metrics
from ema.workflows.cached_models import cached_model
from ema.workflows.target import Target, resolve_target
from ema.workflows.train import train_target

#: What a grid stopped by an unreachable model or a busy store (``ema.errors.RETRYABLE``) adds to its message.
RESUME_ADVICE = "the cells that finished are kept: run the same command again to resume from them"
#: Registered name of the targets the grids train.
GRID_TARGET_NAME = "ema-grid-target"
#: Panels of Fig. 3 (the paper shows k = 100, 80, 60).
FIG3_PANELS = 3


@dataclass(frozen=True, kw_only=True)
class GridConfig:
    """What ``ema grid NAME`` is asked to do.

    Attributes
    ----------
    name : str
        A grid from :data:`ema.experiments.grids.GRIDS`.
    data, data_root, data_seed
        Where the target's splits come from (default: the grid's data). With ``model_uri`` they
        come from the version's tags, and ``data`` must be None or the same source.
    model_uri : str, optional
        A registered target (``models:/NAME@ALIAS``) to audit instead of training the grid's.
    ks, queries, sizes : tuple, optional
        Narrow the grid (default: all of the grid's k values, query sets and sizes).
    epochs : int, optional
        Train the grid's recipe for this many epochs instead of the paper's.
    cal_seed, alpha, sample_seed
        Calibration seed, significance level, seed of the query subsamples.
    workers : int
        Processes that audit the cells (1: this one). The cells, and ``cells.csv``, do not depend on it.
        The workers are started with ``spawn``: a script that calls :func:`run_grid` with more than
        one must do so under ``if __name__ == "__main__":``.
    """

    name: str
    data: str | None = None
    data_root: str | None = None
    data_seed: int = 0
    model_uri: str | None = None
    ks: tuple[int, ...] | None = None
    queries: tuple[str, ...] | None = None
    sizes: tuple[int | None, ...] | None = None
    epochs: int | None = None
    cal_seed: int = 0
    alpha: float = 0.1
    sample_seed: int = 0
    workers: int = 1

    @property
    def grid(self) -> Grid:
        return get_grid(self.name)

    def narrowed(self) -> GridConfig:
        """The same configuration with every unset k, query set and size filled in from the grid."""
        grid = self.grid
        return dataclasses.replace(
            self,
            ks=tuple(self.ks or grid.ks),
            queries=tuple(self.queries or QUERY_NAMES),
            sizes=tuple(self.sizes or grid.sizes),
        )

    def validate(self) -> GridConfig:
        """Check the options before any training; returns ``self``."""
        check_open_unit("alpha", self.alpha)
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise InputError(f"expected workers to be an integer >= 1, got {self.workers!r}")
        if self.model_uri is not None and self.epochs is not None:
            raise InputError("expected either --model (its recipe comes from its version tags) or --epochs, got both")
        if self.model_uri is None:
            check_data(self.grid, self.data or self.grid.default_data)
        return self

    def params(self) -> dict[str, object]:
        """The parent run's params that describe the plan."""
        return {
            keys.PARAM_GRID: self.name,
            keys.PARAM_ALPHA: self.alpha,
            keys.PARAM_CAL_SEED: self.cal_seed,
            keys.PARAM_SAMPLE_SEED: self.sample_seed,
            keys.PARAM_GRID_KS: ",".join(map(str, self.ks)),
            keys.PARAM_GRID_QUERIES: ",".join(self.queries),
            keys.PARAM_GRID_SIZES: ",".join("full" if s is None else str(s) for s in self.sizes),
            keys.PARAM_CORRUPTION: self.grid.corruption,
            keys.PARAM_WORKERS: self.workers,
        }


@dataclass(frozen=True)
class GridOutcome:
    """What ``ema grid`` produced: the parent run, every cell, the tables."""

    run_id: str
    target_uri: str
    cells: pd.DataFrame
    tables: list[RenderedTable]
    markdown: str
    n_audited: int
    n_reused: int
    wall_seconds: float


def ensure_target(
    recipe: TrainSpec, *, data: str, data_seed: int, data_root: str | None, progress: bool
) -> tuple[RegisteredVersion, bool]:
    """The grid target for (recipe, data): the cached registered version, or a newly trained one.

    Grids started at once with the same recipe and data train it once; the others wait and reuse it.
    """
    splits = load_splits(data, data_seed, data_root)
    cache_key = short_hash(
        {
            "recipe": TorchRecipe(recipe).to_dict(),
            "data": data,
            "data_seed": data_seed,
            "data_root": str(Path(data_root).resolve()) if data_root else "",
            "train": splits.train.fingerprint,
        }
    )

    def build() -> RegisteredVersion:
        trained = train_target(
            recipe, data=data, data_seed=data_seed, data_root=data_root, model_name=GRID_TARGET_NAME, progress=progress
        )
        set_version_tags(trained.version, {keys.TAG_CACHE_KEY: cache_key})
        return record_entry(trained.version, cache_key).version

    def find() -> RegisteredVersion | None:
        entry = find_entry(GRID_TARGET_NAME, cache_key)
        return entry.version if entry is not None else None

    version, built = single_flight(GRID_TARGET_NAME, cache_key, find=find, build=build)
    return version, not built


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


def _cell_row(cell: Cell, n_query: int, result: CellResult, reused: bool) -> dict:
    return {
        "k": cell.k,
        "query": cell.query,
        "method": cell.method,
        "size": cell.size_label,
        "n_query": n_query,
        **result.metrics,
        "verdict": result.verdict,
        "run_id": result.run_id,
        "reused": reused,
    }


def _panel_ks(ks: tuple[int, ...]) -> list[int]:
    if len(ks) <= FIG3_PANELS:
        return list(ks)
    return [ks[int(i)] for i in np.unique(np.round(np.linspace(0, len(ks) - 1, FIG3_PANELS)).astype(int))]


def draw_figures(auditor: CellAuditor) -> dict[str, bytes]:
    """Fig. 2 always; Fig. 3 when the grid audited the KS ratio on whole query sets."""
    from ema.experiments import figures  # matplotlib: imported when a grid draws, not when the CLI starts

    grid, config = auditor.grid, auditor.config
    queries, sizes, ks = config.queries, config.sizes, config.ks
    labels = grid.label_map
    member = member_query(queries)
    scores = {}
    for name in (member, "M6", "S"):
        data = auditor.splits.query(name)
        scores[labels.get(name, name)] = compute_scores(auditor.oracle.predict_proba(data.x), data.y, PAPER_SIGNALS)
    out = {
        keys.ARTIFACT_FIG2: figures.signal_distributions(
            scores, title=f"Fig. 2: the target's membership metrics ({auditor.target.label})"
        )
    }
    if grid.has_ks_ratio and None in sizes:
        data = auditor.splits.query(member)
        query_model, _ = cached_model(auditor.target, "query-model", data, progress=auditor.progress)
        target_proba, query_proba = auditor.oracle.predict_proba(data.x), query_model.predict_proba(data.x)
        panels = []
        for k in _panel_ks(tuple(ks)):
            calset_model, _ = cached_model(
                auditor.target, "calset-model", auditor.calibration_set(k), progress=auditor.progress
            )
            panels.append(figures.KSPanel(k, target_proba, calset_model.predict_proba(data.x), query_proba, data.y))
        label = labels.get(member, member)
        out[keys.ARTIFACT_FIG3] = figures.ks_output_distributions(
            panels, query_label=label, title=f"Fig. 3: outputs behind rho_KS on {label} (a member set)"
        )
    return out


def _target_metrics(version: RegisteredVersion | None) -> dict[str, float]:
    if version is None or not version.run_id:
        return {}
    metrics = run_metrics(version.run_id)
    return {
        f"target_{m}": metrics[m] for m in (keys.METRIC_TRAIN_ACCURACY, keys.METRIC_HELD_OUT_ACCURACY) if m in metrics
    }


def run_grid(config: GridConfig, *, progress: bool = True) -> GridOutcome:
    """Run the grid as one parent run; reuse finished cells; log tables, cells and figures on the parent.

    Raises
    ------
    InputError
        On an unknown grid, a data source the grid does not fit, or ``model_uri`` with ``epochs`` or other data.
    ModelAccessError, StoreBusyError
        When a cell's model cannot be reached or the store stays busy: the message then ends in
        :data:`RESUME_ADVICE` (the same command audits only the cells that did not finish).
    """
    config = config.narrowed()
    started = time.monotonic()
    with start_run(f"grid {config.name}") as parent:
        config.validate()
        log_params(config.params())
        target = _grid_target(config, progress)
        settings = _cell_settings(config, target)
        fingerprint = short_hash(settings)
        set_tags({keys.TAG_GRID: config.name, keys.TAG_GRID_CONFIG: fingerprint})
        done = finished_cells(fingerprint, parent.info.experiment_id, exclude_parent=parent.info.run_id)
        with tempfile.TemporaryDirectory() as tmp:
            auditor = CellAuditor(config, target, target.oracle(), target.splits(), folder=Path(tmp), progress=progress)
            try:
                cells, n_audited, n_reused = _audit_cells(auditor, done, progress)
            except RETRYABLE as exc:  # the model or the store may be back next time; a refused input would not be
                raise type(exc)(f"{exc}; {RESUME_ADVICE}") from exc
            pictures = draw_figures(auditor)
        tables = build_tables(
            cells, config.grid.tables(config.sizes), ks=config.ks, queries=config.queries, alpha=config.alpha
        )
        title = f"ema grid {config.name}: {config.grid.description} ({target.data}, {target.label})"
        markdown = tables_markdown(tables, title=title, alpha=config.alpha, labels=config.grid.label_map)
        log_metrics(
            {
                keys.METRIC_N_CELLS: float(len(cells)),
                keys.METRIC_N_AUDITED: float(n_audited),
                keys.METRIC_N_REUSED: float(n_reused),
                keys.METRIC_WALL_SECONDS: time.monotonic() - started,
                **_target_metrics(target.version),
                **{f"{t.spec.name}_wrongly_removed": float(t.n_wrongly_removed) for t in tables},
                **{f"{t.spec.name}_wrongly_memorized": float(t.n_wrongly_memorized) for t in tables},
            }
        )
        log_artifacts_atomically(
            {
                keys.ARTIFACT_TABLES_MD: markdown,
                keys.ARTIFACT_TABLES_HTML: tables_html(
                    tables, title=title, alpha=config.alpha, labels=config.grid.label_map
                ),
                keys.ARTIFACT_CELLS: cells,
                keys.ARTIFACT_GRID_CONFIG: {**settings, **_plan(config), "config_hash": fingerprint},
                **pictures,
                keys.ARTIFACT_REPORT: render_grid_report(
                    title,
                    tables_html=tables_fragment(tables, alpha=config.alpha, labels=config.grid.label_map),
                    tables_style=TABLES_STYLE,
                    figures=pictures,
                    notes={"cells": len(cells), "audited now": n_audited, "reused": n_reused},
                ),
            }
        )
    _record_on_version(target, config.name, parent.info.run_id, fingerprint, len(cells))
    wall = time.monotonic() - started
    return GridOutcome(parent.info.run_id, target.model_uri, cells, tables, markdown, n_audited, n_reused, wall)


def _grid_target(config: GridConfig, progress: bool) -> Target:
    """The target the cells audit: the given registered model, or the grid's recipe trained (or cached)."""
    grid, model_uri, data = config.grid, config.model_uri, config.data
    if model_uri is None:
        data = data or grid.default_data
        recipe = dataclasses.replace(grid.recipe, epochs=config.epochs) if config.epochs else grid.recipe
        log_params(
            {
                keys.PARAM_DATA: data,
                keys.PARAM_DATA_SEED: config.data_seed,
                keys.PARAM_ARCH: recipe.arch,
                keys.PARAM_EPOCHS: recipe.epochs,
            }
        )
        version, _ = ensure_target(
            recipe, data=data, data_seed=config.data_seed, data_root=config.data_root, progress=progress
        )
        model_uri = version.uri
    target = resolve_target(model_uri)
    if data is not None and data != target.data:
        raise InputError(
            f"expected --data {target.data} (the data {target.model_uri} was trained on) or none, got {data!r}"
        )
    check_data(grid, target.data)
    log_params(
        {
            keys.PARAM_TARGET_URI: target.model_uri,
            keys.PARAM_DATA: target.data,
            keys.PARAM_DATA_SEED: target.data_seed,
            keys.PARAM_RECIPE: recipe_to_json(target.recipe)[:500],
        }
    )
    return target


def _cell_settings(config: GridConfig, target: Target) -> dict:
    """Everything that decides a cell's numbers apart from the cell itself: hashed, it finds reusable cells."""
    return {
        "target": target.model_uri,
        "data": target.data,
        "data_seed": target.data_seed,
        "data_root": target.data_root,
        "cal_seed": config.cal_seed,
        "alpha": config.alpha,
        "sample_seed": config.sample_seed,
        "corruption": config.grid.corruption,
        "threshold_mode": "global",
    }


def _plan(config: GridConfig) -> dict:
    return {"grid": config.name, "ks": list(config.ks), "queries": list(config.queries), "sizes": list(config.sizes)}


def _audit_cells(
    auditor: CellAuditor, done: dict[CellKey, CellResult], progress: bool
) -> tuple[pd.DataFrame, int, int]:
    """Every planned cell: audited, or reused from ``done`` or from an earlier cell of this run with the same key.

    The rows are in the grid's order, whether the cells were audited here or by workers.
    """
    config = auditor.config
    planned = config.grid.cells(config.ks, config.queries, config.sizes)
    todo: dict[CellKey, Cell] = {}
    for cell in planned:
        todo.setdefault(auditor.key(cell), cell)
    todo = {key: cell for key, cell in todo.items() if key not in done}
    audited = _audit_all(auditor, list(todo.values()), progress)
    rows, now, n_audited, n_reused = [], {}, 0, 0
    for cell in planned:
        key = auditor.key(cell)
        if key in now:
            result, reused = now[key], False
        elif key in audited:
            result, reused = audited[key], False
            n_audited += 1
        else:
            result, reused = done[key], True
            n_reused += 1
        now[key] = result
        rows.append(_cell_row(cell, key.n_query, result, reused))
    return pd.DataFrame(rows, columns=list(CELL_COLUMNS)), n_audited, n_reused


def _audit_all(auditor: CellAuditor, cells: list[Cell], progress: bool) -> dict[CellKey, CellResult]:
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
    return {auditor.key(cell): result for cell, result in zip(cells, results)}


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


#: The worker process's auditor, built once by :func:`_start_worker` (None in the parent).
_worker_auditor: CellAuditor | None = None


def _start_worker(plan: WorkerPlan) -> None:
    """Set up a worker: its torch threads, the store and parent run it logs to, the target it audits."""
    global _worker_auditor
    use_threads(plan.threads)
    join_parent(plan.tracking_uri, plan.parent)
    target = resolve_target(plan.model_uri)
    _worker_auditor = CellAuditor(
        plan.config, target, target.oracle(), target.splits(), folder=Path(plan.folder), progress=False
    )


def _audit_in_worker(cell: Cell) -> CellResult:
    return _worker_auditor.run(cell)


def _record_on_version(target: Target, name: str, run_id: str, fingerprint: str, n_cells: int) -> None:
    """Tag the audited version with the grid (its cells do not tag it)."""
    if target.version is None:
        return
    record = {
        "run_id": run_id,
        "config_hash": fingerprint,
        "n_cells": n_cells,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    set_version_tags(target.version, {f"{keys.TAG_LAST_GRID_PREFIX}{name}": json.dumps(record, sort_keys=True)})
