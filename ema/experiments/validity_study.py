"""Wire the validity study: train both targets, score the pools once, audit many seeded draws, log."""

from __future__ import annotations

import re

import pandas as pd

from ema.auditors import EMAAuditor
from ema.data.embedded import load_digits_28
from ema.experiments.validity import TARGET_RECIPES, ErrorGridConfig, ScoredPools, audit_draws, summarize
from ema.experiments.validity_plots import plot_error_rates, rates_table
from ema.signals import PAPER_SIGNALS
from ema.tracking import keys
from ema.tracking.runs import log_artifacts_atomically, log_params, start_run
from ema.training.spec import TrainSpec
from ema.workflows.audit import fit_calibrated
from ema.workflows.cached_models import cached_model
from ema.workflows.calibrate import CalibrationPlan, ensure_plan
from ema.workflows.target import Target, resolve_target
from ema.workflows.train import train_target


def score_pools(target: Target, oracle) -> ScoredPools:
    """Members (the training folds), held-out MNIST and all scikit-learn digits, scored once through the target."""
    splits = target.splits()
    pools = ScoredPools({"members": splits.train, "same-domain": splits.held_out, "other-domain": load_digits_28()})
    pools.proba = {name: oracle.predict_proba(data.x) for name, data in pools.sets.items()}
    return pools


def audit_target(
    spec: TrainSpec, label: str, config: ErrorGridConfig, *, k: int, cal_seed: int, progress: bool
) -> pd.DataFrame:
    """Train and register one target, then audit every draw; returns the summary rows of this target."""
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")[:40]
    trained = train_target(spec, model_name=f"ema-errors-{slug}", progress=progress)
    target = resolve_target(trained.version.uri)
    oracle = target.oracle(outputs="probabilities")
    pools = score_pools(target, oracle)
    plan = CalibrationPlan.for_target(target, k=k, cal_seed=cal_seed, model_name=keys.CALIBRATION_MODEL_NAME)
    ema = EMAAuditor.from_dict(
        ensure_plan(plan, progress=progress).thresholds, signals=PAPER_SIGNALS, alpha=config.alpha
    )
    calibrated, _ = fit_calibrated(target, oracle, plan, alpha=config.alpha, progress=progress)
    calset_model, _ = cached_model(target, "calset-model", plan.corrupted(), progress=progress)

    def fit_query_model(images):
        return target.recipe.fit(images.pixels(), images.y, progress=False).predict_proba(images.pixels())

    draws = audit_draws(
        pools, ema, calibrated, (fit_query_model, calset_model.predict_proba), config, progress=progress
    )
    return summarize(draws).assign(
        target=label, train_accuracy=trained.train_accuracy, held_out_accuracy=trained.held_out_accuracy
    )


def run_error_grid(
    config: ErrorGridConfig = ErrorGridConfig(),
    *,
    recipes: dict[str, TrainSpec] = TARGET_RECIPES,
    k: int = 100,
    cal_seed: int = 0,
    progress: bool = True,
) -> pd.DataFrame:
    """The validity study as one parent run; logs the summary CSV, a Markdown table and the figure."""
    with start_run("grid errors"):
        log_params(
            {
                keys.PARAM_GRID: "errors",
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
                audit_target(spec, label, config, k=k, cal_seed=cal_seed, progress=progress)
                for label, spec in recipes.items()
            ],
            ignore_index=True,
        )
        log_artifacts_atomically(
            {
                keys.ARTIFACT_ERROR_RATES_PNG: plot_error_rates(summary, alpha=config.alpha),
                keys.ARTIFACT_ERROR_RATES_CSV: summary,
                keys.ARTIFACT_ERROR_RATES_MD: rates_table(summary),
            }
        )
    return summary
