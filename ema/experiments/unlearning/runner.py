"""``ema grid unlearning``: every removal method, seeded, audited before and after, against exact retraining.

One target (the grid's benchmark recipe, cached as ``ema-grid-target``, or ``--model``) has
its forget set (fold M1) removed by each method under each seed; every result is a new
version of that model (:func:`ema.workflows.unlearn.unlearn`, no alias), made once: a rerun
reuses the versions registered with the same source, forget set, method, hyperparameters and
seed (:func:`ema.workflows.unlearn.unlearn_cached`), those ``ema unlearn`` made included, and
audits them again. The target and every new version are then audited on three query sets,
the forget set, a retained fold (M2) and held-out data (M6), by three auditors: EMA and the KS
ratio (one ``--method both`` audit run) and the calibrated auditor (one ``--method calibrated``
run). With a data owner's mark key (``mark_key``: the target was trained on the key's marked
copy in place of the forget set), every version is also audited by the marks auditor (one
``--method marks`` run stamping the first ``mark_queries`` held-out images); its verdict is about
the forget set's mark, so it is tabulated under the forget set. Exact retraining is the
baseline of every table. Once the grid finished, the target and every version it audited
carry the tag ``ema.last_grid.unlearning`` (the grid's parent run, config hash, number of
audit rows, time).

A trace is what an auditor can see of the forget set on a version: *retention* (the forget set
is more member-like than never-seen data, ``p_removed``) or *over-unlearning* (less member-like,
``p_too_forgotten``: gradient ascent pushes membership scores below those of unseen data). To
say from which |D_q| a trace shows, seeded subsets of the forget set of each size in ``sizes``
are audited by the calibrated auditor as ``ema audit --method calibrated`` runs it (the
version's member reference, the forget set left out, and its clean calibration set, scored on
the version once); each test at ``alpha / 2``, so that the two together err at ``alpha`` on a
truly removed set, as retraining shows.

With ``reference_seeds``, each version's whole forget set is audited once more per reference
seed by the calibrated auditor against a non-member reference redrawn from never-seen data
(:func:`audit_against_redrawn_references`): one fixed reference makes a verdict conditional on
that reference (docs/VALIDITY.md measures false ``memorized`` up to 0.20 with one), so the
retrain row's verdicts are tallied over (retrain seed, reference seed) pairs. ``margin`` is the
calibrated auditor's in every audit of the grid (``"auto"``: each audit's certifiable margin).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ema.auditors.marks import MarksAuditor
from ema.auditors.reference import ReferenceAuditor
from ema.auditors.reference_record import decide_reference_verdict
from ema.data.arrays import fingerprint
from ema.data.marks import read_key
from ema.data.presets import DEFAULT_DATA, load_splits
from ema.data.splits import Splits
from ema.errors import InputError
from ema.experiments.common import BENCHMARK_RECIPE
from ema.experiments.grid_tags import record_grid_on_version
from ema.experiments.unlearning.config import UNLEARNING_GRID, UnlearningGridConfig
from ema.experiments.unlearning.tables import (
    REDRAW_METRICS,
    SET_ROLES,
    TRACE_KINDS,
    render_tables,
    summarise_traces,
    trace_figure,
)
from ema.reports.grid import render_grid_report
from ema.tracking import keys
from ema.tracking.registry import RegisteredVersion
from ema.tracking.runs import log_artifacts_atomically, log_metrics, log_params, set_tags, start_run
from ema.training.unlearn_spec import UnlearnSpec
from ema.validation import short_hash
from ema.workflows.audit import AuditConfig, audit
from ema.workflows.grid_targets import ensure_target
from ema.workflows.methods import certifies_margin, method_spec
from ema.workflows.references import member_reference, nonmember_reference
from ema.workflows.target import Target, resolve_target
from ema.workflows.unlearn import UnlearnConfig, unlearn_cached

#: The row of the target itself, before any removal.
BEFORE = "none (before)"
#: The audit runs per (version, query set): EMA with the KS ratio, and the calibrated auditor.
AUDIT_METHODS = ("both", "calibrated")
#: Auditor -> the audit method whose run carries it, and the metric shown for it (its headline in the method table).
AUDITORS = {
    auditor: (method, method_spec(auditor).headline)
    for auditor, method in (("ema", "both"), ("ks-ratio", "both"), ("calibrated", "calibrated"))
}
#: The marks auditor, run as its own audit method (with ``mark_key`` only); its headline is the metric shown.
MARKS = MarksAuditor.method
#: The artifact of the forget set's audits against redrawn references (with ``reference_seeds`` only).
REDRAWS_CSV = "redraws.csv"


@dataclass(frozen=True)
class UnlearningOutcome:
    """The parent run, the frames behind the tables, the tables as Markdown, the wall time, versions reused.

    ``redraws``: one row per version and reference seed (empty without ``reference_seeds``).
    """

    run_id: str
    target_uri: str
    versions: pd.DataFrame
    audits: pd.DataFrame
    traces: pd.DataFrame
    redraws: pd.DataFrame
    markdown: str
    wall_seconds: float
    n_reused: int = 0


@dataclass(frozen=True)
class Version:
    """One audited model: the target (method ``BEFORE``) or an unlearned version, with its unlearn run's numbers.

    ``files``: an unlearned version's files as the auditor's own run recorded them (None for the target).
    """

    method: str
    seed: int | None
    version: RegisteredVersion
    metrics: dict[str, float]
    files: Path | None = None


def audited_target(target: Target, version: Version) -> Target:
    """The model a row audits: the target, or an unlearned version scored as its weights in the target's recipe.

    An unlearned version keeps its source's architecture and data, so it is rebuilt from its checked
    files with the source's recipe: nothing a store writer could have put beside them runs, whatever
    its flavor (:attr:`ema.workflows.target.Target.own_files`).
    """
    if version.files is None:
        return target
    return dataclasses.replace(target, model_uri=version.version.uri, version=version.version, own_files=version.files)


def run_unlearning_grid(config: UnlearningGridConfig, *, progress: bool = True) -> UnlearningOutcome:
    """Unlearn, audit and tabulate as one parent run; log tables, frames, the figure and the report on it."""
    started = time.monotonic()
    config = config.validate()  # before the parent run: a refused option leaves no run behind
    with start_run(f"grid {UNLEARNING_GRID}") as parent:
        log_params(config.params())
        set_tags({keys.TAG_GRID: UNLEARNING_GRID})
        target = _grid_target(config, progress)
        versions = [Version(BEFORE, None, target.version, _accuracies(config, target))]
        plan = [(m, s) for m in config.methods for s in config.seeds]
        n_reused = 0
        for method, seed in tqdm(plan, desc="unlearn", unit="version", disable=not progress):
            outcome, reused = unlearn_cached(
                UnlearnConfig(
                    model_uri=target.model_uri,
                    forget=config.forget,
                    spec=UnlearnSpec(method=method, seed=seed),
                    alias=None,
                ),
                progress=False,
            )
            n_reused += reused
            versions.append(Version(method, seed, outcome.version, outcome.metrics, outcome.files))
        audits, traces, redraws = [], [], []
        for entry in tqdm(versions, desc="audit", unit="version", disable=not progress):
            version_target = audited_target(target, entry)
            oracle = version_target.oracle()
            audits += _audit_version(config, entry, oracle, progress)
            if config.mark_key is not None:
                audits.append(_audit_marks(config, entry, oracle, progress))
            traces += _trace_sweep(config, entry, version_target, oracle)
            redraws += audit_against_redrawn_references(config, entry, version_target, oracle)
        frames = _frames(versions, audits, traces, redraws)
        wall = time.monotonic() - started
        title = f"ema grid unlearning: removing {config.forget} from {target.label} ({target.data})"
        tables = render_tables(*frames[:3], redraws=frames[3], config=config, title=title, wall_seconds=wall)
        figure = trace_figure(summarise_traces(frames[2]), alpha=config.alpha)
        log_metrics(
            {
                keys.METRIC_WALL_SECONDS: wall,
                keys.METRIC_N_AUDITED: float(len(frames[1])),
                keys.METRIC_N_REUSED: float(n_reused),  # unlearned versions found in the registry
            }
        )
        log_artifacts_atomically(
            {
                keys.ARTIFACT_TABLES_MD: tables.markdown,
                keys.ARTIFACT_TABLES_HTML: tables.html_page,
                keys.ARTIFACT_CELLS: frames[1],
                "versions.csv": frames[0],
                "traces.csv": frames[2],
                **({REDRAWS_CSV: frames[3]} if config.reference_seeds else {}),
                keys.ARTIFACT_GRID_CONFIG: {**config.logged(), "target": target.model_uri},
                keys.ARTIFACT_TRACES_PNG: figure,
                keys.ARTIFACT_REPORT: render_grid_report(
                    title,
                    tables_html=tables.html_fragment,
                    tables_style=tables.style,
                    figures={keys.ARTIFACT_TRACES_PNG: figure},
                    notes={"target": target.model_uri, "versions": len(versions), "wall time (s)": round(wall)},
                ),
            }
        )
    config_hash = short_hash({**config.params(), keys.PARAM_TARGET_URI: target.model_uri})
    for entry in versions:
        record_grid_on_version(entry.version, UNLEARNING_GRID, parent.info.run_id, config_hash, len(frames[1]))
    return UnlearningOutcome(parent.info.run_id, target.model_uri, *frames, tables.markdown, wall, n_reused)


def _grid_target(config: UnlearningGridConfig, progress: bool) -> Target:
    """The given registered target, or the benchmark recipe trained on the grid's data (cached).

    The trace sweep's sizes are checked against the forget set before anything is trained.
    """
    model_uri = config.model_uri
    own_files = None  # a given model is the user's choice, run as its flavor loads it
    if model_uri is None:
        recipe = dataclasses.replace(BENCHMARK_RECIPE, epochs=config.epochs or BENCHMARK_RECIPE.epochs)
        data, data_seed = config.data or DEFAULT_DATA, config.data_seed or 0
        log_params({keys.PARAM_DATA: data, keys.PARAM_DATA_SEED: data_seed, keys.PARAM_EPOCHS: recipe.epochs})
        _check_sizes(config, load_splits(data, data_seed, config.data_root), data)
        entry, _ = ensure_target(recipe, data=data, data_seed=data_seed, data_root=config.data_root, progress=progress)
        model_uri, own_files = entry.version.uri, entry.path
    target = resolve_target(model_uri, own_files=own_files)
    if target.version is None:
        raise InputError(f"expected a registered target models:/NAME@ALIAS or models:/NAME/VERSION, got {model_uri!r}")
    _check_sizes(config, target.splits(), target.label)
    if config.mark_key is not None:
        _check_marked_forget_set(config, target)
    log_params({keys.PARAM_TARGET_URI: target.model_uri})
    return target


def _check_marked_forget_set(config: UnlearningGridConfig, target: Target) -> None:
    """Refuse a mark key unless the target's lineage records the key's marked copy as its forget set.

    Otherwise the grid would unlearn a forget set that holds no mark, and every version's
    ``not_memorized`` would say nothing. The key is read here, inside the grid's run.
    """
    key = read_key(config.mark_key)
    recorded = target.version.tags.get(f"{keys.TAG_DATA_FOLD_PREFIX}{config.forget}")
    if recorded != key.fingerprint:
        got = f"an owner's file fingerprinted {recorded}" if recorded else f"the splits' own {config.forget}"
        raise InputError(
            f"expected --model trained on this mark key's marked copy (fingerprint {key.fingerprint}) in place of the "
            f"forget set {config.forget}, got {target.label} trained on {got}: train with "
            f"`ema train --fold {config.forget}=MARKED_FILE` and pass that version, or the key of its file"
        )


def _check_sizes(config: UnlearningGridConfig, splits: Splits, where: str) -> None:
    """Refuse trace sweep sizes larger than the forget set (no subset of them exists)."""
    n_forget = len(splits.query(config.forget))
    if max(config.sizes) > n_forget:
        raise InputError(
            f"expected trace sweep sizes (--sizes) of at most {n_forget}, the size of the forget set {config.forget} "
            f"of {where}, got {', '.join(str(s) for s in config.sizes if s > n_forget)}"
        )


def _accuracies(config: UnlearningGridConfig, target: Target) -> dict[str, float]:
    """The target's accuracies on the data an unlearned version keeps, the forget set and held-out data."""
    splits, oracle = target.splits(), target.oracle()
    forget = splits.query(config.forget)
    sets = {
        keys.METRIC_RETAIN_ACCURACY: member_reference(target, forget).data,
        keys.METRIC_FORGET_ACCURACY: forget,
        keys.METRIC_TEST_ACCURACY: splits.held_out,
    }
    return {name: float((oracle.predict_proba(d.x).argmax(1) == d.y).mean()) for name, d in sets.items()}


