"""``ema grid NAME``: one parent run per grid, one child audit run per cell, tables and figures on the parent.

The grid trains ONE target per (recipe, data) and caches it in the registry
(``ema-grid-target``, tag ``ema.cache_key``), or audits a registered target given by
``model_uri``. Every cell is an audit run nested under the grid's parent run (params
``k``, ``query``, ``method``, ``n_query``); calibration models and the KS ratio's models are
cached by the audit workflow, and finished cells of earlier runs of the same configuration
are reused (:mod:`ema.experiments.resume`).
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
from mlflow.tracking import MlflowClient
from tqdm.auto import tqdm

from ema.auditors.ema import check_alpha
from ema.data.arrays import ArraySet
from ema.data.corruption import apply_corruption
from ema.data.files import write_set
from ema.data.splits import QUERY_NAMES, Splits
from ema.errors import InputError
from ema.experiments.grids import Cell, Grid, check_data, get_grid, member_query
from ema.experiments.resume import (
    CELL_METRICS,
    PARAM_N_QUERY,
    TAG_CONFIG,
    TAG_GRID,
    CellKey,
    CellResult,
    config_hash,
    finished_cells,
)
from ema.experiments.tables import CELL_COLUMNS, RenderedTable, build_tables, tables_html, tables_markdown
from ema.oracle import Oracle
from ema.signals import PAPER_METRICS, compute_scores
from ema.tracking import keys
from ema.tracking.registry import RegisteredVersion, find_cached_version, set_version_tags
from ema.tracking.runs import log_artifacts_atomically, start_run
from ema.training.recipes import TorchRecipe, recipe_to_json
from ema.training.spec import TrainSpec
from ema.workflows.audit import audit, merged_metrics
from ema.workflows.models import cached_model
from ema.workflows.sources import load_splits
from ema.workflows.target import Target, resolve_target
from ema.workflows.train import train_target

#: Registered name of the targets the grids train.
GRID_TARGET_NAME = "ema-grid-target"
ARTIFACT_TABLES_MD = "tables.md"
ARTIFACT_TABLES_HTML = "tables.html"
ARTIFACT_CELLS = "cells.csv"
ARTIFACT_CONFIG = "grid.json"
ARTIFACT_FIG2 = "fig2_signals.png"
ARTIFACT_FIG3 = "fig3_ks_outputs.png"
#: Panels of Fig. 3 (the paper shows k = 100, 80, 60).
FIG3_PANELS = 3


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
    """The grid target for (recipe, data): the cached registered version, or a newly trained one."""
    splits = load_splits(data, data_seed, data_root)
    cache_key = config_hash(
        {
            "recipe": TorchRecipe(recipe).to_dict(),
            "data": data,
            "data_seed": data_seed,
            "data_root": str(Path(data_root).resolve()) if data_root else "",
            "train": splits.train.fingerprint,
        }
    )
    version = find_cached_version(GRID_TARGET_NAME, cache_key)
    if version is not None:
        return version, True
    trained = train_target(
        recipe, data=data, data_seed=data_seed, data_root=data_root, model_name=GRID_TARGET_NAME, progress=progress
    )
    set_version_tags(trained.version, {keys.TAG_CACHE_KEY: cache_key})
    return trained.version, False


def subsample(data: ArraySet, size: int, *, seed: int, query: str) -> ArraySet:
    """A seeded subsample of ``size`` images, the same for every k (seeded by seed, size and query set)."""
    rng = np.random.default_rng([seed, size, QUERY_NAMES.index(query) if query in QUERY_NAMES else 0])
    return data.take(np.sort(rng.choice(len(data), size=size, replace=False)), name=query)


class CellAuditor:
    """Audits the cells of one grid against one target; query subsamples and calibrations live in ``folder``."""

    def __init__(
        self,
        grid: Grid,
        target: Target,
        oracle: Oracle,
        splits: Splits,
        *,
        cal_seed: int,
        alpha: float,
        sample_seed: int,
        folder: Path,
        progress: bool,
    ) -> None:
        self.grid, self.target, self.oracle, self.splits = grid, target, oracle, splits
        self.cal_seed, self.alpha, self.sample_seed, self.folder, self.progress = (
            cal_seed,
            alpha,
            sample_seed,
            folder,
            progress,
        )

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
                subsample(self.splits.query(cell.query), cell.size, seed=self.sample_seed, query=cell.query), path
            )
        return str(path)

    def calibration_set(self, k: int) -> ArraySet:
        """The calibration set at quality k, corrupted as the grid's protocol says."""
        return apply_corruption(self.grid.corruption, self.splits.calibration, k, self.cal_seed)

    def run(self, cell: Cell) -> CellResult:
        """Audit one cell in a child run; returns its numbers."""
        query_file = self.query_file(cell)
        named = {"query": cell.query} if query_file is None else {"query_file": query_file}
        outcome = audit(
            self.target.model_uri,
            method=cell.method,
            alpha=self.alpha,
            k=cell.k,
            cal_seed=self.cal_seed,
            corruption=self.grid.corruption,
            oracle=self.oracle,
            tag_version=False,
            progress=self.progress,
            **named,
        )
        run_id, results = outcome.run_id, outcome.results
        MlflowClient().log_param(run_id, PARAM_N_QUERY, self.n_query(cell))
        merged = merged_metrics(results)
        primary = next(iter(results.values()))
        return CellResult(run_id, {name: float(merged.get(name, np.nan)) for name in CELL_METRICS}, primary.verdict)


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


