"""``ema grid paper NAME``: one parent run per grid, one child audit run per cell, tables and figures on the parent.

The grid trains ONE target per (recipe, data) and caches it in the registry
(:mod:`ema.workflows.grid_targets`), or audits a registered target given by
``model_uri``. Every cell is an audit run nested under the grid's parent run (params
``k``, ``query``, ``method``, ``n_query``; :mod:`ema.experiments.paper.cells`); calibration
models and the KS ratio's models are cached by the audit workflow, and finished cells of
earlier runs of the same configuration are reused (:mod:`ema.experiments.paper.resume`).

With ``workers`` > 1 the cells are audited by that many processes
(:mod:`ema.experiments.paper.workers`), each nesting its runs under the parent; a model that several
cells need is trained once (the single-flight caches: the others wait for it), and the rows
come back in the grid's order, so ``cells.csv`` is the serial run's.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ema.errors import RETRYABLE, InputError
from ema.experiments.grid_tags import record_grid_on_version
from ema.experiments.paper.cells import CellAuditor
from ema.experiments.paper.config import GridConfig
from ema.experiments.paper.grids import Cell, check_data, member_query
from ema.experiments.paper.resume import CellKey, CellResult, finished_cells
from ema.experiments.paper.tables import (
    CELL_COLUMNS,
    TABLES_STYLE,
    RenderedTable,
    build_tables,
    tables_fragment,
    tables_html,
    tables_markdown,
)
from ema.experiments.paper.workers import audit_all
from ema.reports.grid import render_grid_report
from ema.signals import PAPER_SIGNALS, compute_scores
from ema.tracking import keys
from ema.tracking.registry import RegisteredVersion
from ema.tracking.runs import (
    log_artifacts_atomically,
    log_metrics,
    log_params,
    run_metrics,
    set_tags,
    start_run,
)
from ema.training.recipes import recipe_to_json
from ema.validation import short_hash
from ema.workflows.cached_models import cached_model
from ema.workflows.grid_targets import ensure_target
from ema.workflows.target import Target, resolve_target

#: What a grid stopped by an unreachable model or a busy store (``ema.errors.RETRYABLE``) adds to its message.
RESUME_ADVICE = "the cells that finished are kept: run the same command again to resume from them"
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
    from ema.experiments.paper import figures  # matplotlib: imported when a grid draws, not when the CLI starts

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
        target_proba = auditor.oracle.predict_proba(data.x)
        n_classes = target_proba.shape[1]
        query_model, _ = cached_model(
            auditor.target, "query-model", data, n_classes=n_classes, progress=auditor.progress
        )
        query_proba = query_model.predict_proba(data.x)
        panels = []
        for k in _panel_ks(tuple(ks)):
            calset_model, _ = cached_model(
                auditor.target,
                "calset-model",
                auditor.calibration_set(k),
                n_classes=n_classes,
                progress=auditor.progress,
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
    if target.version is not None:
        record_grid_on_version(target.version, config.name, parent.info.run_id, fingerprint, len(cells))
    wall = time.monotonic() - started
    return GridOutcome(parent.info.run_id, target.model_uri, cells, tables, markdown, n_audited, n_reused, wall)


def _grid_target(config: GridConfig, progress: bool) -> Target:
    """The target the cells audit: the given registered model, or the grid's recipe trained (or cached)."""
    grid, model_uri, data = config.grid, config.model_uri, config.data
    own_files = None  # a given model is the user's choice, run as its flavor loads it
    if model_uri is None:
        data = data or grid.default_data
        recipe = dataclasses.replace(grid.recipe, epochs=config.epochs) if config.epochs else grid.recipe
        log_params(
            {
                keys.PARAM_DATA: data,
                keys.PARAM_DATA_SEED: config.data_seed,
                keys.PARAM_ARCH: recipe.arch,
                keys.PARAM_EPOCHS: config.epochs or 0,  # as given (0: the paper's), as `mlflow run -e grid` logs it
                keys.PARAM_TARGET_EPOCHS: recipe.epochs,
            }
        )
        entry, _ = ensure_target(
            recipe, data=data, data_seed=config.data_seed, data_root=config.data_root, progress=progress
        )
        model_uri, own_files = entry.version.uri, entry.path
    target = resolve_target(model_uri, own_files=own_files)
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
    audited = audit_all(auditor, list(todo.values()), progress)
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