def _audit_version(config: UnlearningGridConfig, entry: Version, oracle, progress: bool) -> list[dict]:
    """The version's audits of the three query sets: one row per (query set, auditor)."""
    rows = []
    for role, query in zip(SET_ROLES, (config.forget, config.retained, config.held_out), strict=True):
        outcomes = {
            method: _audit(
                config,
                entry,
                oracle,
                progress,
                query,
                method,
                **({"margin": config.margin} if certifies_margin(method) else {}),
            )
            for method in AUDIT_METHODS
        }
        rows += [
            _audit_row(entry, role, query, auditor, outcomes[method], metric)
            for auditor, (method, metric) in AUDITORS.items()
        ]
    return rows


def _audit_marks(config: UnlearningGridConfig, entry: Version, oracle, progress: bool) -> dict:
    """The version's marks audit (the key's trigger on the first held-out images): one row, under the forget set."""
    options = {"mark_key": config.mark_key, "queries": config.mark_queries}
    outcome = _audit(config, entry, oracle, progress, config.held_out, MARKS, **options)
    return _audit_row(entry, SET_ROLES[0], config.held_out, MARKS, outcome, method_spec(MARKS).headline)


def _audit(config: UnlearningGridConfig, entry: Version, oracle, progress: bool, query: str, method: str, **options):
    """One audit run of the version on ``query`` by ``method`` (``options``: that method's own), nested in the grid."""
    audit_config = AuditConfig(
        model_uri=entry.version.uri,
        query=query,
        method=method,
        alpha=config.alpha,
        cal_seed=config.cal_seed,
        **options,
    )
    return audit(audit_config, oracle=oracle, tag_version=False, progress=progress)