def draw_figures(grid: Grid, auditor: CellAuditor, ks, queries, sizes) -> dict[str, bytes]:
    """Fig. 2 always; Fig. 3 when the grid audited the KS ratio on whole query sets."""
    from ema.experiments import figures  # matplotlib: imported when a grid draws, not when the CLI starts

    labels = grid.label_map
    member = member_query(queries)
    scores = {}
    for name in (member, "M6", "S"):
        data = auditor.splits.query(name)
        scores[labels.get(name, name)] = compute_scores(auditor.oracle.predict_proba(data.x), data.y, PAPER_METRICS)
    out = {
        ARTIFACT_FIG2: figures.signal_distributions(
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
        out[ARTIFACT_FIG3] = figures.ks_output_distributions(
            panels, query_label=label, title=f"Fig. 3: outputs behind rho_KS on {label} (a member set)"
        )
    return out


def _target_metrics(version: RegisteredVersion | None) -> dict[str, float]:
    if version is None or not version.run_id:
        return {}
    metrics = MlflowClient().get_run(version.run_id).data.metrics
    return {
        f"target_{m}": metrics[m] for m in (keys.METRIC_TRAIN_ACCURACY, keys.METRIC_HELD_OUT_ACCURACY) if m in metrics
    }


def run_grid(
    name: str,
    *,
    data: str | None = None,
    data_root: str | None = None,
    data_seed: int = 0,
    model_uri: str | None = None,
    ks: tuple[int, ...] | None = None,
    queries: tuple[str, ...] | None = None,
    sizes: tuple[int | None, ...] | None = None,
    epochs: int | None = None,
    cal_seed: int = 0,
    alpha: float = 0.1,
    sample_seed: int = 0,
    progress: bool = True,
) -> GridOutcome:
    """Run grid ``name`` as one parent run; reuse finished cells; log tables, cells and figures on the parent.

    Parameters
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

    Raises
    ------
    InputError
        On an unknown grid, a data source the grid does not fit, or ``model_uri`` with ``epochs`` or other data.
    """
    grid = get_grid(name)
    ks, queries, sizes = tuple(ks or grid.ks), tuple(queries or QUERY_NAMES), tuple(sizes or grid.sizes)
    started = time.monotonic()
    with start_run(f"grid {name}") as parent:
        check_alpha(alpha)
        if model_uri is not None and epochs is not None:
            raise InputError("expected either --model (its recipe comes from its version tags) or --epochs, got both")
        mlflow.log_params(
            {
                "grid": name,
                keys.PARAM_ALPHA: alpha,
                keys.PARAM_CAL_SEED: cal_seed,
                "sample_seed": sample_seed,
                "grid_ks": ",".join(map(str, ks)),
                "grid_queries": ",".join(queries),
                "grid_sizes": ",".join("full" if s is None else str(s) for s in sizes),
                "corruption": grid.corruption,
            }
        )
        if model_uri is None:
            data = data or grid.default_data
            check_data(grid, data)
            recipe = dataclasses.replace(grid.recipe, epochs=epochs) if epochs else grid.recipe
            mlflow.log_params(
                {keys.PARAM_DATA: data, keys.PARAM_DATA_SEED: data_seed, "arch": recipe.arch, "epochs": recipe.epochs}
            )
            version, _ = ensure_target(recipe, data=data, data_seed=data_seed, data_root=data_root, progress=progress)
            model_uri = version.uri
        target = resolve_target(model_uri)
        if data is not None and data != target.data:
            raise InputError(
                f"expected --data {target.data} (the data {target.model_uri} was trained on) or none, got {data!r}"
            )
        check_data(grid, target.data)
        mlflow.log_params(
            {
                "target_uri": target.model_uri,
                keys.PARAM_DATA: target.data,
                keys.PARAM_DATA_SEED: target.data_seed,
                keys.PARAM_RECIPE: recipe_to_json(target.recipe)[:500],
            }
        )
        config = {
            "target": target.model_uri,
            "data": target.data,
            "data_seed": target.data_seed,
            "data_root": target.data_root,
            "cal_seed": cal_seed,
            "alpha": alpha,
            "sample_seed": sample_seed,
            "corruption": grid.corruption,
            "threshold_mode": "global",
        }
        fingerprint = config_hash(config)
        mlflow.set_tags({TAG_GRID: name, TAG_CONFIG: fingerprint})
        done = finished_cells(fingerprint, parent.info.experiment_id, exclude_parent=parent.info.run_id)
        splits = target.splits()
        planned = grid.cells(ks, queries, sizes)
        rows, now, n_audited, n_reused = [], {}, 0, 0
        with tempfile.TemporaryDirectory() as tmp:
            auditor = CellAuditor(
                grid,
                target,
                target.oracle(),
                splits,
                cal_seed=cal_seed,
                alpha=alpha,
                sample_seed=sample_seed,
                folder=Path(tmp),
                progress=progress,
            )
            bar = tqdm(planned, desc=f"grid {name}", unit="cell", disable=not progress)
            for cell in bar:
                key = auditor.key(cell)
                if key in now:
                    result, reused = now[key], False
                elif key in done:
                    result, reused = done[key], True
                    n_reused += 1
                else:
                    result, reused = auditor.run(cell), False
                    n_audited += 1
                now[key] = result
                rows.append(_cell_row(cell, key.n_query, result, reused))
                bar.set_postfix(audited=n_audited, reused=n_reused)
            pictures = draw_figures(grid, auditor, ks, queries, sizes)
        cells = pd.DataFrame(rows, columns=list(CELL_COLUMNS))
        tables = build_tables(cells, grid.tables(sizes), ks=ks, queries=queries, alpha=alpha)
        title = f"ema grid {name}: {grid.description} ({target.data}, {target.label})"
        markdown = tables_markdown(tables, title=title, alpha=alpha, labels=grid.label_map)
        wall = time.monotonic() - started
        mlflow.log_metrics(
            {
                "n_cells": float(len(rows)),
                "n_audited": float(n_audited),
                "n_reused": float(n_reused),
                "wall_seconds": wall,
                **_target_metrics(target.version),
                **{f"{t.spec.name}_wrongly_removed": float(t.n_wrongly_removed) for t in tables},
                **{f"{t.spec.name}_wrongly_memorized": float(t.n_wrongly_memorized) for t in tables},
            }
        )
        log_artifacts_atomically(
            {
                ARTIFACT_TABLES_MD: markdown,
                ARTIFACT_TABLES_HTML: tables_html(tables, title=title, alpha=alpha, labels=grid.label_map),
                ARTIFACT_CELLS: cells,
                ARTIFACT_CONFIG: {
                    **config,
                    "grid": name,
                    "config_hash": fingerprint,
                    "ks": list(ks),
                    "queries": list(queries),
                    "sizes": [s for s in sizes],
                },
                **pictures,
            }
        )
    if target.version is not None:
        record = {
            "run_id": parent.info.run_id,
            "config_hash": fingerprint,
            "n_cells": len(rows),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        set_version_tags(target.version, {f"{keys.TAG_LAST_GRID_PREFIX}{name}": json.dumps(record, sort_keys=True)})
    return GridOutcome(parent.info.run_id, target.model_uri, cells, tables, markdown, n_audited, n_reused, wall)
