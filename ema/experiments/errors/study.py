"""Wire the validity study: train the targets, score the pools once, audit many seeded draws, log."""

from __future__ import annotations

import dataclasses
import re

import pandas as pd

from ema.auditors import EMAAuditor
from ema.auditors.reference import ReferenceAuditor
from ema.data.presets import load_splits
from ema.data.splits import Splits
from ema.experiments.errors.plots import plot_error_rates, rates_table
from ema.experiments.errors.validity import (
    TARGETS,
    ErrorGridConfig,
    ScoredPools,
    StudyTarget,
    audit_draws,
    check_sizes_fit,
    studied_kinds,
    summarize,
)
from ema.signals import PAPER_SIGNALS
from ema.tracking import keys
from ema.tracking.runs import log_artifacts_atomically, log_params, start_run
from ema.training.recipes import proba_over_classes
from ema.workflows.audit import fit_calibrated
from ema.workflows.cached_models import cached_model
from ema.workflows.calibrate import CalibrationPlan, ensure_plan, planned_helper
from ema.workflows.references import nonmember_reference, without_query
from ema.workflows.target import Target, resolve_target
from ema.workflows.train import train_target


def pool_sets(splits: Splits) -> dict:
    """The pools query sets are drawn from: member fold M1, held-out M6 and, where the splits have one, S."""
    sets = {"members": splits.query("M1"), "same-domain": splits.held_out}
    return sets if splits.other_domain is None else {**sets, "other-domain": splits.other_domain}


def check_targets_fit(config: ErrorGridConfig, targets: dict[str, StudyTarget]) -> None:
    """Refuse a query size some target's pools cannot draw, before any target is trained (the splits of data seed 0,
    which :func:`train_target` draws)."""
    for label, study in targets.items():
        pools = pool_sets(load_splits(study.data, 0, study.data_root))
        check_sizes_fit(config.sizes, {kind: len(data) for kind, data in pools.items()}, config.kinds, label)


def score_pools(target: Target, oracle) -> ScoredPools:
    """The target's :func:`pool_sets`, scored once on the target."""
    pools = ScoredPools(pool_sets(target.splits()))
    pools.proba = {name: oracle.predict_proba(data.x) for name, data in pools.sets.items()}
    return pools


def reference_auditor(target: Target, oracle, *, alpha: float) -> ReferenceAuditor:
    """The calibrated auditor as ``ema audit --method calibrated`` runs it: folds M2..M5 and the calibration set."""
    splits = target.splits()
    members = without_query(splits.train, splits.query("M1"))
    nonmembers = nonmember_reference(target).data
    return ReferenceAuditor(alpha=alpha).calibrate(
        oracle.predict_proba(members.x), members.y, oracle.predict_proba(nonmembers.x), nonmembers.y
    )


def audit_target(
    label: str, study: StudyTarget, config: ErrorGridConfig, *, k: int, cal_seed: int, progress: bool
) -> pd.DataFrame:
    """Train and register one target, then audit every draw; returns the summary rows of this target."""
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")[:40]
    trained = train_target(
        study.spec, data=study.data, data_root=study.data_root, model_name=f"ema-errors-{slug}", progress=progress
    )
    target = resolve_target(trained.version.uri)
    oracle = target.oracle(outputs="probabilities")
    pools = score_pools(target, oracle)
    plan = CalibrationPlan.for_target(target, k=k, cal_seed=cal_seed, model_name=keys.CALIBRATION_MODEL_NAME)
    auditors = {
        "ema": EMAAuditor.from_dict(
            ensure_plan(plan, progress=progress).thresholds, signals=PAPER_SIGNALS, alpha=config.alpha
        ),
        "calibrated": reference_auditor(target, oracle, alpha=config.alpha),
        "transfer": fit_calibrated(
            oracle, planned_helper(plan, progress=progress), nonmember_reference(target), alpha=config.alpha
        )[0],
    }
    n_classes = pools.proba["members"].shape[1]
    calset_model, _ = cached_model(target, "calset-model", plan.corrupted(), n_classes=n_classes, progress=progress)

    def fit_query_model(images):
        """f_Dq, trained with the target's recipe on the drawn query set, scored on it over the target's classes."""
        inputs = images.model_inputs()
        model = target.require_recipe().fit(inputs, images.y, progress=False, n_classes=n_classes)
        return proba_over_classes(model, inputs, n_classes)

    config = dataclasses.replace(config, kinds=studied_kinds(config.kinds, pools.sets))
    draws = audit_draws(pools, auditors, (fit_query_model, calset_model.predict_proba), config, progress=progress)
    return summarize(draws).assign(
        target=label, train_accuracy=trained.train_accuracy, held_out_accuracy=trained.held_out_accuracy
    )


def run_error_grid(
    config: ErrorGridConfig = ErrorGridConfig(),
    *,
    targets: dict[str, StudyTarget] = TARGETS,
    k: int = 100,
    cal_seed: int = 0,
    progress: bool = True,
) -> pd.DataFrame:
    """The validity study as one parent run; logs the summary CSV, a Markdown table and the figure.

    Raises
    ------
    InputError
        Before any run starts, if a query size is larger than a target's pools hold.
    """
    check_targets_fit(config, targets)
    with start_run("grid errors"):
        log_params(
            {
                keys.PARAM_GRID: "errors",
                keys.PARAM_DATA: ",".join(dict.fromkeys(study.data for study in targets.values())),
                keys.PARAM_SIZES: ",".join(map(str, config.sizes)),
                keys.PARAM_N_DRAWS: config.n_draws,
                keys.PARAM_N_KS_DRAWS: config.n_ks_draws,
                keys.PARAM_ALPHA: config.alpha,
                keys.PARAM_SEED: config.seed,
                keys.PARAM_K: k,
            }
        )
        summary = pd.concat(
            [
                audit_target(label, study, config, k=k, cal_seed=cal_seed, progress=progress)
                for label, study in targets.items()
            ],
            ignore_index=True,
        )
        log_artifacts_atomically(
            {
                keys.ARTIFACT_ERROR_RATES_PNG: plot_error_rates(summary, alpha=config.alpha),
                keys.ARTIFACT_ERROR_RATES_CSV: summary,
                keys.ARTIFACT_ERROR_RATES_MD: rates_table(summary, kinds=config.kinds),
            }
        )
    return summary