def _audit_row(entry: Version, role: str, query: str, auditor: str, outcome, metric: str) -> dict:
    """One row of the audits frame: the auditor's verdict and ``metric`` on the query set of ``role``."""
    result = outcome.results[auditor]
    return {
        "method": entry.method,
        "seed": entry.seed,
        "version": entry.version.version,
        "set": role,
        "query": query,
        "auditor": auditor,
        "verdict": result.verdict,
        "value": result.metrics.get(metric, np.nan),
        "p_too_forgotten": result.metrics.get("p_too_forgotten", np.nan),
        "retained_ci_high": result.metrics.get("retained_ci_high", np.nan),
        "run_id": outcome.run_id,
    }


def _trace_sweep(config: UnlearningGridConfig, entry: Version, target: Target, oracle) -> list[dict]:
    """Seeded forget-set subsets of each size audited by the calibrated auditor; one row per draw."""
    forget = target.splits().query(config.forget)
    members = member_reference(target, forget).data
    nonmembers = nonmember_reference(target).data
    auditor = ReferenceAuditor(alpha=config.alpha).calibrate(
        oracle.predict_proba(members.x), members.y, oracle.predict_proba(nonmembers.x), nonmembers.y
    )
    proba = oracle.predict_proba(forget.x)
    rng = np.random.default_rng([config.sample_seed, entry.seed if entry.seed is not None else 0])
    rows = []
    for size in config.sizes:
        for draw in range(config.n_draws):
            chosen = rng.choice(len(forget), size=size, replace=False)
            metrics = auditor.audit(proba[chosen], forget.y[chosen]).metrics
            rows.append(
                {
                    "method": entry.method,
                    "seed": entry.seed,
                    "size": size,
                    "draw": draw,
                    TRACE_KINDS[0]: metrics["p_removed"] <= config.alpha / 2,
                    TRACE_KINDS[1]: metrics["p_too_forgotten"] <= config.alpha / 2,
                }
            )
    return rows


def audit_against_redrawn_references(
    config: UnlearningGridConfig, entry: Version, target: Target, oracle
) -> list[dict]:
    """The whole forget set audited by the calibrated auditor against one redrawn non-member reference per
    reference seed (``config.reference_seeds``); one row per seed, none without them.

    The member reference is the version's, the forget set left out (as in its audit runs). The
    non-member reference has the usual reference's size and is drawn, by the reference seed alone
    (the same draw on every version), from the usual reference and the held-out set together:
    data the target never saw, none of it the forget set.
    """
    if not config.reference_seeds:
        return []
    splits = target.splits()
    forget = splits.query(config.forget)
    members = member_reference(target, forget).data
    usual, held_out = nonmember_reference(target).data, splits.query(config.held_out)
    pool_x, pool_y = np.concatenate([usual.x, held_out.x]), np.concatenate([usual.y, held_out.y])
    pool_proba = oracle.predict_proba(pool_x)
    member_proba, forget_proba = oracle.predict_proba(members.x), oracle.predict_proba(forget.x)
    rows = []
    for reference_seed in config.reference_seeds:
        chosen = np.random.default_rng(reference_seed).choice(pool_y.size, size=len(usual), replace=False)
        auditor = ReferenceAuditor(alpha=config.alpha, margin=config.margin).calibrate(
            member_proba, members.y, pool_proba[chosen], pool_y[chosen]
        )
        result = auditor.audit(forget_proba, forget.y)
        reference = fingerprint(pool_x[chosen], pool_y[chosen])
        rows.append({**_redraw_row(entry, reference_seed, reference, result), "n_reference": int(chosen.size)})
    return rows


def _redraw_row(entry: Version, reference_seed: int, reference: str, result) -> dict:
    """One row of the redraws frame: the verdict at the grid's margin and at the certifiable margin, the numbers."""
    metrics = result.metrics
    return {
        "method": entry.method,
        "seed": entry.seed,
        "reference_seed": reference_seed,
        "reference": reference,
        "verdict": result.verdict,
        "verdict_auto": decide_reference_verdict(
            metrics["p_removed"],
            metrics["p_retained"],
            metrics["retained_upper_bound"],
            alpha=result.alpha,
            margin=metrics["certifiable_margin"],
        ),
        **{name: metrics[name] for name in REDRAW_METRICS},
    }


def _frames(
    versions: list[Version], audits: list[dict], traces: list[dict], redraws: list[dict]
) -> tuple[pd.DataFrame, ...]:
    """Versions (accuracies, time), audits, trace draws and redrawn-reference audits as frames, in method order."""
    version_rows = [{"method": v.method, "seed": v.seed, "version": v.version.version, **v.metrics} for v in versions]
    return pd.DataFrame(version_rows), pd.DataFrame(audits), pd.DataFrame(traces), pd.DataFrame(redraws)
